package controller

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/switchml/switchml-go/p4/controller/controllerpb"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/switchml/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Switch is what the job service needs from the switch: a P4Runtime Client
// satisfies it.
type Switch interface {
	InstallJob(ctx context.Context, j JobEntries) error
	RemoveJob(ctx context.Context, j JobEntries) error
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
	// Slots is the switch's pool size per set (default p4info.Slots); jobs
	// get disjoint partitions of it.
	Slots int
	// Target is what the switch takes (default: the software switch's
	// defaults). Registrations it cannot serve are refused.
	Target Target
	Logger *slog.Logger
}

// JobService implements controllerpb.JobService: it gathers the ranks of a
// job, gives the job a pool partition and programs the switch for it.
type JobService struct {
	controllerpb.UnimplementedJobServiceServer

	sw   Switch
	cfg  ServiceConfig
	log  *slog.Logger
	swMu sync.Mutex // one switch reprogramming at a time
	mu   sync.Mutex
	jobs map[string]*job
	// offline says why the switch cannot be programmed now ("" when it
	// can); back is closed when it can again.
	offline string
	back    chan struct{}
	// draining are retired jobs whose switch entries are being removed:
	// their partitions, groups and ids stay taken until then. drained is
	// closed when the set becomes empty.
	draining map[*job]bool
	drained  chan struct{}
	// detached are jobs a restarted controller found on the switch, by
	// switch job id, until one of their ranks claims them (Watch).
	detached map[uint32]*job
	// ended remembers why recent sessions ended, so that a rank asking
	// about one learns the cause (bounded: the oldest are forgotten).
	ended      map[uint64]string
	endedOrder []uint64
	jobID      uint32 // last switch job id handed out
}

// job is one generation of a named job: from the first registration of a
// run until it is replaced or every rank left.
type job struct {
	name    string
	params  *controllerpb.RegisterRequest // the first registrant's; others must agree
	ranks   []*controllerpb.RegisterRequest
	arrived int
	expired map[uint32]bool // ranks whose registration timed out
	ready   chan struct{}   // closed once programmed or failed
	err     error           // why programming failed (set before ready closes)
	active  bool            // programmed, switch entries installed
	gone    bool            // replaced or left: its waiters must give up

	resp    *controllerpb.RegisterResponse
	entries JobEntries
	left    map[uint32]bool
	rounds  map[string]*roundSet // barriers and broadcasts by name
	owner   [32]byte             // hash of the registrants' token
	adopted bool                 // found on the switch by a restarted controller
	leased  map[uint32]bool      // ranks that took their lease on this controller
	// barrierSeq is the highest barrier count each rank has shown; progressed
	// is closed (and replaced) whenever one rises.
	barrierSeq map[uint32]uint64
	progressed chan struct{}
	over       chan struct{} // closed when the generation is retired
	why        string        // why it was retired
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
	done     chan struct{}
	root     uint32
	hasRoot  bool
	data     []byte
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &JobService{sw: sw, cfg: cfg, log: cfg.Logger, jobs: map[string]*job{}, ended: map[uint64]string{},
		draining: map[*job]bool{}, drained: closedChan(), detached: map[uint32]*job{}}, nil
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
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

// Bounds on what clients can make the controller hold.
const (
	maxJobs         = 4096 // jobs gathering or active
	maxRoundsPerJob = 1024 // barrier and broadcast names per job
)

func tooManyRounds() error {
	return status.Errorf(codes.ResourceExhausted, "the job uses %d barrier and broadcast names, the controller's limit: reuse names", maxRoundsPerJob)
}

// addressesFree refuses lane addresses that another live job's workers
// hold: a socket belongs to one live process, so such a registration is a
// mistake or an attempt to take the other job's traffic. A job whose
// process died is ended by its lease, which frees its addresses. Callers
// hold s.mu.
func (s *JobService) addressesFree(name string, addrs []netip.AddrPort) error {
	mine := map[netip.AddrPort]bool{}
	for _, a := range addrs {
		mine[a] = true
	}
	for _, other := range s.jobs {
		if other.name == name {
			continue
		}
		for r, req := range other.ranks {
			if req == nil {
				continue
			}
			for _, la := range req.GetLaneAddresses() {
				if a, err := netip.ParseAddrPort(la); err == nil && mine[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())] {
					return status.Errorf(codes.AlreadyExists, "lane address %v is held by rank %d of job %q, which is still running (if its process is gone, the controller ends that job as soon as its lease lapses)", a, r, other.name)
				}
			}
		}
	}
	return nil
}

