// Package jobcore is the controller's job core: a deterministic state
// machine holding the job table, pool partitions, switch job ids and
// multicast groups, leases, barrier and broadcast rounds, adoption of the
// jobs a restarted controller finds on the switch, and each job's life. It
// decides who may do what: a session's calls carry their rank's secret
// (keys.go), each client identity holds a bounded share of jobs and slots,
// and jobs that do not gather or whose ranks do not take their leases in
// time end (lease.go).
//
// Its driver (the controller's JobService) feeds it calls, the switch's
// reports and the time, and carries out what Ready hands back: answers to
// waiting calls, and placements to install on the switch or remove from it,
// as plain data the driver turns into P4Runtime entries. The driver reads
// the core through its methods and snapshots (Gauges, StatusJobs), never
// its fields. The core does no I/O, starts no goroutines and reads no
// clock, so tests step it directly and every run of the same inputs gives
// the same outputs. It is not safe for concurrent use.
package jobcore

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Bounds on what clients can make the controller hold.
const (
	maxJobs         = 4096 // jobs gathering or active
	MaxRoundsPerJob = 1024 // barrier and broadcast names per job
	// endedRemembered bounds how many ended sessions keep their cause.
	endedRemembered = 4096
	// maxNameLen bounds job, barrier and broadcast names, maxTokenLen a
	// job's token: the controller stores and logs them.
	maxNameLen  = 256
	maxTokenLen = 1024
	// maxReasonLen bounds the reason an Abort keeps.
	maxReasonLen = 512
	// maxBroadcastData bounds one broadcast's data, maxBroadcastHeld what
	// one job's broadcasts hold at once until every rank fetched them.
	maxBroadcastData = 1 << 20
	maxBroadcastHeld = 16 << 20
)

// Refusal is how the core says no: a message for the caller and the gRPC
// code that tells a client how to take it.
type Refusal struct {
	code codes.Code
	msg  string
}

func (r *Refusal) Error() string { return r.msg }

// GRPCStatus makes a refusal a gRPC error with its code.
func (r *Refusal) GRPCStatus() *status.Status { return status.New(r.code, r.msg) }

// Refuse makes a refusal with code.
func Refuse(code codes.Code, format string, args ...any) error {
	return &Refusal{code: code, msg: fmt.Sprintf(format, args...)}
}

// Invalid makes a refusal of a malformed request (InvalidArgument).
func Invalid(format string, args ...any) error {
	return Refuse(codes.InvalidArgument, format, args...)
}

// TooBig is the target's refusal (Config.Admit) of a job larger than the
// switch serves: a registration that may run over the ring is let through
// anyway, and its job goes there.
type TooBig struct{ *Refusal }

func (e *TooBig) Unwrap() error { return e.Refusal }

// CodeOf is the code of a Refusal (Unknown for any other error).
func CodeOf(err error) codes.Code {
	var r *Refusal
	switch {
	case err == nil:
		return codes.OK
	case errors.As(err, &r):
		return r.code
	}
	return codes.Unknown
}

// jobState is where one generation of a job is in its life. It only moves
// forward; a job that ends before it runs skips to jobGone.
type jobState uint8

const (
	// jobGathering: ranks are registering.
	jobGathering jobState = iota
	// jobQueued: every rank is in, and the job waits for retired jobs'
	// entries to leave the switch before it is given room.
	jobQueued
	// jobInstalling: the job holds a partition, a group and a switch job
	// id, and the switch is being programmed for it.
	jobInstalling
	// jobActive: the session runs.
	jobActive
	// jobDraining: retired; its entries are being removed from the
	// switch, and its partition, group and id stay taken until then.
	jobDraining
	// jobGone: over and holding nothing; job.cause says why.
	jobGone
)

