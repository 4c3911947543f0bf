package controller

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/internal/backoff"
	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/secure"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
)

// Switch is what the job service needs from the switch: a p4rt.Client
// satisfies it.
type Switch interface {
	InstallJob(ctx context.Context, p switchjob.Placement) error
	RemoveJob(ctx context.Context, p switchjob.Placement) error
	ResetPool(ctx context.Context, base, size, slots int) error
}

// switchRPCTimeout bounds each programming step on the switch, so that a
// switch that stops answering fails the job that waits on it instead of
// freezing the service.
const switchRPCTimeout = 30 * time.Second

// ServiceConfig configures the job service.
type ServiceConfig struct {
	// Dataplane is the switch's data plane address handed to workers
	// (ip:port, resolved by the caller).
	Dataplane netip.AddrPort
	// Shards, for a software switch with several data-plane shards, are
	// their addresses, Dataplane's first: the service spreads each job's
	// lanes over them (RegisterResponse.lane_dataplanes).
	Shards []netip.AddrPort
	// Admin is who sees Status whole over TLS (lane addresses, switch job
	// ids, partition bases); other callers get it redacted. Empty: the
	// certificates with the admin role (secure.RoleAdmin). Without TLS
	// there are no identities, and every caller sees it whole.
	Admin secure.Allow
	// SwitchAddresses are the switch's other data-plane addresses (a
	// tree's leaves), and Subnets the worker networks the controller knows
	// (a tree's leaves' prefixes): no lane address may be one of the
	// former or the broadcast address of one of the latter, nor Dataplane
	// or a shard's.
	SwitchAddresses []netip.AddrPort
	Subnets         []netip.Prefix
	// AllowLaneAddressMismatch takes lane addresses whose IP is not the
	// caller's as the job service sees it (workers behind NAT, or with a
	// data-plane network apart from the one that reaches the controller).
	// By default they are refused: the switch sends each lane's results
	// to its address.
	AllowLaneAddressMismatch bool
	// Slots is the switch's pool size per set (default p4info.Slots); jobs
	// get disjoint partitions of it.
	Slots int
	// Target is what the switch takes (default: the software switch's
	// defaults). Registrations it cannot serve are refused.
	Target Target
	Logger *slog.Logger
	// Names writes the controller's settings in refusals as the
	// operator's program names them (the CLI: its flags; see package
	// field); nil: their Go names.
	Names func(field string) string
	// RefuseOpenJobs refuses registrations without a token
	// (PermissionDenied), as a job service that listens beyond loopback
	// does by default (Config.AllowOpenJobs); otherwise such jobs are
	// taken, and logged as open.
	RefuseOpenJobs bool
	// State, if set, is the file in which the service keeps the claims of
	// the jobs it places (each rank's secret and the job's token, hashed),
	// before it programs the switch for them: a restarted service reads
	// them back (StateTarget names the switch they are for), and Adopt
	// hands a job found on the switch only to ranks that prove themselves
	// by its claim. Without it, jobs found on the switch after a restart
	// cannot be taken back and end when the grace runs out. The file is
	// the service's alone until stop: a service or controller that opens
	// it meanwhile is refused.
	State, StateTarget string
	JobLimits

	// opened is State, opened and locked already (Run takes the lock
	// before it touches the switch); the service releases it at stop.
	opened *openedState
}

// openedState is a state file opened, with the claims it held.
type openedState struct {
	file   *stateFile
	claims []jobcore.Claim
}

// JobLimits bound what jobs and clients can make the controller hold.
type JobLimits struct {
	// LeaseGrace is how long each rank of a job that became active has to
	// open its lease (Watch); a rank that has not ends the job and frees
	// its slots (default DefaultLeaseGrace).
	LeaseGrace time.Duration
	// JoinTimeout is how long a job may gather: a job whose ranks have not
	// all registered by then is released, and its waiting ranks are told
	// which never came (default DefaultJoinTimeout).
	JoinTimeout time.Duration
	// MaxJobsPerClient bounds the jobs, gathering or running, that one
	// client identity (secure.Identity.Name of the job's first registrant)
	// holds (default DefaultMaxJobsPerClient; negative: no bound).
	MaxJobsPerClient int
	// MaxSlotsPerClient bounds the slots (lanes*window) of one client
	// identity's jobs (default: half the pool, DefaultSlotShare; negative:
	// no bound beyond the pool).
	MaxSlotsPerClient int
	// MaxBytesPerClient bounds the bytes one client identity makes the
	// service hold: its waiting and registered ranks (job name, token,
	// lane addresses) and its jobs' broadcasts not yet fetched (default
	// DefaultMaxBytesPerClient; negative: no bound).
	MaxBytesPerClient int
	// MaxCallsPerClient bounds the calls one client identity has open at
	// once (registrations, barriers, broadcasts, leaves and aborts), and
	// apart from them its Status and Describe calls: a call beyond either
	// bound is refused as it arrives, before its request is read (default
	// DefaultMaxCallsPerClient; negative: no bound).
	MaxCallsPerClient int
	// MaxLeasesPerClient bounds the leases (Watch streams) one client
	// identity has open at once, apart from its other calls, so that a
	// storm of those never costs a running job its leases: one beyond is
	// refused as it arrives, before its request is read (default
	// DefaultMaxLeasesPerClient; negative: no bound).
	MaxLeasesPerClient int
	// MaxConnsPerHost bounds the connections to the job service open at
	// once from one IP address: one beyond is closed as it is accepted,
	// before a byte of it is read (default DefaultMaxConnsPerHost;
	// negative: no bound). Each costs the service its buffers whether or
	// not it carries calls.
	MaxConnsPerHost int
}

