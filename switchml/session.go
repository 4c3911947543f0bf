package switchml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/wire"
)

// Errors a caller may test for with errors.Is.
var (
	// ErrClosed: the session was closed.
	ErrClosed = errors.New("switchml: session closed")
	// ErrControllerUnreachable: no controller answered at Config.Controller.
	ErrControllerUnreachable = errors.New("switchml: controller unreachable")
	// ErrJobMismatch: ranks disagree about the job (world size, lanes, window, packet size, format).
	ErrJobMismatch = errors.New("switchml: job mismatch")
	// ErrTimeoutBudget: the switch stopped answering; the retransmission budget ran out.
	ErrTimeoutBudget = engine.ErrTimeoutBudget
	// ErrAborted: the controller ended the session, because a rank died,
	// lost its connection or failed; the error names the rank and cause.
	ErrAborted = errors.New("switchml: job aborted")
	// ErrSwitchLost: the switch that served the session is gone: the
	// controller lost it (or restarted and reprogrammed it), or a rank
	// found it no longer answering. With Config.FallbackOnLoss the session
	// moves to the ring instead of failing.
	ErrSwitchLost = errors.New("switchml: switch lost")
)

// Session is a worker's membership in a job: its lane sockets, its slot
// partition on the switch and the order of its allreduce calls. All ranks
// must issue the same calls in the same order. A Session is safe for
// concurrent use; calls run one after another in the order they were made.
type Session struct {
	cfg       Config
	conn      *grpc.ClientConn
	client    jobpb.JobServiceClient
	sessionID uint64
	// rankSecret proves this rank's calls within the session to the
	// controller; it never goes into an error or a log.
	rankSecret []byte
	jobID      uint32        // the switch's id of the job (claims it back from a restarted controller)
	barriers   atomic.Uint64 // barrier calls made, for BarrierRequest.Seq
	switchDP   netip.AddrPort
	lanes      []*laneDriver

	ops  chan *Handle
	quit chan struct{}
	done chan struct{}
	// aborted is closed when the controller ends the session; in-flight
	// calls stop and fail with broken.
	aborted   chan struct{}
	abortOnce sync.Once
	reports   sync.WaitGroup // failure reports in flight
	inFlight  sync.WaitGroup // barriers and broadcasts in flight (sessionCall)
	stopWatch context.CancelFunc
	watchDone chan struct{}

	mu     sync.Mutex
	closed bool
	broken error
	seq    uint32
	stats  Stats
	// sparse is the sparse mode's record of the tensor sizes it met
	// (Config.Sparse), by element count.
	sparse map[int]*sparseRecord

	// trace, if set, keeps the timeline (Config.Trace); durations is the
	// histogram of completed calls that Collector exposes.
	trace     *tracer
	durations prometheus.Histogram

	fallbackState
}

// Stats counts a session's protocol activity.
type Stats struct {
	AllReduces uint64 // completed calls
	// DenseCalls counts the calls of a Sparse session that ran dense
	// (see Config.SparseCrossover).
	DenseCalls  uint64
	Failed      uint64 // calls that failed once started
	Packets     uint64 // packets sent, first transmissions and retransmissions
	Retransmits uint64 // packets sent again after a timeout
	Timeouts    uint64 // retransmission timers that expired
	SentBytes   uint64 // bytes of the packets sent, SwitchML headers included
	Elements    uint64 // elements reduced
	// Ring counts the completed calls that ran over the ring
	// (Config.Fallback); Session.Fallback says why.
	Ring uint64
	// RTT is the largest lane estimate of the lower quartile of result
	// round trips, Timeout the largest lane retransmission timeout.
	RTT, Timeout time.Duration
}

