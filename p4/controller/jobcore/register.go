package jobcore

// Registration: ranks gathering into a job, and jobs that cannot form or
// cannot have the switch (the ring, or a failure).

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strconv"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc/codes"
)

// Register enters a rank, whose registration passed Check, into its job
// on behalf of client (the caller's identity, whose quota a new job counts
// against); w waits for the job to be programmed. A registration into a programmed job, or a second one
// from rank 0, is a new run of the job: the old generation goes away.
func (c *Core) Register(w Waiter, chk Checked, client string, now time.Time) error {
	req, addrs, ringWhy := chk.req, chk.addrs, chk.ringWhy
	if req == nil {
		return Invalid("a registration goes through Check first")
	}
	name, rank := req.GetJob(), req.GetRank()
	owner := sha256.Sum256([]byte(req.GetToken()))
	j := c.jobs[name]
	if j != nil && subtle.ConstantTimeCompare(j.owner[:], owner[:]) != 1 {
		return Refuse(codes.PermissionDenied, "job %q belongs to another owner: its ranks registered with a different token (pick another job name, or use the job's token)", name)
	}
	if j != nil && j.open() && (j.state >= jobInstalling || j.ranks[rank] != nil) {
		// Without a token nothing tells the rank's own process, starting
		// again, from anyone else: the job goes on.
		return Refuse(codes.PermissionDenied, "job %q rank %d is taken: the job runs without a token, so it can be neither joined twice nor restarted by a registration (wait for it to end, or pick another job name; give every rank a token, switchml.Config.Token, to restart a job in place)", name, rank)
	}
	if j == nil {
		if err := c.endedOwner(name, owner, now); err != nil {
			return err
		}
	}
	if err := c.addressesFree(name, owner, addrs); err != nil {
		return err
	}
	replaces := j != nil && (j.state >= jobInstalling || (rank == 0 && j.ranks[0] != nil))
	if j == nil && len(c.jobs) >= maxJobs {
		return Refuse(codes.ResourceExhausted, "the controller holds %d jobs, its limit; wait for one to end", maxJobs)
	}
	if j == nil || replaces {
		if err := c.withinQuota(client, req, j); err != nil {
			var tooBig *TooBig
			if req.GetFallbackAddress() == "" || !errors.As(err, &tooBig) {
				return err
			}
			// Over its slot quota, a job that may run over the ring
			// goes there.
			ringWhy = err.Error()
		}
	}
	cost := RegistrationCost(req)
	need := cost
	if j != nil && !replaces {
		if old := j.ranks[rank]; old != nil && old.client == client {
			need -= old.cost // it replaces its own earlier registration
		}
	}
	if err := c.withinBytes(client, need, "this registration"); err != nil {
		return err
	}
	if replaces {
		c.retire(j, EndRestarted, "restarted: rank "+strconv.Itoa(int(rank))+" registered again")
		j = nil
	}
	if j == nil {
		if err := c.lateForUnformed(req, owner, now); err != nil {
			return err
		}
		j = c.newJob(name, int(req.GetWorldSize()))
		j.params, j.owner, j.client, j.registeredAt = req, owner, client, now
		c.addJob(j)
		if j.open() {
			c.log.Info("controller: open job: it has no token, so any client that reaches the job service may join it; give its ranks a token (switchml.Config.Token)", "job", name, "client", client)
		}
	} else if m := mismatch(j.params, req); m != "" {
		err := Refuse(codes.FailedPrecondition, "job %q rank %d: %s", name, rank, m)
		c.CannotForm(req, client, err, now)
		return err
	}
	delete(j.expired, rank)
	if old := j.ranks[rank]; old != nil && old.by != 0 && old.by != w {
		// Its call would wait on holding what it sent: it is answered.
		c.reply(old.by, Answer{err: Refuse(codes.Aborted, "job %q rank %d registered again, and the newer registration replaces this one", name, rank)})
	}
	c.setRank(j, rank, &registration{req: req, addrs: addrs, by: w, client: client, cost: cost})
	if ringWhy != "" {
		j.ringWhy = ringWhy
	}
	c.addWait(w, &wait{kind: waitRegister, job: j, rank: rank})
	if j.state == jobGathering && j.arrived == len(j.ranks) {
		j.state, j.queuedAt = jobQueued, now
		c.place(now)
	}
	return nil
}