// Describe implements controllerpb.JobService.
func (s *JobService) Describe(context.Context, *controllerpb.DescribeRequest) (*controllerpb.DescribeResponse, error) {
	return s.cfg.Target.describe(s.cfg.Slots), nil
}

// Register implements controllerpb.JobService.
func (s *JobService) Register(ctx context.Context, req *controllerpb.RegisterRequest) (*controllerpb.RegisterResponse, error) {
	addrs, err := checkRequest(req)
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Target.check(req, addrs); err != nil {
		return nil, err
	}
	// While the controller reconnects to the switch, registrations wait
	// for it as they wait for the other ranks.
	s.mu.Lock()
	offline, back := s.offline, s.back
	s.mu.Unlock()
	if offline != "" {
		wctx, cancel := answerBefore(ctx)
		select {
		case <-back:
			cancel()
		case <-wctx.Done():
			cancel()
			return nil, status.Errorf(codes.Unavailable, "the switch did not come back before the deadline (%s); join again later", offline)
		}
	}
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	owner := sha256.Sum256([]byte(req.GetToken()))
	s.mu.Lock()
	j := s.jobs[req.GetJob()]
	if j != nil && subtle.ConstantTimeCompare(j.owner[:], owner[:]) != 1 {
		s.mu.Unlock()
		return nil, status.Errorf(codes.PermissionDenied, "job %q belongs to another owner: its ranks registered with a different token (pick another job name, or use the job's token)", req.GetJob())
	}
	if err := s.addressesFree(req.GetJob(), addrs); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if j == nil && len(s.jobs) >= maxJobs {
		s.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "the controller holds %d jobs, its limit; wait for one to end", maxJobs)
	}
	// A registration into a programmed job, or a second one from rank 0,
	// is a new run of the job: the old generation goes away.
	if j != nil && (j.active || j.err != nil || (req.GetRank() == 0 && j.ranks[0] != nil)) {
		s.retire(j, "restarted: rank "+strconv.Itoa(int(req.GetRank()))+" registered again")
		j = nil
	}
	if j == nil {
		j = &job{
			name: req.GetJob(), params: req, ranks: make([]*controllerpb.RegisterRequest, req.GetWorldSize()),
			ready: make(chan struct{}), left: map[uint32]bool{}, rounds: map[string]*roundSet{}, expired: map[uint32]bool{},
			over: make(chan struct{}), owner: owner, leased: map[uint32]bool{},
		}
		s.jobs[req.GetJob()] = j
	} else if m := mismatch(j.params, req); m != "" {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "job %q rank %d: %s", req.GetJob(), req.GetRank(), m)
	}
	if j.ranks[req.GetRank()] == nil {
		j.arrived++
	}
	delete(j.expired, req.GetRank())
	j.ranks[req.GetRank()] = req
	complete := j.arrived == len(j.ranks)
	s.mu.Unlock()

	if complete {
		s.activate(j)
	}
	select {
	case <-j.ready:
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-j.ready: // programmed meanwhile: answer anyway
		default:
			if j.ranks[req.GetRank()] == req {
				j.ranks[req.GetRank()] = nil
				j.arrived--
				// Other ranks timing out at the same moment must not name
				// this one as never registered.
				j.expired[req.GetRank()] = true
			}
			if j.arrived == 0 && !j.active && s.jobs[j.name] == j {
				// Nobody waits for this job any more: forget it, or
				// registrations that give up would pile up jobs.
				s.retire(j, "abandoned: every rank gave up waiting")
			}
			var missing []int
			for r, x := range j.ranks {
				if x == nil && !j.expired[uint32(r)] {
					missing = append(missing, r)
				}
			}
			return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(),
				"job %q: ranks %v of %d never registered before rank %d's deadline (start every rank, or check the job name and world size)",
				req.GetJob(), missing, len(j.ranks), req.GetRank())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.err != nil {
		return nil, j.err
	}
	return j.resp, nil
}