// Join registers this worker with the controller and waits until every rank
// of the job has joined. The context bounds the wait (Config.JoinTimeout
// when it has no deadline).
func Join(ctx context.Context, cfg Config) (*Session, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.JoinTimeout)
		defer cancel()
	}
	bind := cfg.Bind
	if bind == "" {
		ip, err := localAddressToward(cfg.Controller)
		if err != nil {
			return nil, err
		}
		bind = ip
	}
	s := &Session{cfg: cfg, ops: make(chan *Handle, 64), quit: make(chan struct{}), done: make(chan struct{}),
		aborted: make(chan struct{}), watchDone: make(chan struct{})}
	fail := func(err error) (*Session, error) {
		s.abandon()
		return nil, err
	}
	if cfg.Fallback == FallbackRing {
		if err := s.listenRing(bind); err != nil {
			return fail(err)
		}
	}
	addrs, err := s.openLanes(bind)
	if err != nil {
		return fail(err)
	}
	if err := s.dialController(); err != nil {
		return fail(err)
	}
	var probed *jobpb.DescribeResponse
	if cfg.Fallback == FallbackRing {
		var unreachable error
		if probed, unreachable = s.probe(ctx); unreachable != nil {
			return s.joinRingWithoutController(ctx, unreachable, fail)
		}
	} else if probed, err = s.reach(ctx); err != nil {
		return fail(err)
	}
	if err := s.settlePacketElements(ctx, probed); err != nil {
		return fail(err)
	}
	resp, err := s.register(ctx, addrs, bind)
	if err != nil {
		return fail(err)
	}
	if resp.GetFallback() != "" {
		return s.joinRing(ctx, resp.GetFallbackAddresses(), "the controller could not place the job on the switch: "+resp.GetFallback(), fail)
	}
	peers, err := s.accept(resp)
	if err != nil {
		return fail(err)
	}
	if err := s.watch(); err != nil {
		return fail(err)
	}
	if err := s.startLanes(resp, peers); err != nil {
		return fail(err)
	}
	go s.run()
	return s, nil
}