// CannotForm ends the gathering job a refused registration was for, when
// the Refusal is one that waiting cannot mend (a rank of another world
// size, an address the switch cannot reach, a malformed request): the
// ranks already waiting fail at once with the cause, naming the rank,
// instead of waiting out the join timeout for it. Only a registration with
// the job's token can end it; a job without a token, only one from the
// client identity that started it (client). Anyone else's refusal leaves
// the job gathering.
func (c *Core) CannotForm(req *jobpb.RegisterRequest, client string, err error, now time.Time) {
	switch CodeOf(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
	default:
		return // Unavailable, AlreadyExists, ResourceExhausted may pass
	}
	j := c.jobs[req.GetJob()]
	if j == nil || j.state != jobGathering {
		return
	}
	owner := sha256.Sum256([]byte(req.GetToken()))
	if subtle.ConstantTimeCompare(j.owner[:], owner[:]) != 1 || (j.open() && client != j.client) {
		return
	}
	cause := Refuse(codes.FailedPrecondition, "job %q cannot form: rank %d was refused: %v", j.name, req.GetRank(), err)
	u := &unformedJob{owner: j.owner, at: now, cause: cause, registered: map[uint32]bool{}}
	for r, reg := range j.ranks {
		if reg != nil {
			u.registered[uint32(r)] = true
		}
	}
	for name, old := range c.unformed { // few: each lives unformedFor
		if now.Sub(old.at) >= unformedFor {
			delete(c.unformed, name)
		}
	}
	if len(c.unformed) < maxJobs {
		c.unformed[j.name] = u
	}
	c.fail(j, cause)
}

// openOwner is the owner of a job whose ranks registered without a token.
var openOwner = sha256.Sum256(nil)

// open reports whether the job's ranks registered without a token.
func (j *job) open() bool { return j.owner == openOwner }

// ownerKept is how long the core remembers the owner of a job with a
// token after it ended, and maxOwnersKept how many it remembers at most.
const (
	ownerKept     = time.Minute
	maxOwnersKept = maxJobs
)

// endedJob is the owner of a job with a token that ended, and when (zero
// until the next step that tells the time: the core reads no clock).
type endedJob struct {
	owner [32]byte
	at    time.Time
}

// keepOwner remembers the owner of a job with a token that ended, so that
// for ownerKept its name stays its owner's: between two runs of a job
// (one per epoch, a restart) nobody else takes the name. A job taken back
// from the switch by its claim keeps its name so too; one found there
// without a claim has no name to keep. The oldest are forgotten first past
// maxOwnersKept.
func (c *Core) keepOwner(j *job) {
	if j.open() || j.name == "" {
		return
	}
	if _, ok := c.owners[j.name]; !ok && len(c.owners) >= maxOwnersKept {
		oldest, first := "", true
		for name, e := range c.owners {
			if first || (!e.at.IsZero() && (c.owners[oldest].at.IsZero() || e.at.Before(c.owners[oldest].at))) {
				oldest, first = name, false
			}
		}
		delete(c.owners, oldest)
	}
	c.owners[j.name] = endedJob{owner: j.owner}
	c.unstamped = append(c.unstamped, j.name)
}

// stampOwners dates the owners kept since the last step that told the
// time.
func (c *Core) stampOwners(now time.Time) {
	for _, name := range c.unstamped {
		if e, ok := c.owners[name]; ok && e.at.IsZero() {
			e.at = now
			c.owners[name] = e
		}
	}
	c.unstamped = c.unstamped[:0]
}

// endedOwner refuses a registration that would start a job anew under the
// name of a job with another owner's token that ended within ownerKept.
func (c *Core) endedOwner(name string, owner [32]byte, now time.Time) error {
	c.stampOwners(now)
	e, ok := c.owners[name]
	if !ok {
		return nil
	}
	if now.Sub(e.at) >= ownerKept || subtle.ConstantTimeCompare(e.owner[:], owner[:]) == 1 {
		delete(c.owners, name)
		return nil
	}
	return Refuse(codes.PermissionDenied, "job %q ended less than %v ago and belongs to another owner: its ranks registered with a different token (pick another job name, or use the job's token)", name, ownerKept)
}

// unformedFor is how long a job that could not form is remembered for the
// late ranks of its run.
const unformedFor = 5 * time.Second

// unformedJob is a gathering job that could not form: its owner, its
// ranks that had registered, when, and why.
type unformedJob struct {
	owner      [32]byte
	registered map[uint32]bool
	at         time.Time
	cause      error
}