// retire removes a generation: waiters fail, its switch entries go. Callers
// hold s.mu.
func (s *JobService) retire(j *job, why string) {
	if s.jobs[j.name] == j {
		delete(s.jobs, j.name)
	}
	if j.gone {
		return
	}
	j.gone = true
	j.why = why
	close(j.over)
	if id := j.resp.GetSessionId(); id != 0 {
		const remembered = 4096
		s.ended[id] = fmt.Sprintf("job %q %s", j.name, why)
		s.endedOrder = append(s.endedOrder, id)
		if len(s.endedOrder) > remembered {
			delete(s.ended, s.endedOrder[0])
			s.endedOrder = s.endedOrder[1:]
		}
	}
	select {
	case <-j.ready:
	default:
		j.err = status.Errorf(codes.Aborted, "job %q %s before all ranks registered", j.name, why)
		close(j.ready)
	}
	for _, rs := range j.rounds {
		for _, r := range rs.rounds {
			select {
			case <-r.done:
			default:
				close(r.done)
			}
		}
	}
	if j.active {
		j.active = false
		s.log.Info("controller: job removed", "job", j.name, "session", j.resp.GetSessionId(), "why", why)
		// The switch is not called under s.mu: the entries go in the
		// background, and the partition stays taken until they are gone.
		if len(s.draining) == 0 {
			s.drained = make(chan struct{})
		}
		s.draining[j] = true
		go s.remove(j)
	}
}

// Drained is closed once no retired job's switch entries are still being
// removed (tests, and callers that want the switch quiet).
func (s *JobService) Drained() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drained
}

// remove deletes a retired job's switch entries and frees its partition.
func (s *JobService) remove(j *job) {
	s.swMu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), switchRPCTimeout)
	err := s.sw.RemoveJob(ctx, j.entries)
	cancel()
	s.swMu.Unlock()
	if err != nil {
		s.log.Warn("controller: removing job entries", "job", j.name, "err", err)
	}
	s.mu.Lock()
	s.undrain(j)
	s.mu.Unlock()
}