// abandon releases what a Join that failed had opened.
func (s *Session) abandon() {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	for _, l := range s.lanes {
		l.conn.Close()
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.ringLn != nil {
		s.ringLn.Close()
	}
}

// openLanes opens a socket per lane on bind, each with its own fault
// injector, and returns their addresses.
func (s *Session) openLanes(bind string) ([]string, error) {
	cfg := s.cfg
	addrs := make([]string, cfg.Lanes)
	var xdpWarned bool
	xdpWarn := func(format string, args ...any) { // once, not once per lane
		if !xdpWarned {
			xdpWarned = true
			slog.Warn("switchml: "+fmt.Sprintf(format, args...), "job", cfg.Job, "rank", cfg.Rank, "bind", bind)
		}
	}
	for i := 0; i < cfg.Lanes; i++ {
		c, err := listenLane(cfg.Transport, bind, cfg.Window, xdpWarn)
		if err != nil {
			return nil, fmt.Errorf("switchml: lane %d socket on %s: %w (check --bind)", i, bind, err)
		}
		faults := cfg.Faults
		faults.Seed += uint64(i) * 7919 // lanes draw different faults
		inj, err := transport.NewInjector(faults)
		if err != nil {
			c.Close()
			return nil, err
		}
		s.lanes = append(s.lanes, &laneDriver{conn: c, faults: inj})
		addrs[i] = c.LocalAddr().String()
	}
	return addrs, nil
}

// dialController sets up the client of the controller's job service (it
// connects on first use).
func (s *Session) dialController() error {
	creds := insecure.NewCredentials()
	if s.cfg.TLS != nil {
		creds = credentials.NewTLS(s.cfg.TLS)
	}
	conn, err := grpc.NewClient(s.cfg.Controller, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("%w: bad controller address %q: %v", ErrControllerUnreachable, s.cfg.Controller, err)
	}
	s.conn = conn
	s.client = jobpb.NewJobServiceClient(conn)
	return nil
}

// settlePacketElements picks the packet size the switch takes when the
// configuration leaves it to the switch (PacketElements 0), from probed
// or a Describe call, and refuses a switch the configuration cannot use.
func (s *Session) settlePacketElements(ctx context.Context, probed *jobpb.DescribeResponse) error {
	if s.cfg.PacketElements != 0 {
		return nil
	}
	d := probed
	var err error
	if d == nil {
		d, err = s.client.Describe(ctx, &jobpb.DescribeRequest{}, grpc.WaitForReady(true))
	}
	switch {
	case status.Code(err) == codes.Unimplemented: // a controller that predates Describe serves the software switch
		s.cfg.PacketElements = DefaultPacketElements
		return nil
	case err != nil:
		return s.rpcError("describe the switch", err)
	}
	s.cfg.PacketElements = choosePacketElements(d.GetPacketElements(), d.GetMaxExtendedElements(), s.cfg.Extended)
	if s.cfg.PacketElements == 0 && s.cfg.Extended {
		return fmt.Errorf("%w: the %s switch takes only the compatible header: join without Extended (--extended)", ErrJobMismatch, d.GetTargetKind())
	}
	if s.cfg.PacketElements == 0 {
		return fmt.Errorf("%w: the %s switch describes no packet size for the compatible header", ErrJobMismatch, d.GetTargetKind())
	}
	// Before registering, where the switch says whether it checks tags:
	// the other ranks need not wait for this one.
	return authMismatch(s.cfg.Auth, d.GetAuth())
}

// register registers this rank and its lanes, retrying while the
// controller is unavailable, and returns the controller's answer once
// every rank has registered.
func (s *Session) register(ctx context.Context, addrs []string, bind string) (*jobpb.RegisterResponse, error) {
	cfg := s.cfg
	format := jobpb.Format_FORMAT_COMPAT
	if cfg.Extended {
		format = jobpb.Format_FORMAT_EXTENDED
	}
	var resp *jobpb.RegisterResponse
	err := retryUnavailable(ctx, nil, func() error {
		var err error
		resp, err = s.client.Register(ctx, &jobpb.RegisterRequest{
			Job: cfg.Job, Rank: uint32(cfg.Rank), WorldSize: uint32(cfg.Workers),
			Lanes: uint32(cfg.Lanes), Window: uint32(cfg.Window), Elements: uint32(cfg.PacketElements),
			Format: format, LaneAddresses: addrs, Mac: macOf(bind), Token: cfg.Token,
			FallbackAddress: s.ringAddress(), Sparse: cfg.Sparse, SparseCrossover: sparseCrossover(cfg),
		}, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return nil, s.rpcError("join", err)
	}
	return resp, nil
}

// accept takes the session the controller granted: its ids, the switch's
// address and the key, after checking them against this worker's
// configuration. It returns the switch's address for each lane.
func (s *Session) accept(resp *jobpb.RegisterResponse) ([]netip.AddrPort, error) {
	if err := s.keepRing(resp.GetFallbackAddresses()); err != nil {
		return nil, err
	}
	if err := checkAuthKey(s.cfg.Auth, resp.GetAuthKey()); err != nil {
		return nil, err
	}
	s.sessionID, s.jobID, s.rankSecret = resp.SessionId, resp.JobId, resp.GetRankSecret()
	s.seq = resp.FirstSeq
	var err error
	s.switchDP, err = netip.ParseAddrPort(resp.SwitchDataplane)
	if err != nil {
		return nil, fmt.Errorf("switchml: controller gave a bad switch address %q: %v", resp.SwitchDataplane, err)
	}
	// A software switch with several data-plane shards serves each lane
	// at its shard's address.
	peers := make([]netip.AddrPort, len(s.lanes))
	for i := range peers {
		peers[i] = s.switchDP
	}
	if lds := resp.GetLaneDataplanes(); len(lds) > 0 {
		if len(lds) != len(s.lanes) {
			return nil, fmt.Errorf("switchml: controller gave %d lane data-plane addresses for %d lanes; it and this worker disagree on the job", len(lds), len(s.lanes))
		}
		for i, a := range lds {
			if peers[i], err = netip.ParseAddrPort(a); err != nil {
				return nil, fmt.Errorf("switchml: controller gave a bad data-plane address %q for lane %d: %v", a, i, err)
			}
		}
	}
	if resp.PoolSize < uint32(s.cfg.Lanes*s.cfg.Window) {
		return nil, fmt.Errorf("switchml: controller granted %d slots, the job needs lanes*window = %d", resp.PoolSize, s.cfg.Lanes*s.cfg.Window)
	}
	return peers, nil
}

// startLanes gives each lane its protocol engine on its slots and the
// switch's address for it (peers), and the tracer if one was asked for.
func (s *Session) startLanes(resp *jobpb.RegisterResponse, peers []netip.AddrPort) error {
	cfg := s.cfg
	wf := wire.FormatCompat
	if cfg.Extended {
		wf = wire.FormatExtended
	}
	for i, l := range s.lanes {
		eng, err := engine.NewLane(engine.Config{
			Rank: cfg.Rank, NumWorkers: cfg.Workers, Format: wf, Elements: cfg.PacketElements,
			Window: cfg.Window, SlotBase: resp.PoolBase + uint32(i*cfg.Window),
			// The engine gives up after GiveUp without a result, a bound
			// in time that a loaded machine's stalls do not trip; the
			// simulator runs the same policy.
			Timeout: cfg.Timeout, GiveUp: cfg.GiveUp,
			Key: resp.GetAuthKey(), Lane: uint8(i), Sparse: cfg.Sparse,
		})
		if err != nil {
			return fmt.Errorf("switchml: lane %d: %w", i, err)
		}
		l.init(eng, peers[i])
	}
	if cfg.Trace != nil {
		s.trace = newTracer(cfg.Trace, cfg.TraceEvents, cfg.Rank, cfg.Lanes, fmt.Sprintf("job %s rank %d of %d", cfg.Job, cfg.Rank, cfg.Workers))
		for i, l := range s.lanes {
			l.trace, l.tid = s.trace, i+1
		}
	}
	s.durations = newDurations(cfg)
	return nil
}

// watch opens this rank's lease on the session (jobpb Watch) and
// follows it in the background: if the controller ends the session, the
// session becomes unusable with the controller's reason, and calls in flight
// stop at once instead of waiting for the switch to give up.
func (s *Session) watch() error {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopWatch = cancel
	req := &jobpb.WatchRequest{Job: s.cfg.Job, Rank: uint32(s.cfg.Rank), SessionId: s.sessionID, JobId: s.jobID, Token: s.cfg.Token, RankSecret: s.rankSecret}
	stream, err := s.client.Watch(ctx, req)
	var ev *jobpb.WatchEvent
	if err == nil {
		ev, err = stream.Recv()
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		close(s.watchDone) // a controller that holds no leases
		return nil
	case err != nil:
		cancel()
		return s.rpcError("watch the session", err)
	case ev.GetAborted():
		cancel()
		return abortedBy(ev)
	}
	go func() {
		defer close(s.watchDone)
		s.follow(ctx, stream, req)
	}()
	return nil
}

// follow reads the lease's events. When the stream breaks while the session
// lives, it watches again, as long as it takes: the data plane does not
// need the controller, and a controller that is back with the session still
// known (a broken link) takes the lease up again; one that no longer knows
// the session (it restarted, and reprogrammed the switch) ends it with that
// cause, so that the calls in flight fail at once.
func (s *Session) follow(ctx context.Context, stream jobpb.JobService_WatchClient, req *jobpb.WatchRequest) {
	backoff := 50 * time.Millisecond
	for {
		for {
			ev, err := stream.Recv()
			if err != nil {
				break
			}
			if ev.GetAborted() {
				s.abort(abortedBy(ev))
				return
			}
			backoff = 50 * time.Millisecond
		}
		for {
			select {
			case <-ctx.Done():
				return // this rank closed
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			var err error
			if stream, err = s.client.Watch(ctx, req, grpc.WaitForReady(true)); err == nil {
				var ev *jobpb.WatchEvent
				if ev, err = stream.Recv(); err == nil {
					if ev.GetAborted() {
						s.abort(abortedBy(ev))
						return
					}
					break // the lease is held again
				}
			}
			switch status.Code(err) {
			case codes.NotFound, codes.FailedPrecondition, codes.Aborted:
				s.abort(fmt.Errorf("%w: %w: the controller at %s no longer holds this session (it restarted, and a restarted controller reprograms the switch): join again (%s)",
					ErrAborted, ErrSwitchLost, s.cfg.Controller, status.Convert(err).Message()))
				return
			}
		}
	}
}

// abort makes the session unusable with err and stops calls in flight.
func (s *Session) abort(err error) {
	s.mu.Lock()
	if s.broken == nil {
		s.broken = err
	}
	s.mu.Unlock()
	s.abortOnce.Do(func() { close(s.aborted) })
}

// reportAsync reports a failure without blocking the caller; Close waits
// for the report before it leaves, so that the peers learn the cause and
// not a departure.
func (s *Session) reportAsync(reason error) {
	if s.client == nil || s.sessionID == 0 {
		return // no session on a controller (the ring since Join)
	}
	s.reports.Add(1)
	go func() {
		defer s.reports.Done()
		_, _ = s.reportFailure(reason)
	}()
}

// reportFailure tells the controller that this rank can no longer take part
// (its session broke), so that the other ranks learn why at once.
func (s *Session) reportFailure(reason error) (*jobpb.AbortResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.client.Abort(ctx, &jobpb.AbortRequest{Job: s.cfg.Job, Rank: uint32(s.cfg.Rank), SessionId: s.sessionID, Reason: reason.Error(),
		SwitchUnreachable: errors.Is(reason, ErrTimeoutBudget), RankSecret: s.rankSecret})
}

// leaseVerdictWait bounds how long a rank that gave up on the switch, and
// found its session already ended by a peer's report, waits for the
// controller's word on why (through its lease).
const leaseVerdictWait = 2 * time.Second

// verdictOnGiveUp reports at once that this rank gave up on the switch,
// and returns the controller's verdict when it is not a switch loss: the
// switch answers, and the job's slots wait for ranks that stopped sending
// (ErrAborted naming them). Nil: a switch loss, or no verdict to be had.
// reported says the controller heard this rank's report.
func (s *Session) verdictOnGiveUp(gaveUp error) (reported bool, verdict error) {
	if s.client == nil || s.sessionID == 0 {
		return false, nil
	}
	resp, err := s.reportFailure(gaveUp)
	if err != nil {
		return false, nil
	}
	switch resp.GetCause() {
	case "switch_lost":
		return true, nil
	case "":
		// A peer's report ended the session first: its cause comes
		// through the lease.
		select {
		case <-s.aborted:
		case <-time.After(leaseVerdictWait):
		}
		s.mu.Lock()
		broken := s.broken
		s.mu.Unlock()
		if broken != nil && errors.Is(broken, ErrAborted) && !errors.Is(broken, ErrSwitchLost) {
			return true, broken
		}
		return true, nil
	}
	return true, fmt.Errorf("%w: %s", ErrAborted, resp.GetReason())
}

// reach asks the controller what the switch takes, waiting no longer than
// ConnectTimeout for a connection: an address where nothing answers fails
// fast, naming it. A controller that is connected but slow to answer gets
// the caller's whole deadline. Nil, and no error, from a controller that
// predates Describe.
func (s *Session) reach(ctx context.Context) (*jobpb.DescribeResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	d, err := s.client.Describe(cctx, &jobpb.DescribeRequest{}, grpc.WaitForReady(true))
	cancel()
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		if st := s.conn.GetState(); st != connectivity.Ready && st != connectivity.Idle {
			return nil, fmt.Errorf("%w: no connection to %s within %v (%s): %s", ErrControllerUnreachable, s.cfg.Controller, s.cfg.ConnectTimeout,
				status.Convert(err).Message(), s.unreachableHint())
		}
		// Connected, but slow to answer: wait with the caller's deadline.
		d, err = s.client.Describe(ctx, &jobpb.DescribeRequest{}, grpc.WaitForReady(true))
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		return nil, nil
	case err != nil:
		return nil, s.rpcError("describe the switch", err)
	}
	return d, nil
}

// macOf returns the Ethernet address of the interface that holds ip, or nil
// (loopback, or an interface without one).
func macOf(ip string) []byte {
	want, err := netip.ParseAddr(ip)
	if err != nil {
		return nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == want.Unmap() {
				if len(ifc.HardwareAddr) == 6 {
					return ifc.HardwareAddr
				}
				return nil
			}
		}
	}
	return nil
}

// PacketElements is the number of values per packet the session uses (the
// switch's choice when Config.PacketElements was 0).
func (s *Session) PacketElements() int { return s.cfg.PacketElements }

// Lanes and Window are the session's lanes and packets in flight per lane,
// defaults filled in.
func (s *Session) Lanes() int  { return s.cfg.Lanes }
func (s *Session) Window() int { return s.cfg.Window }

// Transport is what the lanes move packets through: TransportAFXDP when
// every lane got an AF_XDP socket, TransportShm when every lane got a
// shared-memory inbox and has written into the switch's (a switch without
// one is reached over UDP), else TransportUDP.
func (s *Session) Transport() string {
	if len(s.lanes) == 0 {
		return TransportUDP
	}
	// Every lane opened the same transport; one that moves its packets
	// over UDP (fell back, or has not reached a peer's inbox) makes it UDP.
	carries := transport.CarrierOf(s.lanes[0].conn)
	for _, l := range s.lanes[1:] {
		if transport.CarrierOf(l.conn) != carries {
			return TransportUDP
		}
	}
	return carries
}

// listenLane opens a lane's socket on a free port of the bind address,
// over the transport of that name (one that cannot be used falls back to
// UDP, telling logf why).
func listenLane(kind, bind string, window int, logf func(format string, args ...any)) (transport.PacketConn, error) {
	t, err := transport.Lookup(kind)
	if err != nil {
		return nil, err
	}
	return t.Lane(transport.LaneSpec{Bind: bind, Window: window, Logf: logf})
}

// localAddressToward returns the local IP the routing table picks to reach
// target (host:port); no packet is sent.
func localAddressToward(target string) (string, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return "", fmt.Errorf("switchml: bad controller address %q: %v (want host:port)", target, err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("switchml: bad controller port in %q", target)
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, port))
	if err != nil {
		return "", fmt.Errorf("switchml: no route to the controller %s: %v (set Bind)", target, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func (s *Session) rpcError(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("switchml: %s: %w", what, err)
	}
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("%w: %s at %s: %s (%s)", ErrControllerUnreachable, what, s.cfg.Controller, st.Message(), s.unreachableHint())
	case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied, codes.AlreadyExists:
		return fmt.Errorf("%w: %s: %s", ErrJobMismatch, what, st.Message())
	case codes.DeadlineExceeded:
		if st := s.conn.GetState(); st == connectivity.TransientFailure || st == connectivity.Connecting {
			return fmt.Errorf("%w: %s: no connection to %s before the deadline: %s (%s)", ErrControllerUnreachable, what, s.cfg.Controller, st, s.unreachableHint())
		}
		return fmt.Errorf("switchml: %s: timed out: %s (did every rank of job %q start?)", what, st.Message(), s.cfg.Job)
	case codes.Canceled:
		return fmt.Errorf("switchml: %s: %w", what, context.Canceled)
	case codes.Aborted:
		return fmt.Errorf("%w: %s: %s", ErrAborted, what, st.Message())
	case codes.Unimplemented:
		if strings.Contains(st.Message(), "unknown service") {
			return fmt.Errorf("%w: %s: %s answers gRPC but serves no job service (%s): it is not a switchml controller; is it the switch's P4Runtime port (switch --p4rt)? Give the address of `switchml controller --listen`",
				ErrControllerUnreachable, what, s.cfg.Controller, st.Message())
		}
	}
	return fmt.Errorf("switchml: %s: %s: %s", what, st.Code(), st.Message())
}

// unreachableHint says what to check when no connection to the controller
// comes up.
func (s *Session) unreachableHint() string {
	if s.cfg.TLS == nil {
		return "is `switchml controller` running there? If it requires TLS, give its CA (and this worker's certificate)"
	}
	return "is `switchml controller` running there, and do its certificate and this worker's match the CAs each trusts?"
}

// Rank and Workers of this session.
func (s *Session) Rank() int    { return s.cfg.Rank }
func (s *Session) Workers() int { return s.cfg.Workers }

// Stats returns counters so far.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Barrier returns once every rank called Barrier with the same name.
//
// On the ring (Config.Fallback), and in a session that may move there
// (Config.FallbackOnLoss), it is a collective on the data path, in order
// with the allreduce calls: every rank then makes its Barrier and
// Broadcast calls in the same order as its allreduce calls, and the name
// is not matched.
func (s *Session) Barrier(ctx context.Context, name string) error {
	if s.dataCollectives {
		return s.dataBarrier(ctx)
	}
	caller := ctx
	ctx, done, err := s.sessionCall(ctx)
	if err != nil {
		return err
	}
	defer done()
	// The same count on every retry of this call: a controller restarted
	// after the other ranks passed it releases it by the count.
	seq := s.barriers.Add(1)
	start := time.Now()
	defer s.traceWait("barrier", name, start)
	err = retryUnavailable(ctx, s.aborted, func() error {
		_, err := s.client.Barrier(ctx, &jobpb.BarrierRequest{Job: s.cfg.Job, Rank: uint32(s.cfg.Rank), SessionId: s.sessionID, Name: name, Seq: seq, RankSecret: s.rankSecret}, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return s.sessionError(caller, "barrier "+name, err)
	}
	return nil
}

// Broadcast returns root's data on every rank.
// On the ring it is a collective on the data path, as Barrier is.
func (s *Session) Broadcast(ctx context.Context, name string, root int, data []byte) ([]byte, error) {
	if s.dataCollectives {
		return s.dataBroadcast(ctx, root, data)
	}
	caller := ctx
	ctx, done, err := s.sessionCall(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var resp *jobpb.BroadcastResponse
	start := time.Now()
	defer s.traceWait("broadcast", name, start)
	err = retryUnavailable(ctx, s.aborted, func() error {
		var err error
		resp, err = s.client.Broadcast(ctx, &jobpb.BroadcastRequest{Job: s.cfg.Job, Rank: uint32(s.cfg.Rank), SessionId: s.sessionID, Root: uint32(root), Data: data, Name: name, RankSecret: s.rankSecret}, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return nil, s.sessionError(caller, "broadcast "+name, err)
	}
	return resp.Data, nil
}

// retryUnavailable runs call again while it fails because the connection
// to the controller broke under it (the controller restarting): the call
// waits for the controller instead of failing, until ctx ends or stop
// closes. A controller that no longer knows the call's session answers
// with an error that is not retried.
func retryUnavailable(ctx context.Context, stop <-chan struct{}, call func() error) error {
	backoff := 20 * time.Millisecond
	for {
		err := call()
		if status.Code(err) != codes.Unavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-stop:
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// sessionCall bounds a call to the controller within the session: it ends
// when the session is aborted or closed, and waits for a controller that
// is briefly away (restarting) no longer than JoinTimeout when ctx has no
// deadline. Close waits for the calls it started to end.
func (s *Session) sessionCall(ctx context.Context) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	s.inFlight.Add(1)
	s.mu.Unlock()
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); ok {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, s.cfg.JoinTimeout)
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-s.aborted:
			cancel()
		case <-s.quit:
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() { close(stop); cancel(); s.inFlight.Done() }, nil
}

// departure says why this rank stops taking part in the job when a call of
// its own ended early: the caller cancelled it (an interrupt) or closed the
// session meanwhile. Nil for any other failure.
func (s *Session) departure(caller context.Context, what string) error {
	select {
	case <-s.quit:
		return fmt.Errorf("closed its session during %s", what)
	default:
	}
	if errors.Is(caller.Err(), context.Canceled) {
		return fmt.Errorf("interrupted: its %s was cancelled", what)
	}
	return nil
}

// leaveEarly ends the job for every rank when this one stops taking part
// in the middle of it (see departure): its peers would otherwise wait for
// its share until their own deadlines. The controller tells them why, naming
// this rank. It returns the error for the caller.
func (s *Session) leaveEarly(why error, err error) error {
	s.mu.Lock()
	first := s.broken == nil
	if first {
		s.broken = fmt.Errorf("switchml: session ended: this rank %v (close it and join again)", why)
	}
	s.mu.Unlock()
	if first {
		s.reportAsync(why)
	}
	return err
}

// sessionError explains a failed call within the session: the session's
// own end when it was aborted, else the controller's answer. A call that
// ended because its caller cancelled it, or closed the session, ends the
// job for every rank (leaveEarly).
func (s *Session) sessionError(caller context.Context, what string, err error) error {
	s.mu.Lock()
	broken := s.broken
	s.mu.Unlock()
	if broken != nil && errors.Is(broken, ErrAborted) {
		return fmt.Errorf("switchml: %s: %w", what, broken)
	}
	if why := s.departure(caller, what); why != nil {
		if errors.Is(caller.Err(), context.Canceled) {
			return s.leaveEarly(why, fmt.Errorf("switchml: %s: %w", what, context.Canceled))
		}
		return s.leaveEarly(why, fmt.Errorf("switchml: %s: %w", what, ErrClosed))
	}
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: %s: the controller at %s no longer holds this session (it restarted): join again (%s)", ErrAborted, what, s.cfg.Controller, status.Convert(err).Message())
	}
	if status.Code(err) == codes.DeadlineExceeded && s.conn.GetState() == connectivity.Ready {
		// The controller answered that the peers did not all come in
		// time, naming those missing: this rank gives up, out of step
		// with them, and the job ends for all with that cause.
		msg := status.Convert(err).Message()
		return s.leaveEarly(fmt.Errorf("gave up waiting in %s: %s", what, msg), fmt.Errorf("switchml: %s: timed out: %s", what, msg))
	}
	return s.rpcError(what, err)
}

// Close stops the session after pending calls finish or fail, tells the
// controller this rank left and releases the sockets.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.quit)
	<-s.done
	// Barriers and broadcasts in flight end with the quit; those that
	// ended the job for it report before the reports are waited for.
	s.inFlight.Wait()
	for _, l := range s.lanes {
		l.conn.Close()
	}
	s.closeRing()
	s.reports.Wait()
	var err error
	if s.sessionID != 0 && !s.movedOff() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = s.client.Leave(ctx, &jobpb.LeaveRequest{Job: s.cfg.Job, Rank: uint32(s.cfg.Rank), SessionId: s.sessionID, RankSecret: s.rankSecret})
		if err != nil {
			err = s.rpcError("leave", err)
		}
	}
	// The lease ends after Leave, so the controller takes it for a
	// departure, not a death.
	if s.stopWatch != nil {
		s.stopWatch()
		<-s.watchDone
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.trace != nil {
		if terr := s.trace.flush(); terr != nil {
			err = errors.Join(err, fmt.Errorf("switchml: writing the trace: %w", terr))
		}
	}
	return err
}

// traceWait records a call that waits for every rank (a barrier, a
// broadcast) on the timeline.
func (s *Session) traceWait(what, name string, start time.Time) {
	if s.trace != nil {
		s.trace.span(0, "wait", what, name, start, time.Now())
	}
}

// authMismatch refuses a session whose tags the worker and the switch
// disagree on: the switch would drop every packet, or the worker would
// drop every result.
func authMismatch(auth, switchAuth bool) error {
	switch {
	case auth && !switchAuth:
		return fmt.Errorf("%w: Auth (--auth) is set, but the switch does not check tags: start the switch and the controller with --auth, or join without it", ErrJobMismatch)
	case !auth && switchAuth:
		return fmt.Errorf("%w: the switch checks a tag on every packet (its controller runs with --auth): join with Auth (--auth)", ErrJobMismatch)
	}
	return nil
}

// checkAuthKey is authMismatch on the key the controller gave (none: the
// switch does not check tags). The key itself is never shown.
func checkAuthKey(auth bool, key []byte) error {
	if err := authMismatch(auth, len(key) > 0); err != nil {
		return err
	}
	if auth && len(key) != wire.KeyLen {
		return fmt.Errorf("%w: the controller gave a %d-byte key, want %d: controller and worker versions differ", ErrJobMismatch, len(key), wire.KeyLen)
	}
	return nil
}
