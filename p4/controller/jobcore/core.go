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
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
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
	// regOverhead is what a waiting registration costs beyond its strings
	// (the request, its call and the bookkeeping around it), laneOverhead
	// what each lane address costs beyond its text: both count against
	// the client's byte budget (Config.MaxBytesPerClient).
	regOverhead  = 4 << 10
	laneOverhead = 96
)

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
	// jobQuarantined: retired, and removing its entries failed: they may
	// still be on the switch, so its partition, group and id stay taken
	// (and out of every placement) until a removal goes through or the
	// switch is cleared; unlike a draining job, it holds no queued job
	// back.
	jobQuarantined
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
	case jobQuarantined:
		return "quarantined"
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

// registration is one rank's registration of a job.
type registration struct {
	req   *jobpb.RegisterRequest
	addrs []netip.AddrPort // its lane addresses, parsed
	by    Waiter           // the call waiting for the job (0: none)
	// client is the identity that registered it, cost the bytes it
	// counts against that identity's budget.
	client string
	cost   int
}

// RegistrationCost is the bytes a registration makes the controller hold:
// the request as it came (job name, token, addresses, and any fields the
// controller does not know, which it keeps), its lane addresses parsed and
// indexed, and the call waiting for the job.
func RegistrationCost(req *jobpb.RegisterRequest) int {
	return regOverhead + proto.Size(req) + len(req.GetLaneAddresses())*laneOverhead
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
	// bytes sums the costs of the registrations in ranks, by the client
	// identity that made them.
	bytes map[string]int
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
	place   switchjob.Placement // what the switch holds for it, once placed
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
	// SwitchAddresses are the switch's other data-plane addresses (a
	// tree's leaves): like Dataplane and Shards, no lane may name one.
	SwitchAddresses []netip.AddrPort
	// Subnets are the worker networks the controller knows of (a tree's
	// leaves' prefixes): no lane may name one's broadcast address.
	Subnets []netip.Prefix
	// AllowLaneAddressMismatch lets a registration name lane addresses
	// whose IP is not the caller's (NAT, a separate data-plane network).
	// By default Check refuses them.
	AllowLaneAddressMismatch bool
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
	// Placeable refuses a gathered job the switch cannot serve with its
	// ranks on these ports (a Tofino's ranks on ports of two pipes). The
	// job then goes to the ring if it may, else every rank gets the
	// refusal. Nil places every job.
	Placeable func(replicas []switchjob.Replica) error
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
	// RefuseOpen refuses registrations without a token (a job service
	// that listens off loopback); otherwise such a job is open to every
	// client, and logged so.
	RefuseOpen bool
	// MaxBytesPerClient bounds the bytes one client identity makes the
	// core hold: its registrations (job name, token, lane addresses, the
	// waiting call), and the broadcasts of the jobs it created not every
	// rank fetched yet; 0: no bound.
	MaxBytesPerClient int
}

// Core is the job service's state machine. Its methods are steps: each one
// changes the state and queues what the driver must do, which Ready hands
// over. It is not safe for concurrent use.
type Core struct {
	cfg  Config
	log  *slog.Logger
	jobs map[string]*job // the current generation of each name, before it retires
	// installing are jobs the switch is being programmed for, draining
	// those whose entries are being removed or could not be
	// (jobQuarantined), by generation.
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
	// owners remembers, by name, the owners of jobs with a token that
	// ended within ownerKept (keepOwner); unstamped are those not dated
	// yet.
	owners    map[string]endedJob
	unstamped []string
	// lanes are the lane addresses the ranks of the current generations
	// (jobs) hold.
	lanes map[netip.AddrPort]*laneHolder
	waits map[Waiter]*wait
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
		owners: map[string]endedJob{},
		lanes:  map[netip.AddrPort]*laneHolder{},
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
		expired: map[uint32]bool{}, left: map[uint32]bool{}, leased: map[uint32]bool{}, bytes: map[string]int{},
		rounds: map[string]*roundSet{}, barrierSeq: map[uint32]uint64{}, waits: map[Waiter]*wait{},
	}
}

// setRank puts reg (nil: none) in rank's place, keeping the count of
// arrived ranks and the clients' bytes.
func (j *job) setRank(rank uint32, reg *registration) {
	if old := j.ranks[rank]; old != nil {
		j.arrived--
		if j.bytes[old.client] -= old.cost; j.bytes[old.client] <= 0 {
			delete(j.bytes, old.client)
		}
	}
	j.ranks[rank] = reg
	if reg != nil {
		j.arrived++
		if j.bytes == nil {
			j.bytes = map[string]int{}
		}
		j.bytes[reg.client] += reg.cost
	}
}

// bytesOf is what client holds in the job: its registrations, and the
// broadcasts not yet fetched if it created the job.
func (j *job) bytesOf(client string) int {
	n := j.bytes[client]
	if j.client == client {
		n += j.held
	}
	return n
}

// bytesOf is what client makes the core hold, over the jobs that gather,
// run or drain (a job's memory goes with it when it leaves them). It
// visits jobs, never their ranks.
func (c *Core) bytesOf(client string) int {
	n := 0
	for _, j := range c.jobs {
		n += j.bytesOf(client)
	}
	for _, j := range c.draining {
		n += j.bytesOf(client)
	}
	return n
}

// withinBytes refuses need more bytes for client when they would take it
// over its budget.
func (c *Core) withinBytes(client string, need int, what string) error {
	limit := c.cfg.MaxBytesPerClient
	if limit <= 0 {
		return nil
	}
	if held := c.bytesOf(client); held+need > limit {
		return Refuse(codes.ResourceExhausted, "client %s holds %d bytes of registrations and broadcasts on the controller, and %s of %d bytes would take it over its budget of %d (the controller's {MaxBytesPerClient}): end some of its jobs, or let their ranks finish registering",
			client, held, what, need, limit)
	}
	return nil
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