// undrain frees a draining job's partition. Callers hold s.mu.
func (s *JobService) undrain(j *job) {
	if !s.draining[j] {
		return
	}
	delete(s.draining, j)
	if len(s.draining) == 0 {
		close(s.drained)
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// allocate finds room for size slots among the active jobs' partitions and
// a free multicast group and job id. Callers hold s.mu.
func (s *JobService) allocate(size uint32) (base uint32, mgid uint16, jobID uint32, err error) {
	type part struct{ base, size uint32 }
	var parts []part
	groups := map[uint16]bool{}
	ids := map[uint32]bool{}
	taken := func(j *job) {
		parts = append(parts, part{j.resp.GetPoolBase(), j.resp.GetPoolSize()})
		groups[j.entries.MulticastGroup] = true
		ids[j.resp.GetJobId()] = true
	}
	for _, j := range s.jobs {
		if j.active {
			taken(j)
		}
	}
	for j := range s.draining {
		taken(j)
	}
	for _, j := range s.detached {
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
		free := uint32(s.cfg.Slots) - next
		if free < size {
			return 0, 0, 0, status.Errorf(codes.ResourceExhausted,
				"switch has no room: the job needs lanes*window = %d slots, the largest free range has %d of %d (%d jobs active); lower window or lanes, or wait for a job to leave",
				size, max(largest, free), s.cfg.Slots, len(parts))
		}
	}
	for mgid = 1; groups[mgid]; mgid++ {
		if mgid == 0xffff {
			return 0, 0, 0, status.Error(codes.ResourceExhausted, "switch has no free multicast group")
		}
	}
	for {
		s.jobID++
		if s.jobID != 0 && !ids[s.jobID] {
			break
		}
	}
	return next, mgid, s.jobID, nil
}

func randUint64() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// activate programs the switch for a job whose ranks have all registered.
func (s *JobService) activate(j *job) {
	s.mu.Lock()
	if j.gone {
		s.mu.Unlock()
		return
	}
	p := j.params
	size := p.GetLanes() * p.GetWindow()
	// Retired jobs' entries go first (their slots, groups and maybe the
	// same worker addresses come free): wait for the removals in flight,
	// without holding s.mu over the switch calls.
	for len(s.draining) > 0 {
		drained := s.drained
		s.mu.Unlock()
		select {
		case <-drained:
		case <-time.After(switchRPCTimeout):
		}
		s.mu.Lock()
		if j.gone {
			s.mu.Unlock()
			return
		}
		if drained == s.drained && len(s.draining) > 0 {
			break // removals that did not finish: their slots stay taken
		}
	}
	base, mgid, jobID, err := s.allocate(size)
	if err != nil {
		s.fail(j, err)
		s.mu.Unlock()
		return
	}
	entries := JobEntries{MulticastGroup: mgid}
	for rank, r := range j.ranks {
		addrs, _ := checkRequest(r)
		var mac [6]byte
		copy(mac[:], r.GetMac())
		// Every lane of a rank binds the same address (Config.Bind).
		entries.Replicas = append(entries.Replicas, Replica{Port: s.cfg.Target.portOf(addrs[0].Addr(), rank), Instance: uint16(rank)})
		for lane, a := range addrs {
			entries.Workers = append(entries.Workers, WorkerEntry{
				Addr: a, JobID: jobID, Rank: uint16(rank), NumWorkers: uint16(len(j.ranks)), MulticastGroup: mgid,
				Lane: uint8(lane), PoolBase: base, PoolSize: size,
			})
			entries.Replies = append(entries.Replies, ReplyEntry{JobID: jobID, Rank: uint16(rank), Lane: uint8(lane), MAC: mac, Addr: a})
		}
	}
	resp := &controllerpb.RegisterResponse{
		SessionId: randUint64() | 1, SwitchDataplane: s.cfg.Dataplane.String(), JobId: jobID,
		PoolBase: base, PoolSize: size, FirstSeq: uint32(randUint64()),
	}
	// Reserve the partition before programming, so a concurrent job cannot
	// be given the same slots.
	j.active, j.entries, j.resp = true, entries, resp
	s.mu.Unlock()

	s.swMu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), switchRPCTimeout)
	defer cancel()
	err = s.sw.ResetPool(ctx, int(base), int(size), s.cfg.Slots)
	if err == nil {
		err = s.sw.InstallJob(ctx, entries)
	}
	s.swMu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		j.active = false
		code := status.Code(err)
		if code == codes.InvalidArgument || code == codes.OutOfRange || code == codes.AlreadyExists {
			code = codes.FailedPrecondition // the switch refused this job's shape
		} else if code == codes.Unknown || code == codes.Canceled || code == codes.DeadlineExceeded {
			// The switch went away or did not answer in time: nothing the
			// registrants' own contexts did.
			code = codes.Unavailable
		}
		s.fail(j, status.Errorf(code, "job %q: programming the switch failed: %v", j.name, err))
		return
	}
	if j.gone {
		// Replaced while programming: undo.
		j.active = true
		s.retire(j, "restarted while being programmed")
		return
	}
	s.log.Info("controller: job ready", "job", j.name, "session", resp.GetSessionId(), "job_id", jobID,
		"workers", len(j.ranks), "lanes", p.GetLanes(), "pool_base", base, "pool_size", size, "mgid", mgid)
	close(j.ready)
}