func (s jobState) String() string {
	switch s {
	case jobGathering:
		return "gathering"
	case jobQueued:
		return "queued"
	case jobInstalling:
		return "installing"
	case jobActive:
		return "active"
	case jobDraining:
		return "draining"
	case jobGone:
		return "gone"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// retired reports whether the generation has ended (or is ending).
func (s jobState) retired() bool { return s >= jobDraining }

// Waiter names a call that waits for the core's answer. The driver hands
// them out in increasing order, so ordering by Waiter is arrival order.
type Waiter uint64

type waitKind uint8

const (
	waitRegister waitKind = iota
	waitBarrier
	waitBroadcast
	waitLease
)

// wait is a call the core has not answered yet.
type wait struct {
	kind waitKind
	job  *job
	rank uint32
	// Rounds: the name as the caller gave it, the round joined, and the
	// barrier call count.
	name  string
	set   *roundSet
	k     int
	round *round
	seq   uint64
}

// Answer is the core's reply to a waiting call.
type Answer struct {
	to    Waiter
	resp  *jobpb.RegisterResponse // a registration's
	data  []byte                  // a broadcast's
	ended string                  // a lease's: why the job ended
	cause EndCause                // a lease's: the cause's class
	err   error
}

// To is the call the answer is for.
func (a Answer) To() Waiter { return a.to }

// Err is the refusal a call is answered with (nil: it succeeded).
func (a Answer) Err() error { return a.err }

// Registered is a registration's answer: its session, or the ring.
func (a Answer) Registered() *jobpb.RegisterResponse { return a.resp }

// Data is a broadcast's answer: the root's data.
func (a Answer) Data() []byte { return a.data }

// Ended is a lease's answer: why its job ended, and the cause's class.
func (a Answer) Ended() (why string, cause EndCause) { return a.ended, a.cause }

// Install asks the driver to make the slots of a job's partition idle and
// give the switch what the job needs there (Place), then to report with
// Installed(Gen).
type Install struct {
	Gen   uint64
	Job   string
	Place Placement
}

// Removal asks the driver to take a retired job's entries off the switch,
// then to report with Removed(Gen).
type Removal struct {
	Gen   uint64
	Job   string
	Place Placement
}

// Placement is where a job sits on the switch and what the switch holds
// for it, as plain data: the driver turns it into the target's table
// entries, multicast group and key.
type Placement struct {
	JobID uint32 // the switch job id
	// PoolBase and PoolSize are the job's partition of the pool's slots.
	PoolBase, PoolSize uint32
	Group              uint16 // the job's multicast group
	World              int    // the job's ranks
	// Workers are the job's lane sockets, whose packets the switch takes;
	// Replies are where each rank's lanes get their results. They are the
	// same lanes for a job the core placed, and each as the switch holds
	// them for a job found there.
	Workers, Replies []Lane
	// Members are the ports the job's results are replicated to.
	Members []Member
	// Key, on a switch that checks tags (Config.Keyed), is the job's
	// data-plane key; nil otherwise, and for a job found on the switch,
	// whose key cannot be read back.
	Key Key
}

// Lane is one lane socket of one rank, and its Ethernet address for
// targets that address results to it.
type Lane struct {
	Rank uint16
	Lane uint8
	Addr netip.AddrPort
	MAC  [6]byte
}

// Member is one copy of a job's results: the switch port it leaves by, and
// the rank it is for.
type Member struct {
	Port uint32
	Rank uint16
}

// Effects is what the steps since the last Ready ask the driver to do.
type Effects struct {
	Answers  []Answer
	Installs []Install
	Removals []Removal
}

// registration is one rank's registration of a job.
type registration struct {
	req   *jobpb.RegisterRequest
	addrs []netip.AddrPort // its lane addresses, parsed
	by    Waiter           // the call waiting for the job (0: none)
}

// job is one generation of a named job: from the first registration of a
// run until it is replaced or every rank left.
type job struct {
	gen   uint64 // names the generation in the driver's reports
	name  string
	state jobState
	cause string // why it was retired
	// err is what the registrations were answered with when the job could
	// not run.
	err error
	// ringWhy says why the switch cannot take the job at all (a Refusal
	// a registration that may fall back to the ring was let through with).
	ringWhy string

	params *jobpb.RegisterRequest // the first registrant's; others must agree
	owner  [32]byte               // hash of the registrants' token
	// client is the identity of the first registrant, whose quota the
	// job counts against.
	client  string
	ranks   []*registration
	arrived int
	expired map[uint32]bool // ranks whose registration timed out
	// registeredAt is the first registration (zero for a job found on the
	// switch), queuedAt when the last rank came in, activeAt when the
	// switch took its entries.
	registeredAt time.Time
	queuedAt     time.Time
	activeAt     time.Time
	// keys proves each rank's calls within the session.
	keys *rankKeys
	// held counts the broadcast bytes the job's rounds keep.
	held int

	resp    *jobpb.RegisterResponse
	place   Placement // what the switch holds for it, once placed
	left    map[uint32]bool
	leased  map[uint32]bool // ranks that took their lease on this controller
	adopted bool            // found on the switch by a restarted controller
	rounds  map[string]*roundSet
	// barrierSeq is the highest barrier count each rank has shown.
	barrierSeq map[uint32]uint64
	waits      map[Waiter]*wait
}

// roundSet numbers the successive uses of one barrier or broadcast name: a
// rank's k-th call joins round k, so a fast rank reusing a name never mixes
// with a slow rank still in the previous use.
type roundSet struct {
	key    string // its key in job.rounds
	next   map[uint32]int
	rounds map[int]*round
}

type round struct {
	complete bool // every rank arrived (barrier) or the root sent (broadcast)
	arrived  map[uint32]bool
	gaveUp   map[uint32]bool // ranks that were in it and gave up at their deadline
	fetched  int
	root     uint32
	hasRoot  bool
	data     []byte
}

// endedSession is what the core keeps of a session that ended: why, and
// how to tell its ranks' calls from anyone else's.
type endedSession struct {
	why  string
	keys *rankKeys
}

// adoption is one batch of jobs found on the switch, and when the grace
// for their ranks to come back ends.
type adoption struct {
	deadline time.Time
	found    map[uint32]*job
}

// Config configures the core.
type Config struct {
	// Dataplane is the switch's data-plane address handed to workers.
	Dataplane netip.AddrPort
	// Shards are the data-plane addresses of a switch with several
	// shards, Dataplane first; a job's lanes are spread over them.
	Shards []netip.AddrPort
	// Slots is the pool's size per set; jobs get disjoint partitions.
	Slots int
	// Admit refuses a registration the switch cannot serve (it has
	// passed the core's own checks; lanes are its lane addresses). A
	// *TooBig refusal lets a registration that may run over the ring
	// through, and its job goes there. Nil admits every registration.
	Admit func(r *jobpb.RegisterRequest, lanes []netip.AddrPort) error
	// PortOf is the switch port that reaches a rank's address (nil: the
	// rank, as on the software switch).
	PortOf func(addr netip.Addr, rank int) uint32
	// Keyed: the switch checks a tag on every packet, and each job gets a
	// data-plane key.
	Keyed  bool
	Logger *slog.Logger
	// Rand draws session ids, first sequence numbers and rank secrets.
	Rand func() uint64
	// DrainWait is how long a job whose ranks are all in waits for retired
	// jobs' entries to leave the switch before it is placed beside them.
	DrainWait time.Duration
	// LeaseGrace is how long an active job's ranks have to open their
	// leases (Watch) before the job ends; 0: no bound.
	LeaseGrace time.Duration
	// JoinTimeout is how long a job may gather before it is released
	// with the ranks that never came; 0: no bound.
	JoinTimeout time.Duration
	// MaxJobsPerClient bounds the jobs (gathering or running) one client
	// identity created, MaxSlotsPerClient the slots they need; 0: no
	// bound.
	MaxJobsPerClient  int
	MaxSlotsPerClient int
}

// Core is the job service's state machine. Its methods are steps: each one
// changes the state and queues what the driver must do, which Ready hands
// over. It is not safe for concurrent use.
type Core struct {
	cfg  Config
	log  *slog.Logger
	jobs map[string]*job // the current generation of each name, before it retires
	// installing are jobs the switch is being programmed for, draining
	// those whose entries are being removed, by generation.
	installing map[uint64]*job
	draining   map[uint64]*job
	// detached are jobs found on the switch, by switch job id, until one
	// of their ranks claims them (Watch).
	detached  map[uint32]*job
	adoptions []adoption
	// ended remembers why recent sessions ended, so that a rank asking
	// about one learns the cause (bounded: the oldest are forgotten).
	ended      map[uint64]endedSession
	endedOrder []uint64
	// unformed remembers, by name, the gathering jobs that could not form
	// (CannotForm) for unformedFor, so that a rank of that run arriving
	// late is told why at once instead of waiting alone.
	unformed map[string]*unformedJob
	waits    map[Waiter]*wait
	// offline says why the switch cannot be programmed now ("" when it
	// can).
	offline string
	lastGen uint64
	jobID   uint32 // last switch job id handed out
	out     Effects
	// endings counts the generations that ended, by cause.
	endings [NumEndCauses]uint64
}

// New returns a core with no jobs, configured by cfg.
func New(cfg Config) *Core {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Admit == nil {
		cfg.Admit = func(*jobpb.RegisterRequest, []netip.AddrPort) error { return nil }
	}
	if cfg.PortOf == nil {
		cfg.PortOf = func(_ netip.Addr, rank int) uint32 { return uint32(rank) }
	}
	return &Core{
		cfg: cfg, log: cfg.Logger, jobs: map[string]*job{}, installing: map[uint64]*job{}, draining: map[uint64]*job{},
		detached: map[uint32]*job{}, ended: map[uint64]endedSession{}, waits: map[Waiter]*wait{}, unformed: map[string]*unformedJob{},
	}
}

// Ready hands over what the steps since the last call ask the driver to do.
func (c *Core) Ready() Effects {
	out := c.out
	c.out = Effects{}
	return out
}

func (c *Core) newJob(name string, world int) *job {
	c.lastGen++
	return &job{
		gen: c.lastGen, name: name, ranks: make([]*registration, world),
		expired: map[uint32]bool{}, left: map[uint32]bool{}, leased: map[uint32]bool{},
		rounds: map[string]*roundSet{}, barrierSeq: map[uint32]uint64{}, waits: map[Waiter]*wait{},
	}
}

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
	if err := c.addressesFree(name, addrs); err != nil {
		return err
	}
	replaces := j != nil && (j.state >= jobInstalling || (rank == 0 && j.ranks[0] != nil))
	if j == nil && len(c.jobs) >= maxJobs {
		return Refuse(codes.ResourceExhausted, "the controller holds %d jobs, its limit; wait for one to end", maxJobs)
	}
	if j == nil || replaces {
		if err := c.withinQuota(client, req, j); err != nil {
			return err
		}
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
		c.jobs[name] = j
	} else if m := mismatch(j.params, req); m != "" {
		err := Refuse(codes.FailedPrecondition, "job %q rank %d: %s", name, rank, m)
		c.CannotForm(req, err, now)
		return err
	}
	if j.ranks[rank] == nil {
		j.arrived++
	}
	delete(j.expired, rank)
	j.ranks[rank] = &registration{req: req, addrs: addrs, by: w}
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
// the job's token can end it.
func (c *Core) CannotForm(req *jobpb.RegisterRequest, err error, now time.Time) {
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
	if subtle.ConstantTimeCompare(j.owner[:], owner[:]) != 1 {
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
// reach its limit, or would need more than its slots.
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
		return Refuse(codes.ResourceExhausted, "client %s holds %d jobs, the limit per client (controller --max-jobs-per-client); wait for one of them to end", client, jobs)
	}
	need := int(req.GetLanes() * req.GetWindow())
	if limit := c.cfg.MaxSlotsPerClient; limit > 0 && slots+need > limit {
		return Refuse(codes.ResourceExhausted, "client %s would hold %d slots with this job's lanes*window = %d, over the limit of %d per client (controller --max-slots-per-client); lower window or lanes, or wait for a job to end",
			client, slots+need, need, limit)
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
	if c.jobs[j.name] == j {
		delete(c.jobs, j.name)
	}
	j.state, j.cause = jobGone, "fell back to the ring: "+why
	c.endings[EndFallback]++
	c.log.Warn("controller: job runs over the ring", "job", j.name, "workers", len(j.ranks), "why", why)
	resp := &jobpb.RegisterResponse{Fallback: why, FallbackAddresses: addrs}
	for _, w := range j.waitsOf(waitRegister) {
		c.reply(w, Answer{resp: resp})
	}
}

func (c *Core) addWait(w Waiter, wt *wait) {
	c.waits[w] = wt
	wt.job.waits[w] = wt
}

func (c *Core) dropWait(w Waiter) {
	if wt := c.waits[w]; wt != nil {
		delete(wt.job.waits, w)
		delete(c.waits, w)
	}
}

func (c *Core) reply(w Waiter, a Answer) {
	c.dropWait(w)
	a.to = w
	c.out.Answers = append(c.out.Answers, a)
}

// waitsOf lists the job's waits of one kind in arrival order.
func (j *job) waitsOf(kind waitKind) []Waiter {
	var ws []Waiter
	for w, wt := range j.waits {
		if wt.kind == kind {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	return ws
}

// place gives room to the queued jobs: at once when no retired job's
// entries are still on the switch (their slots, groups and maybe the same
// worker addresses come free), else once a job has waited DrainWait, beside
// the entries that did not go.
func (c *Core) place(now time.Time) {
	var queued []*job
	for _, j := range c.jobs {
		if j.state == jobQueued && (len(c.draining) == 0 || !now.Before(j.queuedAt.Add(c.cfg.DrainWait))) {
			queued = append(queued, j)
		}
	}
	sort.Slice(queued, func(a, b int) bool { return queued[a].gen < queued[b].gen })
	for _, j := range queued {
		switch {
		case j.ringWhy != "":
			c.cannotPlace(j, Refuse(codes.InvalidArgument, "%s", j.ringWhy))
		case c.offline != "":
			// Only registrations that may go to the ring enter while the
			// switch is away (the others wait for it outside the core).
			c.cannotPlace(j, Refuse(codes.Unavailable, "the switch is offline: %s", c.offline))
		default:
			c.activate(j)
		}
	}
}

// activate gives a job whose ranks are all in its partition, group and
// switch job id, and asks the driver to program the switch.
func (c *Core) activate(j *job) {
	p := j.params
	size := p.GetLanes() * p.GetWindow()
	base, mgid, jobID, err := c.allocate(size)
	if err != nil {
		c.cannotPlace(j, err)
		return
	}
	place := Placement{JobID: jobID, PoolBase: base, PoolSize: size, Group: mgid, World: len(j.ranks)}
	for rank, reg := range j.ranks {
		var mac [6]byte
		copy(mac[:], reg.req.GetMac())
		// Every lane of a rank binds the same address (Config.Bind).
		place.Members = append(place.Members, Member{Port: c.cfg.PortOf(reg.addrs[0].Addr(), rank), Rank: uint16(rank)})
		for lane, a := range reg.addrs {
			place.Workers = append(place.Workers, Lane{Rank: uint16(rank), Lane: uint8(lane), Addr: a, MAC: mac})
		}
	}
	place.Replies = place.Workers
	j.resp = &jobpb.RegisterResponse{
		SessionId: c.cfg.Rand() | 1, SwitchDataplane: c.cfg.Dataplane.String(), JobId: jobID,
		PoolBase: base, PoolSize: size, FirstSeq: uint32(c.cfg.Rand()),
		FallbackAddresses: j.ringAddresses(), LaneDataplanes: c.laneDataplanes(jobID, len(j.ranks[0].addrs)),
	}
	if c.cfg.Keyed {
		place.Key = c.drawKey()
		j.resp.AuthKey = place.Key
	}
	j.state, j.place = jobInstalling, place
	c.installing[j.gen] = j
	c.out.Installs = append(c.out.Installs, Install{Gen: j.gen, Job: j.name, Place: place})
}

// laneDataplanes says which shard each of a job's lanes sends to, or nil
// for a switch with one data-plane address. Lane l of every rank uses the
// same slots, so it goes to the same shard; jobs start at different shards
// so that one-lane jobs spread too.
func (c *Core) laneDataplanes(jobID uint32, lanes int) []string {
	n := len(c.cfg.Shards)
	if n < 2 {
		return nil
	}
	out := make([]string, lanes)
	for l := range out {
		out[l] = c.cfg.Shards[(int(jobID)+l)%n].String()
	}
	return out
}

// allocate finds room for size slots beside the partitions of the jobs on
// the switch, and a free multicast group and switch job id.
func (c *Core) allocate(size uint32) (base uint32, mgid uint16, jobID uint32, err error) {
	type part struct{ base, size uint32 }
	var parts []part
	groups := map[uint16]bool{}
	ids := map[uint32]bool{}
	taken := func(j *job) {
		parts = append(parts, part{j.resp.GetPoolBase(), j.resp.GetPoolSize()})
		groups[j.place.Group] = true
		ids[j.resp.GetJobId()] = true
	}
	for _, j := range c.jobs {
		if j.state == jobInstalling || j.state == jobActive {
			taken(j)
		}
	}
	for _, j := range c.draining {
		taken(j)
	}
	for _, j := range c.detached {
		taken(j)
	}
	sort.Slice(parts, func(a, b int) bool { return parts[a].base < parts[b].base })
	next, found, largest := uint32(0), false, uint32(0)
	for _, p := range parts {
		if p.base-next >= size {
			found = true
			break
		}
		largest = max(largest, p.base-next)
		next = p.base + p.size
	}
	if !found {
		free := uint32(c.cfg.Slots) - next
		if free < size {
			return 0, 0, 0, Refuse(codes.ResourceExhausted,
				"switch has no room: the job needs lanes*window = %d slots, the largest free range has %d of %d (%d jobs active); lower window or lanes, or wait for a job to leave",
				size, max(largest, free), c.cfg.Slots, len(parts))
		}
	}
	for mgid = 1; groups[mgid]; mgid++ {
		if mgid == 0xffff {
			return 0, 0, 0, Refuse(codes.ResourceExhausted, "switch has no free multicast group")
		}
	}
	for {
		c.jobID++
		if c.jobID != 0 && !ids[c.jobID] {
			break
		}
	}
	return next, mgid, c.jobID, nil
}

// fail ends a generation that could not run, answering its registrations
// with err.
func (c *Core) fail(j *job, err error) {
	if c.jobs[j.name] == j {
		delete(c.jobs, j.name)
	}
	j.state, j.err, j.cause = jobGone, err, err.Error()
	c.endings[EndFailed]++
	c.log.Warn("controller: job failed", "job", j.name, "err", err)
	for _, w := range j.waitsOf(waitRegister) {
		c.reply(w, Answer{err: err})
	}
}

// Installed is the driver's report that programming the switch for
// generation gen ended, with err if it failed (err's code says how the
// registrants should take it). When the job became ready for its ranks,
// ready is true and took is the time since its first registration.
func (c *Core) Installed(gen uint64, err error, now time.Time) (took time.Duration, ready bool) {
	j := c.installing[gen]
	if j == nil {
		return 0, false
	}
	delete(c.installing, gen)
	switch j.state {
	case jobInstalling:
		if err != nil {
			// Its room goes back: the switch did not take the entries,
			// or went away with them.
			c.cannotPlace(j, err)
			return 0, false
		}
		j.state, j.activeAt = jobActive, now
		j.keys = c.drawKeys()
		p := j.params
		c.log.Info("controller: job ready", "job", j.name, "job_id", j.resp.GetJobId(),
			"workers", len(j.ranks), "lanes", p.GetLanes(), "pool_base", j.resp.GetPoolBase(), "pool_size", j.resp.GetPoolSize(),
			"mgid", j.place.Group)
		for _, w := range j.waitsOf(waitRegister) {
			// Each rank gets its own copy, with its own secret.
			resp := proto.Clone(j.resp).(*jobpb.RegisterResponse)
			resp.RankSecret = j.keys.secret(j.waits[w].rank)
			c.reply(w, Answer{resp: resp})
		}
		return now.Sub(j.registeredAt), !j.registeredAt.IsZero()
	case jobDraining:
		// Retired while being programmed: what went in comes out again
		// (removal tolerates entries that never made it).
		c.out.Removals = append(c.out.Removals, Removal{Gen: j.gen, Job: j.name, Place: j.place})
	}
	return 0, false
}

// Removed is the driver's report that a retired generation's entries are
// gone from the switch (or could not be removed: its room is given back
// either way, as the switch no longer answers for it).
func (c *Core) Removed(gen uint64, now time.Time) {
	if c.draining[gen] == nil {
		return
	}
	c.draining[gen].state = jobGone
	delete(c.draining, gen)
	c.place(now)
}

// Draining counts the retired jobs whose entries are still on the switch.
func (c *Core) Draining() int { return len(c.draining) }

// retire ends a generation: its waiting calls hear why, and its switch
// entries are removed; cause classifies why for the counters.
func (c *Core) retire(j *job, cause EndCause, why string) { c.end(j, cause, why, false) }

// end retires a generation; with switchGone its entries went with the
// switch, and nothing is removed.
func (c *Core) end(j *job, cause EndCause, why string, switchGone bool) {
	if c.jobs[j.name] == j {
		delete(c.jobs, j.name)
	}
	if j.state.retired() {
		return
	}
	c.endings[cause]++
	was := j.state
	j.cause = why
	if id := j.resp.GetSessionId(); id != 0 {
		c.ended[id] = endedSession{why: fmt.Sprintf("job %q %s", j.name, why), keys: j.keys}
		c.endedOrder = append(c.endedOrder, id)
		if len(c.endedOrder) > endedRemembered {
			delete(c.ended, c.endedOrder[0])
			c.endedOrder = c.endedOrder[1:]
		}
	}
	ws := slices.Sorted(maps.Keys(j.waits))
	for _, w := range ws {
		wt := j.waits[w]
		switch wt.kind {
		case waitRegister:
			j.err = Refuse(codes.Aborted, "job %q %s before all ranks registered", j.name, why)
			c.reply(w, Answer{err: j.err})
		case waitBarrier:
			c.reply(w, Answer{err: Refuse(codes.Aborted, "barrier %q: job %q %s", wt.name, j.name, why)})
		case waitBroadcast:
			c.reply(w, Answer{err: Refuse(codes.Aborted, "broadcast %q: job %q %s", wt.name, j.name, why)})
		case waitLease:
			c.reply(w, Answer{ended: fmt.Sprintf("job %q %s", j.name, why), cause: cause})
		}
	}
	switch {
	case was < jobInstalling || switchGone:
		j.state = jobGone
	default:
		c.log.Info("controller: job removed", "job", j.name, "why", why)
		j.state = jobDraining
		c.draining[j.gen] = j
		if was == jobActive {
			c.out.Removals = append(c.out.Removals, Removal{Gen: j.gen, Job: j.name, Place: j.place})
		}
		// An installing job's entries go once its programming ends
		// (Installed): removing them sooner could race the install.
	}
}

// GiveUp ends a waiting registration, barrier or broadcast whose caller's
// deadline came (code is the context's), and says what the caller was
// still waiting for.
func (c *Core) GiveUp(w Waiter, code codes.Code) error {
	wt := c.waits[w]
	if wt == nil {
		return nil
	}
	c.dropWait(w)
	j, rank := wt.job, wt.rank
	switch wt.kind {
	case waitRegister:
		if reg := j.ranks[rank]; reg != nil && reg.by == w {
			j.ranks[rank] = nil
			j.arrived--
			// Other ranks timing out at the same moment must not name
			// this one as never registered.
			j.expired[rank] = true
			if j.state == jobQueued {
				j.state = jobGathering
			}
		}
		if j.arrived == 0 && j.state == jobGathering && c.jobs[j.name] == j {
			// Nobody waits for this job any more: forget it, or
			// registrations that give up would pile up jobs.
			c.retire(j, EndAbandoned, "abandoned: every rank gave up waiting")
		}
		var missing []int
		for r, reg := range j.ranks {
			if reg == nil && !j.expired[uint32(r)] {
				missing = append(missing, r)
			}
		}
		return Refuse(code, "job %q: ranks %v of %d never registered before rank %d's deadline (start every rank, or check the job name and world size)",
			j.name, missing, len(j.ranks), rank)
	case waitBarrier, waitBroadcast:
		var missing []string
		for r := range j.ranks {
			if uint32(r) != rank && !wt.round.arrived[uint32(r)] && !wt.round.gaveUp[uint32(r)] {
				missing = append(missing, strconv.Itoa(r))
			}
		}
		arrived := len(wt.round.arrived)
		if wt.round.gaveUp == nil {
			wt.round.gaveUp = map[uint32]bool{}
		}
		wt.round.gaveUp[rank] = true
		j.unjoin(wt.set, wt.round, wt.k, rank)
		if wt.kind == waitBarrier {
			who := "ranks " + strings.Join(missing, ", ")
			if len(missing) == 1 {
				who = "rank " + missing[0]
			}
			return Refuse(code, "job %q barrier %q: %s did not come before rank %d's deadline (%d of %d ranks arrived, %d of them gave up waiting)",
				j.name, wt.name, who, rank, arrived+len(wt.round.gaveUp)-1, len(j.ranks), len(wt.round.gaveUp)-1)
		}
		return Refuse(code, "job %q broadcast %q: root %d did not send before rank %d's deadline", j.name, wt.name, wt.round.root, rank)
	}
	return nil
}

// Tick tells the core the time: adoption grace periods and waits for
// draining end by it.
func (c *Core) Tick(now time.Time) {
	kept := c.adoptions[:0]
	var due []adoption
	for _, a := range c.adoptions {
		if now.Before(a.deadline) {
			kept = append(kept, a)
		} else {
			due = append(due, a)
		}
	}
	c.adoptions = kept
	for _, a := range due {
		c.EndUnclaimed(a)
	}
	c.endLate(now)
	c.place(now)
}

// Deadline is when the core next wants a Tick.
func (c *Core) Deadline() (time.Time, bool) {
	var next time.Time
	ok := false
	earliest := func(t time.Time) {
		if !ok || t.Before(next) {
			next, ok = t, true
		}
	}
	for _, a := range c.adoptions {
		earliest(a.deadline)
	}
	for _, j := range c.jobs {
		if t, ok := c.lateAt(j); ok {
			earliest(t)
		}
	}
	if len(c.draining) > 0 {
		for _, j := range c.jobs {
			if j.state == jobQueued {
				earliest(j.queuedAt.Add(c.cfg.DrainWait))
			}
		}
	}
	return next, ok
}

// SwitchLost ends every job: the switch restarted or the controller lost
// it, so what the jobs had there is gone. Their entries are not removed
// (there is nothing to remove them from).
func (c *Core) SwitchLost(why string) {
	c.offline = why
	for gen, j := range c.draining {
		j.state = jobGone
		delete(c.draining, gen)
	}
	ids := slices.Sorted(maps.Keys(c.detached))
	for _, id := range ids {
		j := c.detached[id]
		delete(c.detached, id)
		c.end(j, EndSwitchLost, why, true)
	}
	names := slices.Sorted(maps.Keys(c.jobs))
	for _, n := range names {
		if j := c.jobs[n]; j.state == jobGathering && j.mayFallBack() {
			// Nothing of it is on the switch, and its ranks may go to
			// the ring: it gathers on, and goes there if the switch is
			// still away when every rank is in.
			continue
		}
		c.end(c.jobs[n], EndSwitchLost, why, true)
	}
}

// mayFallBack reports whether every rank registered so far gave a ring
// address.
func (j *job) mayFallBack() bool {
	for _, reg := range j.ranks {
		if reg != nil && reg.req.GetFallbackAddress() == "" {
			return false
		}
	}
	return true
}

// SwitchBack says the switch can be programmed again.
func (c *Core) SwitchBack() { c.offline = "" }

// Offline says why the switch cannot be programmed now ("" when it can).
func (c *Core) Offline() string { return c.offline }

// ActiveJobs lists the running jobs' names and partitions.
func (c *Core) ActiveJobs() map[string]*jobpb.RegisterResponse {
	out := map[string]*jobpb.RegisterResponse{}
	for n, j := range c.jobs {
		if j.state == jobActive {
			out[n] = j.resp
		}
	}
	return out
}