// lateForUnformed refuses, with the cause, a registration that would start
// a job anew under a name whose gathering job could not form moments ago,
// from a rank that was not in it: a late rank of the same run, whose peers
// have gone. A rank that was in it registering again is a new run, and
// clears the memory.
func (c *Core) lateForUnformed(req *jobpb.RegisterRequest, owner [32]byte, now time.Time) error {
	u := c.unformed[req.GetJob()]
	if u == nil {
		return nil
	}
	switch {
	case now.Sub(u.at) >= unformedFor || subtle.ConstantTimeCompare(u.owner[:], owner[:]) != 1:
		return nil
	case u.registered[req.GetRank()]:
		delete(c.unformed, req.GetJob())
		return nil
	}
	return Refuse(codes.FailedPrecondition, "%v (its other ranks were told and have gone: start every rank again, with the same settings)", u.cause)
}

// withinQuota refuses a new job of client's when the client's jobs
// (gathering or running; replacing, the one it replaces aside) already
// reach its limit, or would need more than its slots. A job larger than
// the whole pool is not held to the slot quota: it never holds slots, and
// placing it says why.
func (c *Core) withinQuota(client string, req *jobpb.RegisterRequest, replacing *job) error {
	if c.cfg.MaxJobsPerClient <= 0 && c.cfg.MaxSlotsPerClient <= 0 {
		return nil
	}
	jobs, slots := 0, 0
	for _, j := range c.jobs {
		if j.client == client && j != replacing {
			jobs++
			slots += int(j.params.GetLanes() * j.params.GetWindow())
		}
	}
	if limit := c.cfg.MaxJobsPerClient; limit > 0 && jobs >= limit {
		return Refuse(codes.ResourceExhausted, "client %s holds %d jobs, the limit per client (the controller's {MaxJobsPerClient}); wait for one of them to end", client, jobs)
	}
	need := int(req.GetLanes() * req.GetWindow())
	if limit := c.cfg.MaxSlotsPerClient; limit > 0 && slots+need > limit && need <= c.cfg.Slots {
		return &TooBig{Refuse(codes.ResourceExhausted, "client %s would hold %d slots with this job's lanes*window = %d, over the limit of %d per client (the controller's {MaxSlotsPerClient}), by default half the pool; lower window or lanes, or wait for a job to end",
			client, slots+need, need, limit).(*Refusal)}
	}
	return nil
}

// ringAddresses lists every rank's ring address in rank order, or nil
// unless every rank gave one.
func (j *job) ringAddresses() []string {
	addrs := make([]string, len(j.ranks))
	for r, reg := range j.ranks {
		if reg == nil || reg.req.GetFallbackAddress() == "" {
			return nil
		}
		addrs[r] = reg.req.GetFallbackAddress()
	}
	return addrs
}

// cannotPlace ends a generation the switch cannot take: over the ring, if
// every rank may go there, else as a failure.
func (c *Core) cannotPlace(j *job, err error) {
	if addrs := j.ringAddresses(); addrs != nil {
		c.fallback(j, err.Error(), addrs)
		return
	}
	c.fail(j, err)
}

// fallback answers every rank of a generation the switch cannot take with
// the reason and the ring's addresses: the job runs over the ring, without
// the switch or a session on this controller.
func (c *Core) fallback(j *job, why string, addrs []string) {
	c.dropJob(j)
	c.keepOwner(j)
	j.state, j.cause = jobGone, "fell back to the ring: "+why
	c.endings[EndFallback]++
	c.log.Warn("controller: job runs over the ring", "job", j.name, "workers", len(j.ranks), "why", why)
	resp := &jobpb.RegisterResponse{Fallback: why, FallbackAddresses: addrs}
	for _, w := range j.waitsOf(waitRegister) {
		c.reply(w, Answer{resp: resp})
	}
}

// fail ends a generation that could not run, answering its registrations
// with err.
func (c *Core) fail(j *job, err error) {
	c.dropJob(j)
	c.keepOwner(j)
	j.state, j.err, j.cause = jobGone, err, err.Error()
	c.endings[EndFailed]++
	c.log.Warn("controller: job failed", "job", j.name, "err", err)
	for _, w := range j.waitsOf(waitRegister) {
		c.reply(w, Answer{err: err})
	}
}