// fail ends a generation that could not be programmed. Callers hold s.mu.
func (s *JobService) fail(j *job, err error) {
	j.err = err
	if s.jobs[j.name] == j {
		delete(s.jobs, j.name)
	}
	s.log.Warn("controller: job failed", "job", j.name, "err", err)
	select {
	case <-j.ready:
	default:
		close(j.ready)
	}
}

// session finds the active generation a call refers to. Callers hold s.mu.
func (s *JobService) session(name string, rank uint32, session uint64) (*job, error) {
	if why, ok := s.ended[session]; ok {
		return nil, status.Errorf(codes.Aborted, "session %d is over: %s", session, why)
	}
	j := s.jobs[name]
	if (j == nil || j.resp.GetSessionId() != session) && len(s.detached) > 0 {
		// The session may be one of those found on the switch, whose
		// ranks have not all taken their leases up again yet.
		return nil, status.Errorf(codes.Unavailable, "the controller restarted and is taking its running jobs over; retry in a moment")
	}
	if j == nil || !j.active {
		return nil, status.Errorf(codes.NotFound, "job %q has no active session (register first)", name)
	}
	if j.resp.GetSessionId() != session {
		return nil, status.Errorf(codes.FailedPrecondition, "session %d of job %q is over; the current session is %d (the job was restarted)",
			session, name, j.resp.GetSessionId())
	}
	if rank >= uint32(len(j.ranks)) {
		return nil, invalid("rank %d outside 0..%d", rank, len(j.ranks)-1)
	}
	return j, nil
}

// noteBarrier records that rank made its seq-th barrier call. Callers hold
// s.mu.
func (j *job) noteBarrier(rank uint32, seq uint64) {
	if j.barrierSeq == nil {
		j.barrierSeq, j.progressed = map[uint32]uint64{}, make(chan struct{})
	}
	if seq > j.barrierSeq[rank] {
		j.barrierSeq[rank] = seq
		close(j.progressed)
		j.progressed = make(chan struct{})
	}
}

// othersPast reports whether every rank but rank has made a later barrier
// call than its seq-th, in a job taken over from the switch. Callers hold
// s.mu.
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

// join enters rank into its next round of the named barrier or broadcast.
// Callers hold s.mu.
func (j *job) join(name string, rank uint32) (*round, int, *roundSet) {
	rs := j.rounds[name]
	if rs == nil && len(j.rounds) >= maxRoundsPerJob {
		return nil, 0, nil
	}
	if rs == nil {
		rs = &roundSet{next: map[uint32]int{}, rounds: map[int]*round{}}
		j.rounds[name] = rs
	}
	k := rs.next[rank]
	rs.next[rank]++
	r := rs.rounds[k]
	if r == nil {
		r = &round{arrived: map[uint32]bool{}, done: make(chan struct{})}
		rs.rounds[k] = r
	}
	r.arrived[rank] = true
	return r, k, rs
}

// Barrier implements controllerpb.JobService.
func (s *JobService) Barrier(ctx context.Context, req *controllerpb.BarrierRequest) (*controllerpb.BarrierResponse, error) {
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	s.mu.Lock()
	j, err := s.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	key := "barrier/" + req.GetName()
	r, k, rs := j.join(key, req.GetRank())
	if r == nil {
		s.mu.Unlock()
		return nil, tooManyRounds()
	}
	if len(r.arrived) == len(j.ranks) {
		r.complete = true
		close(r.done)
		delete(rs.rounds, k)
	}
	j.noteBarrier(req.GetRank(), req.GetSeq())
	s.mu.Unlock()
	for {
		s.mu.Lock()
		passed := j.othersPast(req.GetRank(), req.GetSeq())
		progressed := j.progressed
		s.mu.Unlock()
		if passed {
			// Every other rank has passed this barrier, on a controller
			// that has since restarted and lost the round.
			return &controllerpb.BarrierResponse{}, nil
		}
		select {
		case <-progressed:
		case <-r.done:
			s.mu.Lock()
			defer s.mu.Unlock()
			if !r.complete {
				return nil, status.Errorf(codes.Aborted, "barrier %q: job %q %s", req.GetName(), req.GetJob(), j.why)
			}
			return &controllerpb.BarrierResponse{}, nil
		case <-ctx.Done():
			s.mu.Lock()
			defer s.mu.Unlock()
			if r.complete {
				return &controllerpb.BarrierResponse{}, nil
			}
			delete(r.arrived, req.GetRank())
			rs.next[req.GetRank()]--
			return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "job %q barrier %q: %d of %d ranks arrived before rank %d's deadline",
				req.GetJob(), req.GetName(), len(r.arrived), len(j.ranks), req.GetRank())
		}
	}
}

