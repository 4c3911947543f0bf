package controller

// The job service's protocol state is a deterministic state machine, core:
// the job table, pool partitions, switch job ids and multicast groups,
// leases, barrier and broadcast rounds, adoption of the jobs a restarted
// controller finds on the switch, and each job's life. Its driver
// (JobService) feeds it calls, the switch's reports and the time, and
// carries out what it asks for: program or clean the switch, answer waiting
// calls. The core does no I/O, starts no goroutines and reads no clock, so
// tests step it directly and every run of the same inputs gives the same
// outputs.

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/switchml/switchml-go/p4/controller/controllerpb"
	"github.com/switchml/switchml-go/switchml/wire"
	"google.golang.org/grpc/codes"
)

// Bounds on what clients can make the controller hold.
const (
	maxJobs         = 4096 // jobs gathering or active
	maxRoundsPerJob = 1024 // barrier and broadcast names per job
	// endedRemembered bounds how many ended sessions keep their cause.
	endedRemembered = 4096
)

// refusal is how the core says no: a message for the caller and the gRPC
// code that tells a client how to take it.
type refusal struct {
	code codes.Code
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func refuse(code codes.Code, format string, args ...any) error {
	return &refusal{code: code, msg: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error {
	return refuse(codes.InvalidArgument, format, args...)
}

// codeOf is the code of a refusal (Unknown for any other error).
func codeOf(err error) codes.Code {
	var r *refusal
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

// waiter names a call that waits for the core's answer. The driver hands
// them out in increasing order, so ordering by waiter is arrival order.
type waiter uint64

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

// answer is the core's reply to a waiting call.
type answer struct {
	to    waiter
	resp  *controllerpb.RegisterResponse // a registration's
	data  []byte                         // a broadcast's
	ended string                         // a lease's: why the job ended
	err   error
}

// install asks the driver to make slots [base, base+size) idle and install
// a job's entries, then to report with Installed.
type install struct {
	gen        uint64
	job        string
	base, size int
	entries    JobEntries
}

// removal asks the driver to delete a retired job's entries, then to
// report with Removed.
type removal struct {
	gen     uint64
	job     string
	entries JobEntries
}

// effects is what a step asks the driver to do.
type effects struct {
	answers  []answer
	installs []install
	removals []removal
}

// registration is one rank's registration of a job.
type registration struct {
	req   *controllerpb.RegisterRequest
	addrs []netip.AddrPort // its lane addresses, parsed
	by    waiter           // the call waiting for the job (0: none)
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

	params   *controllerpb.RegisterRequest // the first registrant's; others must agree
	owner    [32]byte                      // hash of the registrants' token
	ranks    []*registration
	arrived  int
	expired  map[uint32]bool // ranks whose registration timed out
	queuedAt time.Time

	resp    *controllerpb.RegisterResponse
	entries JobEntries
	left    map[uint32]bool
	leased  map[uint32]bool // ranks that took their lease on this controller
	adopted bool            // found on the switch by a restarted controller
	rounds  map[string]*roundSet
	// barrierSeq is the highest barrier count each rank has shown.
	barrierSeq map[uint32]uint64
	waits      map[waiter]*wait
}

// roundSet numbers the successive uses of one barrier or broadcast name: a
// rank's k-th call joins round k, so a fast rank reusing a name never mixes
// with a slow rank still in the previous use.
type roundSet struct {
	next   map[uint32]int
	rounds map[int]*round
}

type round struct {
	complete bool // every rank arrived (barrier) or the root sent (broadcast)
	arrived  map[uint32]bool
	fetched  int
	root     uint32
	hasRoot  bool
	data     []byte
}

// adoption is one batch of jobs found on the switch, and when the grace
// for their ranks to come back ends.
type adoption struct {
	deadline time.Time
	found    map[uint32]*job
}

// coreConfig configures the core.
type coreConfig struct {
	Dataplane netip.AddrPort
	Slots     int
	Target    Target
	Logger    *slog.Logger
	// Rand draws session ids and first sequence numbers.
	Rand func() uint64
	// DrainWait is how long a job whose ranks are all in waits for retired
	// jobs' entries to leave the switch before it is placed beside them.
	DrainWait time.Duration
}

// core is the job service's state machine. Its methods are steps: each one
// changes the state and queues what the driver must do, which Ready hands
// over. It is not safe for concurrent use.
type core struct {
	cfg  coreConfig
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
	ended      map[uint64]string
	endedOrder []uint64
	waits      map[waiter]*wait
	// offline says why the switch cannot be programmed now ("" when it
	// can).
	offline string
	lastGen uint64
	jobID   uint32 // last switch job id handed out
	out     effects
}

func newCore(cfg coreConfig) *core {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &core{
		cfg: cfg, log: cfg.Logger, jobs: map[string]*job{}, installing: map[uint64]*job{}, draining: map[uint64]*job{},
		detached: map[uint32]*job{}, ended: map[uint64]string{}, waits: map[waiter]*wait{},
	}
}

// Ready hands over what the steps since the last call ask the driver to do.
func (c *core) Ready() effects {
	out := c.out
	c.out = effects{}
	return out
}

func (c *core) newJob(name string, world int) *job {
	c.lastGen++
	return &job{
		gen: c.lastGen, name: name, ranks: make([]*registration, world),
		expired: map[uint32]bool{}, left: map[uint32]bool{}, leased: map[uint32]bool{},
		rounds: map[string]*roundSet{}, barrierSeq: map[uint32]uint64{}, waits: map[waiter]*wait{},
	}
}

// Check validates a registration on its own and against the target; it
// changes nothing.
func (c *core) Check(r *controllerpb.RegisterRequest) ([]netip.AddrPort, error) {
	addrs, err := checkRequest(r)
	if err != nil {
		return nil, err
	}
	if err := c.cfg.Target.check(r, addrs); err != nil {
		return nil, err
	}
	return addrs, nil
}

// checkRequest validates a registration on its own.
func checkRequest(r *controllerpb.RegisterRequest) ([]netip.AddrPort, error) {
	switch {
	case r.GetJob() == "":
		return nil, invalid("job name is empty")
	case r.GetWorldSize() < 1 || r.GetWorldSize() > 0xffff:
		return nil, invalid("world_size %d, want 1..65535", r.GetWorldSize())
	case r.GetRank() >= r.GetWorldSize():
		return nil, invalid("rank %d outside 0..%d (world_size %d)", r.GetRank(), r.GetWorldSize()-1, r.GetWorldSize())
	case r.GetLanes() < 1 || r.GetLanes() > 256:
		return nil, invalid("lanes %d, want 1..256", r.GetLanes())
	case r.GetWindow() < 1:
		return nil, invalid("window %d, want at least 1", r.GetWindow())
	case r.GetElements() < 1:
		return nil, invalid("elements %d, want at least 1", r.GetElements())
	case len(r.GetLaneAddresses()) != int(r.GetLanes()):
		return nil, invalid("%d lane addresses for %d lanes", len(r.GetLaneAddresses()), r.GetLanes())
	case len(r.GetMac()) != 0 && len(r.GetMac()) != 6:
		return nil, invalid("mac has %d bytes, want 6 or none", len(r.GetMac()))
	}
	switch r.GetFormat() {
	case controllerpb.Format_FORMAT_COMPAT:
		if _, ok := wire.CompatSizeCode(int(r.GetElements())); !ok {
			return nil, invalid("elements %d cannot travel in the compatible header (32, 64, 128 or 256)", r.GetElements())
		}
	case controllerpb.Format_FORMAT_EXTENDED:
		if r.GetElements() > wire.MaxElements {
			return nil, invalid("elements %d exceeds the extended header's %d", r.GetElements(), wire.MaxElements)
		}
	default:
		return nil, invalid("unknown format %v", r.GetFormat())
	}
	addrs := make([]netip.AddrPort, len(r.GetLaneAddresses()))
	for i, s := range r.GetLaneAddresses() {
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, invalid("lane %d address %q: %v (want ipv4:port)", i, s, err)
		}
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if !a.Addr().Is4() || a.Addr().IsUnspecified() || a.Port() == 0 {
			return nil, invalid("lane %d address %v: want the IPv4 address and port the switch sees as the source", i, a)
		}
		addrs[i] = a
	}
	return addrs, nil
}

// mismatch names the first parameter on which r disagrees with the job.
func mismatch(j, r *controllerpb.RegisterRequest) string {
	type p struct {
		name string
		a, b uint32
	}
	for _, x := range []p{
		{"world_size", j.GetWorldSize(), r.GetWorldSize()},
		{"lanes", j.GetLanes(), r.GetLanes()},
		{"window", j.GetWindow(), r.GetWindow()},
		{"elements", j.GetElements(), r.GetElements()},
		{"format", uint32(j.GetFormat()), uint32(r.GetFormat())},
	} {
		if x.a != x.b {
			if x.name == "format" {
				return fmt.Sprintf("format %v differs from %v registered by rank %d", r.GetFormat(), j.GetFormat(), j.GetRank())
			}
			return fmt.Sprintf("%s %d differs from %d registered by rank %d", x.name, x.b, x.a, j.GetRank())
		}
	}
	return ""
}

// addressesFree refuses lane addresses that another live job's workers
// hold: a socket belongs to one live process, so such a registration is a
// mistake or an attempt to take the other job's traffic. A job whose
// process died is ended by its lease, which frees its addresses.
func (c *core) addressesFree(name string, addrs []netip.AddrPort) error {
	mine := make(map[netip.AddrPort]bool, len(addrs))
	for _, a := range addrs {
		mine[a] = true
	}
	// Of several holders the one first by name is named, so that the
	// answer does not depend on map order.
	var holder *job
	var rank int
	var addr netip.AddrPort
	for _, other := range c.jobs {
		if other.name == name || (holder != nil && other.name > holder.name) {
			continue
		}
	search:
		for r, reg := range other.ranks {
			if reg == nil {
				continue
			}
			for _, a := range reg.addrs {
				if mine[a] {
					holder, rank, addr = other, r, a
					break search
				}
			}
		}
	}
	if holder != nil {
		return refuse(codes.AlreadyExists, "lane address %v is held by rank %d of job %q, which is still running (if its process is gone, the controller ends that job as soon as its lease lapses)", addr, rank, holder.name)
	}
	return nil
}

// Register enters a rank into its job; w waits for the job to be
// programmed. A registration into a programmed job, or a second one from
// rank 0, is a new run of the job: the old generation goes away.
func (c *core) Register(w waiter, req *controllerpb.RegisterRequest, now time.Time) error {
	addrs, err := c.Check(req)
	if err != nil {
		return err
	}
	name, rank := req.GetJob(), req.GetRank()
	owner := sha256.Sum256([]byte(req.GetToken()))
	j := c.jobs[name]
	if j != nil && subtle.ConstantTimeCompare(j.owner[:], owner[:]) != 1 {
		return refuse(codes.PermissionDenied, "job %q belongs to another owner: its ranks registered with a different token (pick another job name, or use the job's token)", name)
	}
	if err := c.addressesFree(name, addrs); err != nil {
		return err
	}
	if j == nil && len(c.jobs) >= maxJobs {
		return refuse(codes.ResourceExhausted, "the controller holds %d jobs, its limit; wait for one to end", maxJobs)
	}
	if j != nil && (j.state >= jobInstalling || (rank == 0 && j.ranks[0] != nil)) {
		c.retire(j, "restarted: rank "+strconv.Itoa(int(rank))+" registered again")
		j = nil
	}
	if j == nil {
		j = c.newJob(name, int(req.GetWorldSize()))
		j.params, j.owner = req, owner
		c.jobs[name] = j
	} else if m := mismatch(j.params, req); m != "" {
		return refuse(codes.FailedPrecondition, "job %q rank %d: %s", name, rank, m)
	}
	if j.ranks[rank] == nil {
		j.arrived++
	}
	delete(j.expired, rank)
	j.ranks[rank] = &registration{req: req, addrs: addrs, by: w}
	c.addWait(w, &wait{kind: waitRegister, job: j, rank: rank})
	if j.state == jobGathering && j.arrived == len(j.ranks) {
		j.state, j.queuedAt = jobQueued, now
		c.place(now)
	}
	return nil
}

func (c *core) addWait(w waiter, wt *wait) {
	c.waits[w] = wt
	wt.job.waits[w] = wt
}

func (c *core) dropWait(w waiter) {
	if wt := c.waits[w]; wt != nil {
		delete(wt.job.waits, w)
		delete(c.waits, w)
	}
}

func (c *core) reply(w waiter, a answer) {
	c.dropWait(w)
	a.to = w
	c.out.answers = append(c.out.answers, a)
}

// waitsOf lists the job's waits of one kind in arrival order.
func (j *job) waitsOf(kind waitKind) []waiter {
	var ws []waiter
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
func (c *core) place(now time.Time) {
	var queued []*job
	for _, j := range c.jobs {
		if j.state == jobQueued && (len(c.draining) == 0 || !now.Before(j.queuedAt.Add(c.cfg.DrainWait))) {
			queued = append(queued, j)
		}
	}
	sort.Slice(queued, func(a, b int) bool { return queued[a].gen < queued[b].gen })
	for _, j := range queued {
		c.activate(j)
	}
}

// activate gives a job whose ranks are all in its partition, group and
// switch job id, and asks the driver to program the switch.
func (c *core) activate(j *job) {
	p := j.params
	size := p.GetLanes() * p.GetWindow()
	base, mgid, jobID, err := c.allocate(size)
	if err != nil {
		c.fail(j, err)
		return
	}
	entries := JobEntries{MulticastGroup: mgid}
	for rank, reg := range j.ranks {
		var mac [6]byte
		copy(mac[:], reg.req.GetMac())
		// Every lane of a rank binds the same address (Config.Bind).
		entries.Replicas = append(entries.Replicas, Replica{Port: c.cfg.Target.portOf(reg.addrs[0].Addr(), rank), Instance: uint16(rank)})
		for lane, a := range reg.addrs {
			entries.Workers = append(entries.Workers, WorkerEntry{
				Addr: a, JobID: jobID, Rank: uint16(rank), NumWorkers: uint16(len(j.ranks)), MulticastGroup: mgid,
				Lane: uint8(lane), PoolBase: base, PoolSize: size,
			})
			entries.Replies = append(entries.Replies, ReplyEntry{JobID: jobID, Rank: uint16(rank), Lane: uint8(lane), MAC: mac, Addr: a})
		}
	}
	j.state, j.entries = jobInstalling, entries
	j.resp = &controllerpb.RegisterResponse{
		SessionId: c.cfg.Rand() | 1, SwitchDataplane: c.cfg.Dataplane.String(), JobId: jobID,
		PoolBase: base, PoolSize: size, FirstSeq: uint32(c.cfg.Rand()),
	}
	c.installing[j.gen] = j
	c.out.installs = append(c.out.installs, install{gen: j.gen, job: j.name, base: int(base), size: int(size), entries: entries})
}

// allocate finds room for size slots beside the partitions of the jobs on
// the switch, and a free multicast group and switch job id.
func (c *core) allocate(size uint32) (base uint32, mgid uint16, jobID uint32, err error) {
	type part struct{ base, size uint32 }
	var parts []part
	groups := map[uint16]bool{}
	ids := map[uint32]bool{}
	taken := func(j *job) {
		parts = append(parts, part{j.resp.GetPoolBase(), j.resp.GetPoolSize()})
		groups[j.entries.MulticastGroup] = true
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
			return 0, 0, 0, refuse(codes.ResourceExhausted,
				"switch has no room: the job needs lanes*window = %d slots, the largest free range has %d of %d (%d jobs active); lower window or lanes, or wait for a job to leave",
				size, max(largest, free), c.cfg.Slots, len(parts))
		}
	}
	for mgid = 1; groups[mgid]; mgid++ {
		if mgid == 0xffff {
			return 0, 0, 0, refuse(codes.ResourceExhausted, "switch has no free multicast group")
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
func (c *core) fail(j *job, err error) {
	if c.jobs[j.name] == j {
		delete(c.jobs, j.name)
	}
	j.state, j.err, j.cause = jobGone, err, err.Error()
	c.log.Warn("controller: job failed", "job", j.name, "err", err)
	for _, w := range j.waitsOf(waitRegister) {
		c.reply(w, answer{err: err})
	}
}

// Installed is the driver's report that programming the switch for
// generation gen ended, with err if it failed (err's code says how the
// registrants should take it).
func (c *core) Installed(gen uint64, err error) {
	j := c.installing[gen]
	if j == nil {
		return
	}
	delete(c.installing, gen)
	switch j.state {
	case jobInstalling:
		if err != nil {
			c.fail(j, err)
			return
		}
		j.state = jobActive
		p := j.params
		c.log.Info("controller: job ready", "job", j.name, "session", j.resp.GetSessionId(), "job_id", j.resp.GetJobId(),
			"workers", len(j.ranks), "lanes", p.GetLanes(), "pool_base", j.resp.GetPoolBase(), "pool_size", j.resp.GetPoolSize(),
			"mgid", j.entries.MulticastGroup)
		for _, w := range j.waitsOf(waitRegister) {
			c.reply(w, answer{resp: j.resp})
		}
	case jobDraining:
		// Retired while being programmed: what went in comes out again
		// (removal tolerates entries that never made it).
		c.out.removals = append(c.out.removals, removal{gen: j.gen, job: j.name, entries: j.entries})
	}
}

// Removed is the driver's report that a retired generation's entries are
// gone from the switch (or could not be removed: its room is given back
// either way, as the switch no longer answers for it).
func (c *core) Removed(gen uint64, now time.Time) {
	if c.draining[gen] == nil {
		return
	}
	c.draining[gen].state = jobGone
	delete(c.draining, gen)
	c.place(now)
}

// Draining counts the retired jobs whose entries are still on the switch.
func (c *core) Draining() int { return len(c.draining) }

// retire ends a generation: its waiting calls hear why, and its switch
// entries are removed.
func (c *core) retire(j *job, why string) { c.end(j, why, false) }

// end retires a generation; with switchGone its entries went with the
// switch, and nothing is removed.
func (c *core) end(j *job, why string, switchGone bool) {
	if c.jobs[j.name] == j {
		delete(c.jobs, j.name)
	}
	if j.state.retired() {
		return
	}
	was := j.state
	j.cause = why
	if id := j.resp.GetSessionId(); id != 0 {
		c.ended[id] = fmt.Sprintf("job %q %s", j.name, why)
		c.endedOrder = append(c.endedOrder, id)
		if len(c.endedOrder) > endedRemembered {
			delete(c.ended, c.endedOrder[0])
			c.endedOrder = c.endedOrder[1:]
		}
	}
	ws := make([]waiter, 0, len(j.waits))
	for w := range j.waits {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	for _, w := range ws {
		wt := j.waits[w]
		switch wt.kind {
		case waitRegister:
			j.err = refuse(codes.Aborted, "job %q %s before all ranks registered", j.name, why)
			c.reply(w, answer{err: j.err})
		case waitBarrier:
			c.reply(w, answer{err: refuse(codes.Aborted, "barrier %q: job %q %s", wt.name, j.name, why)})
		case waitBroadcast:
			c.reply(w, answer{err: refuse(codes.Aborted, "broadcast %q: job %q %s", wt.name, j.name, why)})
		case waitLease:
			c.reply(w, answer{ended: fmt.Sprintf("job %q %s", j.name, why)})
		}
	}
	switch {
	case was < jobInstalling || switchGone:
		j.state = jobGone
	default:
		c.log.Info("controller: job removed", "job", j.name, "session", j.resp.GetSessionId(), "why", why)
		j.state = jobDraining
		c.draining[j.gen] = j
		if was == jobActive {
			c.out.removals = append(c.out.removals, removal{gen: j.gen, job: j.name, entries: j.entries})
		}
		// An installing job's entries go once its programming ends
		// (Installed): removing them sooner could race the install.
	}
}

// GiveUp ends a waiting registration, barrier or broadcast whose caller's
// deadline came (code is the context's), and says what the caller was
// still waiting for.
func (c *core) GiveUp(w waiter, code codes.Code) error {
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
			c.retire(j, "abandoned: every rank gave up waiting")
		}
		var missing []int
		for r, reg := range j.ranks {
			if reg == nil && !j.expired[uint32(r)] {
				missing = append(missing, r)
			}
		}
		return refuse(code, "job %q: ranks %v of %d never registered before rank %d's deadline (start every rank, or check the job name and world size)",
			j.name, missing, len(j.ranks), rank)
	case waitBarrier, waitBroadcast:
		delete(wt.round.arrived, rank)
		wt.set.next[rank]--
		if wt.kind == waitBarrier {
			return refuse(code, "job %q barrier %q: %d of %d ranks arrived before rank %d's deadline",
				j.name, wt.name, len(wt.round.arrived), len(j.ranks), rank)
		}
		return refuse(code, "job %q broadcast %q: root %d did not send before rank %d's deadline", j.name, wt.name, wt.round.root, rank)
	}
	return nil
}

// session finds the active generation a call refers to.
func (c *core) session(name string, rank uint32, session uint64) (*job, error) {
	if why, ok := c.ended[session]; ok {
		return nil, refuse(codes.Aborted, "session %d is over: %s", session, why)
	}
	j := c.jobs[name]
	if (j == nil || j.resp.GetSessionId() != session) && len(c.detached) > 0 {
		// The session may be one of those found on the switch, whose
		// ranks have not all taken their leases up again yet.
		return nil, refuse(codes.Unavailable, "the controller restarted and is taking its running jobs over; retry in a moment")
	}
	if j == nil || j.state != jobActive {
		return nil, refuse(codes.NotFound, "job %q has no active session (register first)", name)
	}
	if j.resp.GetSessionId() != session {
		return nil, refuse(codes.FailedPrecondition, "session %d of job %q is over; the current session is %d (the job was restarted)",
			session, name, j.resp.GetSessionId())
	}
	if rank >= uint32(len(j.ranks)) {
		return nil, invalid("rank %d outside 0..%d", rank, len(j.ranks)-1)
	}
	return j, nil
}

func tooManyRounds() error {
	return refuse(codes.ResourceExhausted, "the job uses %d barrier and broadcast names, the controller's limit: reuse names", maxRoundsPerJob)
}

// join enters rank into its next round of the named barrier or broadcast;
// nil when the job holds too many names.
func (j *job) join(key string, rank uint32) (*round, *roundSet, int) {
	rs := j.rounds[key]
	if rs == nil && len(j.rounds) >= maxRoundsPerJob {
		return nil, nil, 0
	}
	if rs == nil {
		rs = &roundSet{next: map[uint32]int{}, rounds: map[int]*round{}}
		j.rounds[key] = rs
	}
	k := rs.next[rank]
	rs.next[rank]++
	r := rs.rounds[k]
	if r == nil {
		r = &round{arrived: map[uint32]bool{}}
		rs.rounds[k] = r
	}
	r.arrived[rank] = true
	return r, rs, k
}

// othersPast reports whether every rank but rank has made a later barrier
// call than its seq-th.
func (j *job) othersPast(rank uint32, seq uint64) bool {
	// Only a job taken over after a controller restart can have lost a
	// round; elsewhere a barrier completes by its arrivals alone (which
	// also keeps concurrent barriers of one rank exact).
	if seq == 0 || !j.adopted {
		return false
	}
	for r := range j.ranks {
		if uint32(r) != rank && j.barrierSeq[uint32(r)] <= seq {
			return false
		}
	}
	return true
}

// Barrier enters a rank into a barrier; w is answered when every rank has
// arrived.
func (c *core) Barrier(w waiter, req *controllerpb.BarrierRequest) error {
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		return err
	}
	rank := req.GetRank()
	r, rs, k := j.join("barrier/"+req.GetName(), rank)
	if r == nil {
		return tooManyRounds()
	}
	c.addWait(w, &wait{kind: waitBarrier, job: j, rank: rank, name: req.GetName(), set: rs, k: k, round: r, seq: req.GetSeq()})
	if len(r.arrived) == len(j.ranks) {
		r.complete = true
		delete(rs.rounds, k)
		for _, o := range j.waitsOf(waitBarrier) {
			if j.waits[o].round == r {
				c.reply(o, answer{})
			}
		}
	}
	if req.GetSeq() > j.barrierSeq[rank] {
		j.barrierSeq[rank] = req.GetSeq()
	}
	if j.adopted {
		// Waiting ranks whose peers have all counted past their barrier,
		// on a controller that has since restarted and lost the round,
		// are through.
		for _, o := range j.waitsOf(waitBarrier) {
			if wt := j.waits[o]; j.othersPast(wt.rank, wt.seq) {
				c.reply(o, answer{})
			}
		}
	}
	return nil
}

// Broadcast enters a rank into a broadcast; w is answered with the root's
// data once the root has sent it.
func (c *core) Broadcast(w waiter, req *controllerpb.BroadcastRequest) error {
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		return err
	}
	rank, root := req.GetRank(), req.GetRoot()
	if root >= uint32(len(j.ranks)) {
		return invalid("root %d outside 0..%d", root, len(j.ranks)-1)
	}
	r, rs, k := j.join("broadcast/"+req.GetName(), rank)
	if r == nil {
		return tooManyRounds()
	}
	if r.hasRoot && r.root != root {
		delete(r.arrived, rank)
		rs.next[rank]--
		return refuse(codes.FailedPrecondition, "job %q broadcast %q: rank %d names root %d, others named %d",
			j.name, req.GetName(), rank, root, r.root)
	}
	r.root, r.hasRoot = root, true
	c.addWait(w, &wait{kind: waitBroadcast, job: j, rank: rank, name: req.GetName(), set: rs, k: k, round: r})
	if rank == root {
		r.data = append([]byte(nil), req.GetData()...)
		r.complete = true
	}
	if r.complete {
		for _, o := range j.waitsOf(waitBroadcast) {
			if j.waits[o].round == r {
				r.fetched++
				c.reply(o, answer{data: r.data})
			}
		}
		if r.fetched >= len(j.ranks) {
			delete(rs.rounds, k)
		}
	}
	return nil
}

// ongoing finds the session a Leave or Abort refers to: nil, and no
// error, when the session is already over, which they take as done.
func (c *core) ongoing(name string, rank uint32, session uint64) (*job, error) {
	j, err := c.session(name, rank, session)
	switch codeOf(err) {
	case codes.NotFound, codes.FailedPrecondition, codes.Aborted:
		return nil, nil
	}
	return j, err
}

// Leave records that a rank is done with its session; the job ends when
// every rank left.
func (c *core) Leave(req *controllerpb.LeaveRequest) error {
	j, err := c.ongoing(req.GetJob(), req.GetRank(), req.GetSessionId())
	if j == nil {
		return err
	}
	j.left[req.GetRank()] = true
	if len(j.left) == len(j.ranks) {
		c.retire(j, "finished: every rank left")
	}
	return nil
}

// Abort ends a session on behalf of one of its ranks.
func (c *core) Abort(req *controllerpb.AbortRequest) error {
	j, err := c.ongoing(req.GetJob(), req.GetRank(), req.GetSessionId())
	if j == nil {
		return err
	}
	reason := req.GetReason()
	if len(reason) > 512 {
		reason = reason[:512] + "..."
	}
	c.log.Warn("controller: rank aborted its job", "job", j.name, "rank", req.GetRank(), "reason", reason)
	c.retire(j, fmt.Sprintf("aborted by rank %d: %s", req.GetRank(), reason))
	return nil
}

// Watch takes a rank's lease on its session (claiming a job found on the
// switch, if the request names one); w is answered when the job ends.
func (c *core) Watch(w waiter, req *controllerpb.WatchRequest) error {
	if err := c.claim(req); err != nil {
		return err
	}
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		return err
	}
	j.leased[req.GetRank()] = true
	c.addWait(w, &wait{kind: waitLease, job: j, rank: req.GetRank()})
	return nil
}

// EndLease ends a lease the core has not answered. A lost lease, of a rank
// that did not leave, aborts the job: its process ended or its host is
// unreachable.
func (c *core) EndLease(w waiter, lost bool) {
	wt := c.waits[w]
	if wt == nil || wt.kind != waitLease {
		return
	}
	c.dropWait(w)
	j := wt.job
	if lost && !j.state.retired() && !j.left[wt.rank] {
		c.log.Warn("controller: rank lost", "job", j.name, "rank", wt.rank)
		c.retire(j, fmt.Sprintf("aborted: rank %d lost its connection to the controller (its process ended, or its host is unreachable)", wt.rank))
	}
}

// claim hands a job found on the switch to the first rank that names it
// (by switch job id) after a controller restart.
func (c *core) claim(req *controllerpb.WatchRequest) error {
	j := c.detached[req.GetJobId()]
	if j == nil || req.GetJobId() == 0 {
		return nil
	}
	switch {
	case req.GetRank() >= uint32(len(j.ranks)):
		return invalid("rank %d outside 0..%d of the job on the switch", req.GetRank(), len(j.ranks)-1)
	case req.GetJob() == "" || req.GetSessionId() == 0:
		return invalid("a claim names the job and its session")
	case c.jobs[req.GetJob()] != nil:
		return refuse(codes.AlreadyExists, "job %q already runs under another session", req.GetJob())
	}
	delete(c.detached, req.GetJobId())
	j.name = req.GetJob()
	j.owner = sha256.Sum256([]byte(req.GetToken()))
	j.resp.SessionId = req.GetSessionId()
	j.params = &controllerpb.RegisterRequest{Job: j.name, WorldSize: uint32(len(j.ranks))}
	c.jobs[j.name] = j
	c.log.Info("controller: job taken over from the switch", "job", j.name, "session", req.GetSessionId(), "job_id", req.GetJobId(), "workers", len(j.ranks))
	return nil
}

// Adopt keeps the jobs a switch holds (its tables, as an earlier controller
// left them): their partitions stay taken, and their ranks take them back
// by watching their sessions again with the switch job id. At now+grace,
// jobs nobody claimed are removed, and so are claimed jobs whose ranks did
// not all come back.
func (c *core) Adopt(workers []WorkerEntry, replies []ReplyEntry, groups map[uint16][]Replica, now time.Time, grace time.Duration) {
	found := map[uint32]*job{}
	for _, w := range workers {
		j := found[w.JobID]
		if j == nil {
			j = c.newJob("", int(w.NumWorkers))
			j.state, j.adopted = jobActive, true
			j.entries = JobEntries{MulticastGroup: w.MulticastGroup, Replicas: groups[w.MulticastGroup]}
			j.resp = &controllerpb.RegisterResponse{JobId: w.JobID, PoolBase: w.PoolBase, PoolSize: w.PoolSize, SwitchDataplane: c.cfg.Dataplane.String()}
			found[w.JobID] = j
		}
		j.entries.Workers = append(j.entries.Workers, w)
		if int(w.Rank) < len(j.ranks) {
			reg := j.ranks[w.Rank]
			if reg == nil {
				reg = &registration{req: &controllerpb.RegisterRequest{Rank: uint32(w.Rank), WorldSize: uint32(w.NumWorkers)}}
				j.ranks[w.Rank] = reg
			}
			reg.req.LaneAddresses = append(reg.req.LaneAddresses, w.Addr.String())
			reg.addrs = append(reg.addrs, w.Addr)
		}
	}
	for _, r := range replies {
		if j := found[r.JobID]; j != nil {
			j.entries.Replies = append(j.entries.Replies, r)
		}
	}
	for id, j := range found {
		c.detached[id] = j
		c.jobID = max(c.jobID, id)
	}
	if len(found) > 0 {
		c.log.Info("controller: jobs found on the switch, waiting for their ranks", "jobs", len(found), "grace", grace)
	}
	c.adoptions = append(c.adoptions, adoption{deadline: now.Add(grace), found: found})
}

// endUnclaimed removes the adopted jobs that nobody took back, and those
// some of whose ranks did not take their leases up again.
func (c *core) endUnclaimed(a adoption) {
	ids := make([]uint32, 0, len(a.found))
	for id := range a.found {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		j := a.found[id]
		if c.detached[id] == j {
			delete(c.detached, id)
			c.retire(j, "removed: found on the switch after a controller restart, and no rank took it back")
			continue
		}
		for r := range j.ranks {
			if !j.leased[uint32(r)] && !j.state.retired() {
				c.retire(j, fmt.Sprintf("aborted: rank %d did not come back after the controller restarted", r))
				break
			}
		}
	}
}

// Tick tells the core the time: adoption grace periods and waits for
// draining end by it.
func (c *core) Tick(now time.Time) {
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
		c.endUnclaimed(a)
	}
	c.place(now)
}

// Deadline is when the core next wants a Tick.
func (c *core) Deadline() (time.Time, bool) {
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
func (c *core) SwitchLost(why string) {
	c.offline = why
	for gen, j := range c.draining {
		j.state = jobGone
		delete(c.draining, gen)
	}
	ids := make([]uint32, 0, len(c.detached))
	for id := range c.detached {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		j := c.detached[id]
		delete(c.detached, id)
		c.end(j, why, true)
	}
	names := make([]string, 0, len(c.jobs))
	for n := range c.jobs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c.end(c.jobs[n], why, true)
	}
}

// SwitchBack says the switch can be programmed again.
func (c *core) SwitchBack() { c.offline = "" }

// Offline says why the switch cannot be programmed now ("" when it can).
func (c *core) Offline() string { return c.offline }

// ActiveJobs lists the running jobs' names and partitions.
func (c *core) ActiveJobs() map[string]*controllerpb.RegisterResponse {
	out := map[string]*controllerpb.RegisterResponse{}
	for n, j := range c.jobs {
		if j.state == jobActive {
			out[n] = j.resp
		}
	}
	return out
}