// Defaults of JobLimits.
const (
	DefaultLeaseGrace       = 10 * time.Second
	DefaultJoinTimeout      = 5 * time.Minute
	DefaultMaxJobsPerClient = 64
	// DefaultMaxBytesPerClient holds a job of 256 ranks with 64 lanes
	// each, and a job's 16 MiB of broadcasts, several times over.
	DefaultMaxBytesPerClient = 64 << 20
	// DefaultMaxCallsPerClient lets every rank of the largest job the
	// software switch takes by default (256) have two calls open from one
	// host.
	DefaultMaxCallsPerClient = 512
	// DefaultMaxLeasesPerClient holds a lease for every rank of four of
	// the largest jobs the software switch takes by default (256 ranks)
	// from one client identity: each rank holds one while its job runs.
	DefaultMaxLeasesPerClient = 1024
	// DefaultMaxConnsPerHost leaves room for a connection of every rank
	// of four 256-rank jobs from one host (a worker's session holds one).
	DefaultMaxConnsPerHost = 1024
	// DefaultSlotShare is the share of the pool one client identity may
	// hold unless MaxSlotsPerClient says otherwise: half, so that one
	// client's job (a large window and many lanes) leaves room for the
	// others, and one still fits a job of 4,096 slots (--window 4096, the
	// largest, with one lane) on the default pool of 8,192.
	DefaultSlotShare = 2
)