// Broadcast implements controllerpb.JobService.
func (s *JobService) Broadcast(ctx context.Context, req *controllerpb.BroadcastRequest) (*controllerpb.BroadcastResponse, error) {
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	s.mu.Lock()
	j, err := s.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err == nil && req.GetRoot() >= uint32(len(j.ranks)) {
		err = invalid("root %d outside 0..%d", req.GetRoot(), len(j.ranks)-1)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	r, k, rs := j.join("broadcast/"+req.GetName(), req.GetRank())
	if r == nil {
		s.mu.Unlock()
		return nil, tooManyRounds()
	}
	if r.hasRoot && r.root != req.GetRoot() {
		delete(r.arrived, req.GetRank())
		rs.next[req.GetRank()]--
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "job %q broadcast %q: rank %d names root %d, others named %d",
			req.GetJob(), req.GetName(), req.GetRank(), req.GetRoot(), r.root)
	}
	r.root, r.hasRoot = req.GetRoot(), true
	if req.GetRank() == req.GetRoot() {
		r.data = append([]byte(nil), req.GetData()...)
		r.complete = true
		close(r.done)
	}
	s.mu.Unlock()
	finish := func() (*controllerpb.BroadcastResponse, error) {
		if !r.complete {
			return nil, status.Errorf(codes.Aborted, "broadcast %q: job %q %s", req.GetName(), req.GetJob(), j.why)
		}
		r.fetched++
		if r.fetched == len(j.ranks) {
			delete(rs.rounds, k)
		}
		return &controllerpb.BroadcastResponse{Data: r.data}, nil
	}
	select {
	case <-r.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return finish()
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.complete {
			return finish()
		}
		delete(r.arrived, req.GetRank())
		rs.next[req.GetRank()]--
		return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "job %q broadcast %q: root %d did not send before rank %d's deadline",
			req.GetJob(), req.GetName(), req.GetRoot(), req.GetRank())
	}
}

// Leave implements controllerpb.JobService.
func (s *JobService) Leave(ctx context.Context, req *controllerpb.LeaveRequest) (*controllerpb.LeaveResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition || c == codes.Aborted {
			// The session is already gone: leaving it again is fine.
			return &controllerpb.LeaveResponse{}, nil
		}
		return nil, err
	}
	j.left[req.GetRank()] = true
	if len(j.left) == len(j.ranks) {
		s.retire(j, "finished: every rank left")
	}
	return &controllerpb.LeaveResponse{}, nil
}

// SwitchLost ends every job: the switch restarted or the controller lost
// it, so what the jobs had there is gone. Their entries are not removed
// (there is nothing to remove them from); registrations fail until
// SwitchBack.
func (s *JobService) SwitchLost(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offline == "" {
		s.back = make(chan struct{})
	}
	s.offline = why
	// Whatever the jobs held on the switch is gone with it.
	for j := range s.draining {
		s.undrain(j)
	}
	for id, j := range s.detached {
		delete(s.detached, id)
		j.active = false
		s.retire(j, why)
	}
	for _, j := range s.jobs {
		j.active = false
		s.retire(j, why)
	}
}