// withDefaults fills in the zero limits.
func (l JobLimits) withDefaults() JobLimits {
	if l.LeaseGrace == 0 {
		l.LeaseGrace = DefaultLeaseGrace
	}
	if l.JoinTimeout == 0 {
		l.JoinTimeout = DefaultJoinTimeout
	}
	if l.MaxJobsPerClient == 0 {
		l.MaxJobsPerClient = DefaultMaxJobsPerClient
	}
	if l.MaxBytesPerClient == 0 {
		l.MaxBytesPerClient = DefaultMaxBytesPerClient
	}
	if l.MaxCallsPerClient == 0 {
		l.MaxCallsPerClient = DefaultMaxCallsPerClient
	}
	if l.MaxLeasesPerClient == 0 {
		l.MaxLeasesPerClient = DefaultMaxLeasesPerClient
	}
	if l.MaxConnsPerHost == 0 {
		l.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	return l
}

// slotsPerClient is the slot quota of one client identity on a pool of
// slots per set (0: no bound).
func (l JobLimits) slotsPerClient(slots int) int {
	switch {
	case l.MaxSlotsPerClient < 0:
		return 0
	case l.MaxSlotsPerClient > 0:
		return l.MaxSlotsPerClient
	}
	return max(slots/DefaultSlotShare, 1)
}

// check refuses limits that make no sense.
func (l JobLimits) check() error {
	switch {
	case l.LeaseGrace < 0:
		return fmt.Errorf("lease grace %v: want a positive duration", l.LeaseGrace)
	case l.JoinTimeout < 0:
		return fmt.Errorf("join timeout %v: want a positive duration", l.JoinTimeout)
	case l.MaxSlotsPerClient < -1:
		return fmt.Errorf("max slots per client %d: want 1 or more, 0 for the default (half the pool), or -1 for no bound", l.MaxSlotsPerClient)
	case l.MaxBytesPerClient < -1:
		return fmt.Errorf("max bytes per client %d: want 1 or more, 0 for the default, or -1 for no bound", l.MaxBytesPerClient)
	case l.MaxCallsPerClient < -1:
		return fmt.Errorf("max calls per client %d: want 1 or more, 0 for the default, or -1 for no bound", l.MaxCallsPerClient)
	case l.MaxLeasesPerClient < -1:
		return fmt.Errorf("max leases per client %d: want 1 or more, 0 for the default, or -1 for no bound", l.MaxLeasesPerClient)
	case l.MaxConnsPerHost < -1:
		return fmt.Errorf("max connections per host %d: want 1 or more, 0 for the default, or -1 for no bound", l.MaxConnsPerHost)
	}
	return nil
}

// JobService implements jobpb.JobService: it gathers the ranks of a
// job, gives the job a pool partition and programs the switch for it. The
// decisions are the core's; the service runs the RPCs, waits, and talks to
// the switch, never while it holds the core's lock.
type JobService struct {
	jobpb.UnimplementedJobServiceServer

	cfg ServiceConfig
	log *slog.Logger

	swMu sync.Mutex // one switch reprogramming at a time
	sw   Switch
	// conn counts the switch connections lost (SwitchLost): each install
	// and removal carries the count it was decided under, and is dropped
	// if the switch it was for went away before it took swMu.
	conn atomic.Uint64
	// beforeSwitch, if set (tests), is called by an install or removal
	// after the core decided it and before it takes swMu, with "install"
	// or "remove"; what it returns, if not nil, once the outcome reached
	// the core.
	beforeSwitch func(op string) (after func())
	// life ends when the service stops: removals that failed are tried
	// again until then.
	life    context.Context
	endLife context.CancelFunc
	// current is sw for readers that must not wait behind programming
	// (Status reads the switch's counters through it).
	current atomic.Pointer[switchRef]
	// away is why the switch cannot be programmed and when it can again
	// (nil while it can), the core's Offline as of its last change, for
	// registrations to read without the core's lock.
	away atomic.Pointer[switchAway]

	metrics *serviceMetrics
	control controlState // see SetControlLost

	// calls counts the bytes of each client identity's Register calls in
	// progress, bounded by MaxBytesPerClient apart from the core's lock,
	// so that a flood of them is refused without queueing for it.
	callsMu sync.Mutex
	calls   map[string]int
	open    map[openCalls]int // calls open, by client identity and kind (tapCall)

	mu   sync.Mutex // guards the core and the fields below
	core *jobcore.Core
	// waiters are the calls waiting for the core's answer; each channel
	// takes the one answer without blocking.
	waiters    map[jobcore.Waiter]chan jobcore.Answer
	lastWaiter jobcore.Waiter
	// back is closed when the switch can be programmed again after
	// SwitchLost.
	back chan struct{}
	// drained is closed while no retired job's entries are being removed.
	drained chan struct{}
	// timer ticks the core at its next deadline, until stop.
	timer   *time.Timer
	stopped bool

	// state keeps the claims of the jobs on the switch (ServiceConfig.State;
	// nil: none are kept); claims are those it held at start, for Adopt.
	state  *stateFile
	claims []jobcore.Claim
	saving sync.WaitGroup // writes of the state file under way
}

// NewJobService returns a job service programming sw.
func NewJobService(sw Switch, cfg ServiceConfig) (*JobService, error) {
	if sw == nil {
		return nil, errors.New("controller: NewJobService: nil switch")
	}
	if !cfg.Dataplane.IsValid() {
		return nil, errors.New("controller: NewJobService: no switch data plane address")
	}
	if cfg.Slots == 0 {
		cfg.Slots = p4info.Slots
	}
	if cfg.Slots < 1 {
		return nil, fmt.Errorf("controller: NewJobService: Slots = %d", cfg.Slots)
	}
	if cfg.Target.Kind == "" {
		t, err := TargetFor(KindSoftswitch, 0)
		if err != nil {
			return nil, err
		}
		cfg.Target = t
	}
	if cfg.Target.P4() && len(cfg.Target.Ports) == 0 {
		return nil, fmt.Errorf("controller: a %s switch needs a port map (which switch port reaches which worker address)", cfg.Target.Kind)
	}
	if len(cfg.Shards) > 1 {
		if cfg.Target.P4() {
			return nil, fmt.Errorf("controller: %d data-plane addresses for a %s switch: several are for a software switch of several shards; give one", len(cfg.Shards), cfg.Target.Kind)
		}
		if cfg.Shards[0] != cfg.Dataplane {
			return nil, fmt.Errorf("controller: NewJobService: the first shard %v is not the data plane address %v", cfg.Shards[0], cfg.Dataplane)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.JobLimits = cfg.JobLimits.withDefaults()
	if err := cfg.JobLimits.check(); err != nil {
		return nil, fmt.Errorf("controller: NewJobService: %w", err)
	}
	c := jobcore.New(jobcore.Config{Dataplane: cfg.Dataplane, Shards: cfg.Shards, Slots: cfg.Slots, Logger: cfg.Logger,
		SwitchAddresses: cfg.SwitchAddresses, Subnets: cfg.Subnets, AllowLaneAddressMismatch: cfg.AllowLaneAddressMismatch,
		Admit: cfg.Target.check, PortOf: cfg.Target.portOf, Placeable: cfg.Target.placeable, Keyed: cfg.Target.Auth,
		Rand: randUint64, DrainWait: switchRPCTimeout, LeaseGrace: cfg.LeaseGrace, JoinTimeout: cfg.JoinTimeout,
		MaxJobsPerClient: max(cfg.MaxJobsPerClient, 0), MaxSlotsPerClient: cfg.JobLimits.slotsPerClient(cfg.Slots),
		MaxBytesPerClient: max(cfg.MaxBytesPerClient, 0), RefuseOpen: cfg.RefuseOpenJobs})
	if cfg.AllowLaneAddressMismatch {
		cfg.Logger.Warn("controller: lane addresses are not checked against the caller's address (AllowLaneAddressMismatch): a client can aim the switch's results at another host; use it only where workers reach the controller through NAT or another network than their data plane")
	}
	drained := make(chan struct{})
	close(drained)
	s := &JobService{sw: sw, cfg: cfg, log: cfg.Logger, core: c, calls: map[string]int{}, open: map[openCalls]int{}, waiters: map[jobcore.Waiter]chan jobcore.Answer{}, drained: drained, metrics: newServiceMetrics()}
	s.life, s.endLife = context.WithCancel(context.Background())
	switch {
	case cfg.opened != nil:
		s.state, s.claims = cfg.opened.file, cfg.opened.claims
	case cfg.State != "":
		var err error
		if s.state, s.claims, err = openState(cfg.State, cfg.StateTarget); err != nil {
			return nil, err
		}
	}
	s.current.Store(&switchRef{sw})
	return s, nil
}

func randUint64() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// step runs f on the core under s.mu and carries out what the core asks
// for: answers reach their callers before the lock is released, and switch
// work starts after, in the background.
func (s *JobService) step(f func(c *jobcore.Core)) {
	s.mu.Lock()
	f(s.core)
	fx := s.core.Ready()
	for _, a := range fx.Answers {
		if ch := s.waiters[a.To()]; ch != nil {
			ch <- a
			delete(s.waiters, a.To())
		}
	}
	s.noteDrained()
	s.rearm()
	// Claims change in the core's order; install writes them before it
	// programs the switch. A service that stopped keeps what it had: its
	// jobs are still on the switch, for the next controller.
	// Each install saves the claims; forgets alone are saved here.
	keep := s.state != nil && !s.stopped
	save := keep && len(fx.Forgets) > 0 && len(fx.Installs) == 0
	if keep {
		for _, in := range fx.Installs {
			s.state.set(in.Claim)
		}
		for _, id := range fx.Forgets {
			s.state.forget(id)
		}
		s.saving.Add(len(fx.Installs))
		if save {
			s.saving.Add(1)
		}
	}
	conn := s.conn.Load()
	s.mu.Unlock()
	for _, in := range fx.Installs {
		go s.install(in, keep, conn)
	}
	for _, rm := range fx.Removals {
		go s.remove(rm, conn)
	}
	if save {
		go func() {
			defer s.saving.Done()
			s.saveState()
		}()
	}
}

// saveState writes the claims to the state file, if they changed.
func (s *JobService) saveState() {
	if err := s.state.flush(); err != nil {
		s.metrics.switchErrors.WithLabelValues("state").Inc()
		s.log.Error("controller: the jobs' claims could not be kept: jobs placed from now on end if this controller restarts", "state", s.state.path, "err", err)
	}
}

// enter makes a call that may wait for the core's answer: f hands it to
// the core as w, and its answer comes on ch unless f refuses it.
func (s *JobService) enter(f func(c *jobcore.Core, w jobcore.Waiter) error) (w jobcore.Waiter, ch chan jobcore.Answer, err error) {
	s.step(func(c *jobcore.Core) {
		s.lastWaiter++
		w, ch = s.lastWaiter, make(chan jobcore.Answer, 1)
		s.waiters[w] = ch
		if err = f(c, w); err != nil {
			delete(s.waiters, w)
		}
	})
	return w, ch, err
}

// await waits for the core's answer to w until ctx is done; then the core
// hears that the caller gave up, unless the answer came first.
func (s *JobService) await(ctx context.Context, w jobcore.Waiter, ch chan jobcore.Answer) (jobcore.Answer, error) {
	select {
	case a := <-ch:
		return a, a.Err()
	case <-ctx.Done():
	}
	var a jobcore.Answer
	var err error
	s.step(func(c *jobcore.Core) {
		select {
		case a = <-ch: // answered meanwhile: take it
			err = a.Err()
		default:
			delete(s.waiters, w)
			err = c.GiveUp(w, status.FromContextError(ctx.Err()).Code())
		}
	})
	return a, err
}

// noteDrained keeps s.drained in step with the core. Callers hold s.mu.
func (s *JobService) noteDrained() {
	busy := s.core.Draining() > 0
	select {
	case <-s.drained:
		if busy {
			s.drained = make(chan struct{})
		}
	default:
		if !busy {
			close(s.drained)
		}
	}
}

// rearm sets the timer to the core's next deadline. Callers hold s.mu.
func (s *JobService) rearm() {
	next, ok := s.core.Deadline()
	switch {
	case !ok || s.stopped:
		if s.timer != nil {
			s.timer.Stop()
		}
	case s.timer == nil:
		s.timer = time.AfterFunc(time.Until(next), s.tick)
	default:
		s.timer.Reset(time.Until(next))
	}
}

func (s *JobService) tick() { s.step(func(c *jobcore.Core) { c.Tick(time.Now()) }) }

// stop ends the timer, so that a grace period or drain wait running out
// after the service is done changes nothing; leases that end after it
// were ended by the server stopping, not by their ranks, and abort no job.
func (s *JobService) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.endLife()
	// No write of the state file starts once stopped is set.
	s.saving.Wait()
	if s.state != nil {
		s.state.close()
	}
}

// errSwitchChanged is why an install or removal decided for a switch
// connection that was lost before it ran does not run.
var errSwitchChanged = errors.New("the connection to the switch it was decided for was lost")

// onSwitch runs op on the switch, one programming at a time, unless the
// connection to the switch that conn counts was lost meanwhile: then it
// returns errSwitchChanged. An install or removal that waited for the
// switch while the link went down must not run on the connection that
// replaced it: it would install a job that ended with the link, or remove
// the entries of a job placed since on the same room.
func (s *JobService) onSwitch(conn uint64, op func(ctx context.Context, sw Switch) error) error {
	s.swMu.Lock()
	defer s.swMu.Unlock()
	// SwitchLost counts the loss before SwitchBack hands over the new
	// switch under swMu, so an op decided before the loss sees it here.
	if s.conn.Load() != conn {
		return errSwitchChanged
	}
	ctx, cancel := context.WithTimeout(context.Background(), switchRPCTimeout)
	defer cancel()
	return op(ctx, s.sw)
}

// hook calls beforeSwitch, if set, and returns what to call at the end.
func (s *JobService) hook(op string) (after func()) {
	if s.beforeSwitch != nil {
		if after := s.beforeSwitch(op); after != nil {
			return after
		}
	}
	return func() {}
}

// install programs the switch for a job the core placed, and reports.
func (s *JobService) install(in jobcore.Install, save bool, conn uint64) {
	if save {
		s.saveState()
		s.saving.Done()
	}
	defer s.hook("install")()
	err := s.onSwitch(conn, func(ctx context.Context, sw Switch) error {
		if err := sw.ResetPool(ctx, int(in.Place.PoolBase), int(in.Place.PoolSize), s.cfg.Slots); err != nil {
			return err
		}
		return sw.InstallJob(ctx, in.Place)
	})
	if err != nil {
		s.metrics.switchErrors.WithLabelValues("install").Inc()
		code := status.Code(err)
		if code == codes.InvalidArgument || code == codes.OutOfRange || code == codes.AlreadyExists {
			code = codes.FailedPrecondition // the switch refused this job's shape
		} else if code == codes.Unknown || code == codes.Canceled || code == codes.DeadlineExceeded {
			// The switch went away or did not answer in time: nothing the
			// registrants' own contexts did.
			code = codes.Unavailable
		}
		err = status.Errorf(code, "job %q: programming the switch failed: %v", in.Job, err)
	}
	s.step(func(c *jobcore.Core) {
		if took, ready := c.Installed(in.Gen, err, time.Now()); ready {
			s.metrics.ready.Observe(took.Seconds())
		}
	})
}

// Bounds of the waits between tries to remove a job's entries.
const (
	removeRetryFirst = 200 * time.Millisecond
	removeRetryMax   = 10 * time.Second
)

// remove deletes a retired job's switch entries, and reports. While the
// switch refuses, the job is quarantined (its room stays taken) and the
// removal is tried again with back-off, until it goes through, the switch
// is lost (its entries are then cleared when it is back) or the service
// stops (they stay, for the next controller to find).
func (s *JobService) remove(rm jobcore.Removal, conn uint64) {
	defer s.hook("remove")()
	wait := backoff.New(removeRetryFirst, removeRetryMax)
	for {
		err := s.onSwitch(conn, func(ctx context.Context, sw Switch) error { return sw.RemoveJob(ctx, rm.Place) })
		switch {
		case errors.Is(err, errSwitchChanged):
			return // SwitchLost released the job
		case err == nil:
			s.step(func(c *jobcore.Core) { c.Removed(rm.Gen, time.Now()) })
			return
		}
		s.metrics.switchErrors.WithLabelValues("remove").Inc()
		s.step(func(c *jobcore.Core) { c.RemoveFailed(rm.Gen, err, time.Now()) })
		if backoff.Sleep(s.life, wait.Next()) != nil {
			return
		}
	}
}

// Drained is closed once no retired job's switch entries are still being
// removed (tests, and callers that want the switch quiet).
func (s *JobService) Drained() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drained
}

// answerBefore shortens a call's deadline a little, so that a wait that runs
// out is answered with the service's explanation before the caller's own
// deadline turns it into a bare "context deadline exceeded".
func answerBefore(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(time.Until(d)/10, 500*time.Millisecond)
	return context.WithDeadline(ctx, d.Add(-margin))
}

// Describe implements jobpb.JobService.
func (s *JobService) Describe(context.Context, *jobpb.DescribeRequest) (*jobpb.DescribeResponse, error) {
	return s.cfg.Target.describe(s.cfg.Slots), nil
}

// Register implements jobpb.JobService. Any client may register, for
// lane sockets on its own host (the core checks the lane addresses against
// the caller's IP, which the driver reads from the connection); a new job
// counts against the caller's identity (secure.IdentityOf), and a job's
// name belongs to its token while the job lives.
func (s *JobService) Register(ctx context.Context, req *jobpb.RegisterRequest) (resp *jobpb.RegisterResponse, err error) {
	defer func() { s.metrics.registrations.WithLabelValues(status.Code(err).String()).Inc() }()
	caller := secure.IdentityOf(ctx)
	client := caller.Name()
	release, err := s.callBytes(client, jobcore.RegistrationCost(req))
	if err != nil {
		return nil, err
	}
	defer release()
	// Check reads only the core's configuration, and a tree's shape is
	// fixed: the request is checked outside the lock.
	chk, err := s.core.Check(req, caller.Addr)
	tree, _ := s.current.Load().Switch.(*Tree)
	var leafDP netip.AddrPort
	if err == nil && tree != nil {
		leafDP, err = tree.shape.Dataplane(req.GetRank(), req.GetSparse(), chk.LaneAddresses())
	}
	if err != nil {
		s.step(func(c *jobcore.Core) { c.CannotForm(req, client, err, time.Now()) }) // its peers learn at once why the job cannot form
		return nil, err
	}
	// While the controller reconnects to the switch, registrations wait
	// for it as they wait for the other ranks; those that may run over the
	// ring go on, and their job goes there if the switch is still away
	// when every rank is in.
	if away := s.away.Load(); away != nil && req.GetFallbackAddress() == "" {
		wctx, cancel := answerBefore(ctx)
		s.metrics.waitingForSwitch.Inc()
		back := false
		select {
		case <-away.back:
			back = true
		case <-wctx.Done():
		}
		s.metrics.waitingForSwitch.Dec()
		cancel()
		if !back {
			return nil, status.Errorf(codes.Unavailable, "the switch did not come back before the deadline (%s); join again later", away.why)
		}
	}
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	w, ch, err := s.enter(func(c *jobcore.Core, w jobcore.Waiter) error { return c.Register(w, chk, client, time.Now()) })
	if err != nil {
		return nil, err
	}
	a, err := s.await(ctx, w, ch)
	if err != nil {
		return nil, err
	}
	if tree != nil && a.Registered().GetSwitchDataplane() != "" {
		// Each rank sends to its own leaf.
		resp := proto.Clone(a.Registered()).(*jobpb.RegisterResponse)
		resp.SwitchDataplane, resp.LaneDataplanes = leafDP.String(), nil
		return resp, nil
	}
	return a.Registered(), nil
}

// callKind is what a call counts against, with the others of its client
// identity open at once: each kind has its own bound, so that a storm of
// one kind never refuses another (a running job's lease, an operator's
// status).
type callKind uint8

const (
	kindCall  callKind = iota // registrations, barriers, broadcasts, leaves, aborts
	kindLease                 // Watch: a rank's lease, open while its job runs
	kindQuery                 // Status and Describe, answered at once
)

// openCalls keys the calls open by client identity and kind.
type openCalls struct {
	client string
	kind   callKind
}

// kindOf is the kind of the call to method (a full method name).
func kindOf(method string) callKind {
	switch method {
	case jobpb.JobService_Watch_FullMethodName:
		return kindLease
	case jobpb.JobService_Status_FullMethodName, jobpb.JobService_Describe_FullMethodName:
		return kindQuery
	}
	return kindCall // and any method the service does not have
}

// refuse is a refusal of the service's own (not the core's), its
// settings named as the operator's program names them.
func (s *JobService) refuse(code codes.Code, format string, args ...any) error {
	return s.named(jobcore.Refuse(code, format, args...))
}

// named is err, a refusal of the core's or the service's, as a gRPC
// status whose text writes the settings it names as the operator's
// program names them (ServiceConfig.Names); any other error as it is.
func (s *JobService) named(err error) error {
	var r *jobcore.Refusal
	if s.cfg.Names == nil || !errors.As(err, &r) {
		return err
	}
	return status.Error(jobcore.CodeOf(err), field.Named(err, s.cfg.Names).Error())
}

// tapCall is the job service's grpc.InTapHandle: it counts a call as it
// arrives, before its request is read, against its client identity's
// bound for its kind (MaxLeasesPerClient for leases, MaxCallsPerClient for
// the others and, apart, for status and Describe), and refuses it beyond;
// the count goes when the call ends. So a storm of calls from one
// identity, however many connections it opens, costs no more than that
// many calls' headers (maxHeaderListBytes) and requests read at once.
func (s *JobService) tapCall(ctx context.Context, info *tap.Info) (context.Context, error) {
	kind := kindOf(info.FullMethodName)
	limit, flag, what := s.cfg.MaxCallsPerClient, "{MaxCallsPerClient}", "calls"
	switch kind {
	case kindLease:
		limit, flag, what = s.cfg.MaxLeasesPerClient, "{MaxLeasesPerClient}", "leases (Watch)"
	case kindQuery:
		what = "status and Describe calls"
	}
	if limit <= 0 {
		return ctx, nil
	}
	key := openCalls{secure.IdentityOf(ctx).Name(), kind}
	s.callsMu.Lock()
	open := s.open[key]
	if open >= limit {
		s.callsMu.Unlock()
		s.metrics.refusedCalls.Inc()
		return nil, s.refuse(codes.ResourceExhausted, "client %s has %d %s open, its limit (the controller's "+flag+"): wait for them to end", key.client, open, what)
	}
	s.open[key] = open + 1
	s.callsMu.Unlock()
	context.AfterFunc(ctx, func() {
		s.callsMu.Lock()
		if s.open[key]--; s.open[key] <= 0 {
			delete(s.open, key)
		}
		s.callsMu.Unlock()
	})
	return ctx, nil
}

// callBytes counts n bytes of a Register call of client's in progress, or
// refuses the call when the client's calls would hold more than its
// budget; release uncounts them.
func (s *JobService) callBytes(client string, n int) (release func(), err error) {
	limit := s.cfg.MaxBytesPerClient
	if limit <= 0 {
		return func() {}, nil
	}
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	if held := s.calls[client]; held+n > limit {
		return nil, s.refuse(codes.ResourceExhausted, "client %s has %d bytes of registrations in progress, and this one of %d would take it over its budget of %d (the controller's {MaxBytesPerClient}): wait for its registrations to be answered",
			client, held, n, limit)
	}
	s.calls[client] += n
	return func() {
		s.callsMu.Lock()
		defer s.callsMu.Unlock()
		if s.calls[client] -= n; s.calls[client] <= 0 {
			delete(s.calls, client)
		}
	}, nil
}

// Barrier implements jobpb.JobService. Only a rank of the session,
// proven by its rank secret, may call it; so for Broadcast, Leave, Abort
// and Watch.
func (s *JobService) Barrier(ctx context.Context, req *jobpb.BarrierRequest) (*jobpb.BarrierResponse, error) {
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	w, ch, err := s.enter(func(c *jobcore.Core, w jobcore.Waiter) error { return c.Barrier(w, req) })
	if err != nil {
		return nil, err
	}
	if _, err := s.await(ctx, w, ch); err != nil {
		return nil, err
	}
	return &jobpb.BarrierResponse{}, nil
}

// Broadcast implements jobpb.JobService.
func (s *JobService) Broadcast(ctx context.Context, req *jobpb.BroadcastRequest) (*jobpb.BroadcastResponse, error) {
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	w, ch, err := s.enter(func(c *jobcore.Core, w jobcore.Waiter) error { return c.Broadcast(w, req) })
	if err != nil {
		return nil, err
	}
	a, err := s.await(ctx, w, ch)
	if err != nil {
		return nil, err
	}
	return &jobpb.BroadcastResponse{Data: a.Data()}, nil
}

// Leave implements jobpb.JobService.
func (s *JobService) Leave(ctx context.Context, req *jobpb.LeaveRequest) (*jobpb.LeaveResponse, error) {
	var err error
	var p jobcore.Partition
	var gen uint64
	s.step(func(c *jobcore.Core) {
		if err = c.Leave(req); err == nil {
			p, gen = c.LeftEarly(req)
		}
	})
	if err != nil {
		return nil, err
	}
	if gen != 0 {
		// Its peers run on: do the job's slots wait for this rank's
		// share (it left in the middle of a call they make)?
		if v := s.diagnose(ctx, p); v.Missing[int(req.GetRank())] > 0 {
			s.step(func(c *jobcore.Core) { c.LeftMidCall(gen, req.GetRank(), v.Missing[int(req.GetRank())]) })
		}
	}
	return &jobpb.LeaveResponse{}, nil
}

// Abort implements jobpb.JobService.
func (s *JobService) Abort(ctx context.Context, req *jobpb.AbortRequest) (*jobpb.AbortResponse, error) {
	var v jobcore.Stall
	if req.GetSwitchUnreachable() {
		// Before it is taken for a lost switch: does the switch answer, and
		// do the job's slots wait for ranks that stopped sending?
		s.mu.Lock()
		p, ok, err := s.core.PartitionOf(req)
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if ok {
			v = s.diagnose(ctx, p)
		}
	}
	var cause, why string
	var err error
	s.step(func(c *jobcore.Core) { cause, why, err = c.Abort(req, v) })
	if err != nil {
		return nil, err
	}
	return &jobpb.AbortResponse{Cause: cause, Reason: why}, nil
}

// Watch implements jobpb.JobService: the stream is the rank's lease.
func (s *JobService) Watch(req *jobpb.WatchRequest, stream jobpb.JobService_WatchServer) error {
	w, ch, err := s.enter(func(c *jobcore.Core, w jobcore.Waiter) error { return c.Watch(w, req) })
	if err != nil {
		return err
	}
	// end ends the lease unless the job ended first.
	end := func(lost bool) {
		s.step(func(c *jobcore.Core) {
			select {
			case <-ch:
			default:
				delete(s.waiters, w)
				c.EndLease(w, lost && !s.stopped)
			}
		})
	}
	if err := stream.Send(&jobpb.WatchEvent{}); err != nil {
		end(false)
		return err
	}
	select {
	case a := <-ch:
		why, cause := a.Ended()
		return stream.Send(&jobpb.WatchEvent{Aborted: true, Reason: why, Cause: cause.String()})
	case <-stream.Context().Done():
		end(true)
		return nil
	}
}

// SwitchLost ends every job: the switch restarted or the controller lost
// it, so what the jobs had there is gone. Their entries are not removed
// (there is nothing to remove them from); registrations wait until
// SwitchBack.
func (s *JobService) SwitchLost(why string) {
	s.metrics.switchLost.Inc()
	s.step(func(c *jobcore.Core) {
		s.conn.Add(1)
		if c.Offline() == "" {
			s.back = make(chan struct{})
		}
		c.SwitchLost(why)
		s.away.Store(&switchAway{why: c.Offline(), back: s.back})
	})
}

// switchAway is why the switch is away, and back, closed when it is back.
type switchAway struct {
	why  string
	back chan struct{}
}

// SwitchBack hands the service the reprogrammed switch, which must hold
// nothing of the jobs that ended with SwitchLost: the registrations that
// waited for it are placed at once, on room those jobs had.
func (s *JobService) SwitchBack(sw Switch) {
	s.swMu.Lock()
	s.sw = sw
	s.current.Store(&switchRef{sw})
	s.swMu.Unlock()
	s.step(func(c *jobcore.Core) {
		if c.Offline() != "" {
			c.SwitchBack()
			close(s.back)
			s.away.Store(nil)
		}
	})
}

// Adopt reads the jobs a switch holds (its tables, as an earlier controller
// left them) and keeps them: their partitions stay taken, and their ranks
// take them back by watching their sessions again (Watch with the switch
// job id). Jobs nobody claims within grace are removed, and so are claimed
// jobs whose ranks did not all come back.
func (s *JobService) Adopt(ctx context.Context, sw interface {
	ReadPlacements(context.Context) ([]switchjob.Placement, error)
}, grace time.Duration) error {
	found, err := sw.ReadPlacements(ctx)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	claims := s.claims
	s.claims = nil // after a reconnect, Adopt finds only jobs that ended with the switch
	s.step(func(c *jobcore.Core) { c.Adopt(found, claims, time.Now(), grace) })
	return nil
}

// Jobs lists the active jobs' names and partitions, for logs and tests.
func (s *JobService) Jobs() map[string]*jobpb.RegisterResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.ActiveJobs()
}