// SwitchBack hands the service the reprogrammed switch.
func (s *JobService) SwitchBack(sw Switch) {
	s.swMu.Lock()
	s.sw = sw
	s.swMu.Unlock()
	s.mu.Lock()
	if s.offline != "" {
		s.offline = ""
		close(s.back)
	}
	s.mu.Unlock()
}

// Watch implements controllerpb.JobService: the stream is the rank's lease.
func (s *JobService) Watch(req *controllerpb.WatchRequest, stream controllerpb.JobService_WatchServer) error {
	s.mu.Lock()
	if err := s.claim(req); err != nil {
		s.mu.Unlock()
		return err
	}
	j, err := s.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err == nil {
		j.leased[req.GetRank()] = true
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := stream.Send(&controllerpb.WatchEvent{}); err != nil {
		return err
	}
	select {
	case <-j.over:
		s.mu.Lock()
		why := j.why
		s.mu.Unlock()
		return stream.Send(&controllerpb.WatchEvent{Aborted: true, Reason: fmt.Sprintf("job %q %s", j.name, why)})
	case <-stream.Context().Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if !j.gone && !j.left[req.GetRank()] {
			s.log.Warn("controller: rank lost", "job", j.name, "rank", req.GetRank())
			s.retire(j, fmt.Sprintf("aborted: rank %d lost its connection to the controller (its process ended, or its host is unreachable)", req.GetRank()))
		}
		return nil
	}
}

// claim hands a job found on the switch to the first rank that names it
// (by switch job id) after a controller restart. Callers hold s.mu.
func (s *JobService) claim(req *controllerpb.WatchRequest) error {
	j := s.detached[req.GetJobId()]
	if j == nil || req.GetJobId() == 0 {
		return nil
	}
	switch {
	case req.GetRank() >= uint32(len(j.ranks)):
		return invalid("rank %d outside 0..%d of the job on the switch", req.GetRank(), len(j.ranks)-1)
	case req.GetJob() == "" || req.GetSessionId() == 0:
		return invalid("a claim names the job and its session")
	case s.jobs[req.GetJob()] != nil:
		return status.Errorf(codes.AlreadyExists, "job %q already runs under another session", req.GetJob())
	}
	delete(s.detached, req.GetJobId())
	j.name = req.GetJob()
	j.owner = sha256.Sum256([]byte(req.GetToken()))
	j.resp.SessionId = req.GetSessionId()
	j.params = &controllerpb.RegisterRequest{Job: j.name, WorldSize: uint32(len(j.ranks))}
	s.jobs[j.name] = j
	s.log.Info("controller: job taken over from the switch", "job", j.name, "session", req.GetSessionId(), "job_id", req.GetJobId(), "workers", len(j.ranks))
	return nil
}

// Adopt reads the jobs a switch holds (its tables, as an earlier controller
// left them) and keeps them: their partitions stay taken, and their ranks
// take them back by watching their sessions again (Watch with the switch
// job id). Jobs nobody claims within grace are removed, and so are claimed
// jobs whose ranks did not all come back.
func (s *JobService) Adopt(ctx context.Context, sw interface {
	ReadWorkers(context.Context) ([]WorkerEntry, error)
	ReadReplies(context.Context) ([]ReplyEntry, error)
	ReadMulticastGroups(context.Context) (map[uint16][]Replica, error)
}, grace time.Duration) error {
	workers, err := sw.ReadWorkers(ctx)
	if err != nil {
		return fmt.Errorf("controller: read back the switch's workers: %w", err)
	}
	replies, err := sw.ReadReplies(ctx)
	if err != nil {
		return fmt.Errorf("controller: read back the switch's replies: %w", err)
	}
	groups, err := sw.ReadMulticastGroups(ctx)
	if err != nil {
		return fmt.Errorf("controller: read back the switch's multicast groups: %w", err)
	}
	found := map[uint32]*job{}
	for _, w := range workers {
		j := found[w.JobID]
		if j == nil {
			ready := make(chan struct{})
			close(ready)
			j = &job{
				active: true, adopted: true, ready: ready, over: make(chan struct{}),
				ranks: make([]*controllerpb.RegisterRequest, w.NumWorkers), left: map[uint32]bool{}, leased: map[uint32]bool{},
				rounds: map[string]*roundSet{}, expired: map[uint32]bool{},
				entries: JobEntries{MulticastGroup: w.MulticastGroup, Replicas: groups[w.MulticastGroup]},
				resp:    &controllerpb.RegisterResponse{JobId: w.JobID, PoolBase: w.PoolBase, PoolSize: w.PoolSize, SwitchDataplane: s.cfg.Dataplane.String()},
			}
			found[w.JobID] = j
		}
		j.entries.Workers = append(j.entries.Workers, w)
		if int(w.Rank) < len(j.ranks) {
			r := j.ranks[w.Rank]
			if r == nil {
				r = &controllerpb.RegisterRequest{Rank: uint32(w.Rank), WorldSize: uint32(w.NumWorkers)}
				j.ranks[w.Rank] = r
			}
			r.LaneAddresses = append(r.LaneAddresses, w.Addr.String())
		}
	}
	for _, r := range replies {
		if j := found[r.JobID]; j != nil {
			j.entries.Replies = append(j.entries.Replies, r)
		}
	}
	s.mu.Lock()
	for id, j := range found {
		s.detached[id] = j
		s.jobID = max(s.jobID, id)
	}
	s.mu.Unlock()
	if len(found) > 0 {
		s.log.Info("controller: jobs found on the switch, waiting for their ranks", "jobs", len(found), "grace", grace)
	}
	time.AfterFunc(grace, func() { s.endUnclaimed(found) })
	return nil
}

// endUnclaimed removes the adopted jobs that nobody took back, and those
// some of whose ranks did not take their leases up again.
func (s *JobService) endUnclaimed(found map[uint32]*job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, j := range found {
		if s.detached[id] == j {
			delete(s.detached, id)
			s.retire(j, "removed: found on the switch after a controller restart, and no rank took it back")
			continue
		}
		for r := range j.ranks {
			if !j.leased[uint32(r)] && !j.gone {
				s.retire(j, fmt.Sprintf("aborted: rank %d did not come back after the controller restarted", r))
				break
			}
		}
	}
}

// Abort implements controllerpb.JobService.
func (s *JobService) Abort(ctx context.Context, req *controllerpb.AbortRequest) (*controllerpb.AbortResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition || c == codes.Aborted {
		return &controllerpb.AbortResponse{}, nil // already over
	}
	if err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if len(reason) > 512 {
		reason = reason[:512] + "..."
	}
	s.log.Warn("controller: rank aborted its job", "job", j.name, "rank", req.GetRank(), "reason", reason)
	s.retire(j, fmt.Sprintf("aborted by rank %d: %s", req.GetRank(), reason))
	return &controllerpb.AbortResponse{}, nil
}

// Jobs lists the active jobs' names and partitions, for logs and tests.
func (s *JobService) Jobs() map[string]*controllerpb.RegisterResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*controllerpb.RegisterResponse{}
	for n, j := range s.jobs {
		if j.active {
			out[n] = j.resp
		}
	}
	return out
}

// DataplaneFor returns the switch data plane address to hand to workers: the
// explicit address if given, else the P4Runtime target's host with the
// SwitchML UDP port. Host names are resolved, since workers need an IP.
func DataplaneFor(explicit, target string) (netip.AddrPort, error) {
	addr := explicit
	if addr == "" {
		host, _, err := net.SplitHostPort(target)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("controller: target %q: %v", target, err)
		}
		addr = net.JoinHostPort(host, strconv.Itoa(wire.UDPPort))
	}
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("controller: data plane address %q: %v", addr, err)
	}
	ap := ua.AddrPort()
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if ap.Addr().IsUnspecified() {
		return netip.AddrPort{}, fmt.Errorf("controller: data plane address %q is unspecified; give the address workers send to", addr)
	}
	return ap, nil
}
