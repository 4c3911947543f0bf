package switchml

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/switchml/engine"
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
	// ErrRankFailed: the controller ended the session because a rank
	// reported a failure of its own (with ErrAborted; the error names the
	// rank and its failure).
	ErrRankFailed = errors.New("switchml: a rank failed")
	// ErrRankLost: the controller ended the session because a rank's
	// lease lapsed: its process ended, or its host became unreachable
	// (with ErrAborted).
	ErrRankLost = errors.New("switchml: a rank was lost")
	// ErrControllerRestarted: the controller no longer holds the session,
	// having restarted (with ErrAborted; and ErrSwitchLost where the
	// restart reprogrammed the switch under a running session).
	ErrControllerRestarted = errors.New("switchml: the controller restarted")
	// ErrRanksMissing: ranks of the job did not all come, to the join or
	// to a barrier, before the deadline; the error names those missing.
	ErrRanksMissing = errors.New("switchml: ranks missing")
)

// endCauses are the sentinels of the words the controller gives for a
// session's end (jobpb's WatchEvent.cause and AbortResponse.cause).
var endCauses = map[string]error{
	"switch_lost": ErrSwitchLost,
	"rank_failed": ErrRankFailed,
	"rank_lost":   ErrRankLost,
	"abandoned":   ErrRanksMissing,
}

// ended is the error of a session the controller ended with cause (a
// word of endCauses) and reason.
func ended(cause, reason string) error {
	if c, ok := endCauses[cause]; ok {
		return fmt.Errorf("%w: %w: %s", ErrAborted, c, reason)
	}
	return fmt.Errorf("%w: %s", ErrAborted, reason)
}

// Session is a worker's membership in a job: its lane sockets, its slot
// partition on the switch and the order of its allreduce calls. All ranks
// must issue the same calls in the same order. A Session is safe for
// concurrent use; calls run one after another in the order they were made.
//
// A Session is a front: the job client (job.go) speaks with the
// controller, and an executor runs the calls, on the switch's lanes
// (lanes.go, each lane lane.go) or over the ring (fallback.go).
type Session struct {
	cfg Config
	st  *state
	job *jobClient
	// sw are the switch's lanes, nil for a job over the ring since Join;
	// ring is this rank's side of the ring, nil without Config.Fallback.
	sw   *switchLanes
	ring *ringLink
	// exec runs the calls; only run's goroutine touches it (and Join
	// before it, Close after it).
	exec executor
	// dataCollectives: Barrier and Broadcast run on the data path.
	dataCollectives bool

	ops  chan *Handle
	done chan struct{}

	// trace, if set, keeps the timeline (Config.Trace); durations is the
	// histogram of completed calls that Collector exposes.
	trace     *tracer
	durations prometheus.Histogram
}

// state is what the parts of a session share: whether it was closed or
// aborted, why it broke, why it runs over the ring, and its counters.
type state struct {
	quit      chan struct{} // closed by Close
	aborted   chan struct{} // closed when the controller ends the session
	abortOnce sync.Once

	mu     sync.Mutex
	closed bool
	// broken, once set, fails every call: the session is out of step with
	// its peers, or was ended.
	broken error
	why    string // why the session runs over the ring ("" on the switch)
	stats  Stats
}

func newState() *state {
	return &state{quit: make(chan struct{}), aborted: make(chan struct{})}
}

// err is why the session broke (nil: it did not).
func (st *state) err() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.broken
}

// fail breaks the session with err unless it broke already, and says
// whether this was the first failure.
func (st *state) fail(err error) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken != nil {
		return false
	}
	st.broken = err
	return true
}

// abort breaks the session with err and stops calls in flight.
func (st *state) abort(err error) {
	st.fail(err)
	st.abortOnce.Do(func() { close(st.aborted) })
}

// departure says why this rank stops taking part in the job when a call of
// its own ended early: the caller cancelled it (an interrupt) or closed the
// session meanwhile. Nil for any other failure.
func (st *state) departure(caller context.Context, what string) error {
	select {
	case <-st.quit:
		return fmt.Errorf("closed its session during %s", what)
	default:
	}
	if errors.Is(caller.Err(), context.Canceled) {
		return fmt.Errorf("interrupted: its %s was cancelled", what)
	}
	return nil
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
	st := newState()
	s := &Session{cfg: cfg, st: st, job: newJobClient(cfg, st), ops: make(chan *Handle, 64), done: make(chan struct{}), durations: newDurations(cfg)}
	fail := func(err error) (*Session, error) {
		s.abandon()
		return nil, err
	}
	var err error
	if cfg.Fallback == FallbackRing {
		if s.ring, err = listenRing(cfg, bind); err != nil {
			return fail(err)
		}
	}
	var addrs []string
	if s.sw, addrs, err = openLanes(cfg, bind); err != nil {
		return fail(err)
	}
	if err := s.job.dial(); err != nil {
		return fail(err)
	}
	var probed *jobpb.DescribeResponse
	if cfg.Fallback == FallbackRing {
		var unreachable error
		if probed, unreachable = s.job.probe(ctx); unreachable != nil {
			if len(cfg.FallbackPeers) == 0 {
				return fail(configField.Errorf("%w: %v: to run over the ring without it, give every rank's ring address in rank order in {FallbackPeers}",
					ErrControllerUnreachable, unreachable))
			}
			return s.joinRing(ctx, cfg.FallbackPeers, "the controller is unreachable: "+unreachable.Error())
		}
	} else if probed, err = s.job.reach(ctx); err != nil {
		return fail(err)
	}
	if s.cfg.PacketElements, err = s.job.packetElements(ctx, s.cfg, probed); err != nil {
		return fail(err)
	}
	ringAddr := ""
	if s.ring != nil {
		ringAddr = s.ring.address()
	}
	resp, err := s.job.register(ctx, s.cfg, addrs, bind, ringAddr)
	if err != nil {
		return fail(err)
	}
	if resp.GetFallback() != "" {
		return s.joinRing(ctx, resp.GetFallbackAddresses(), "the controller could not place the job on the switch: "+resp.GetFallback())
	}
	if s.ring != nil {
		if err := s.ring.keep(s.cfg, resp.GetFallbackAddresses()); err != nil {
			return fail(err)
		}
	}
	if err := checkAuthKey(cfg.Auth, resp.GetAuthKey()); err != nil {
		return fail(err)
	}
	peers, err := grant(s.cfg, resp)
	if err != nil {
		return fail(err)
	}
	s.job.accept(resp)
	if err := s.job.watch(); err != nil {
		return fail(err)
	}
	if cfg.Trace != nil {
		s.trace = newTracer(cfg.Trace, cfg.TraceEvents, cfg.Rank, cfg.Lanes, fmt.Sprintf("job %s rank %d of %d", cfg.Job, cfg.Rank, cfg.Workers))
	}
	if err := s.sw.start(s.cfg, resp, peers, st, s.job, s.trace, s.durations); err != nil {
		return fail(err)
	}
	s.exec = s.sw
	if cfg.FallbackOnLoss {
		s.dataCollectives = true
		s.exec = &lossGuard{sw: s.sw, link: s.ring, swap: func(e executor) { s.exec = e }}
	}
	go s.run()
	return s, nil
}

// abandon releases what a Join that failed had opened.
func (s *Session) abandon() {
	s.job.abandon()
	if s.sw != nil {
		s.sw.close()
	}
	if s.ring != nil {
		s.ring.close()
	}
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
	if s.sw == nil {
		return TransportUDP
	}
	return s.sw.transport()
}

// Rank and Workers of this session.
func (s *Session) Rank() int    { return s.cfg.Rank }
func (s *Session) Workers() int { return s.cfg.Workers }

// Stats returns counters so far.
func (s *Session) Stats() Stats {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.stats
}

// Fallback reports whether the session runs over the ring instead of the
// switch (Config.Fallback), and why.
func (s *Session) Fallback() (active bool, reason string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.why != "", s.st.why
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
		return dataBarrier(ctx, s.AllReduceInt32)
	}
	defer s.trace.wait("barrier", name, time.Now())
	return s.job.barrier(ctx, name)
}

// Broadcast returns root's data on every rank.
// On the ring it is a collective on the data path, as Barrier is.
func (s *Session) Broadcast(ctx context.Context, name string, root int, data []byte) ([]byte, error) {
	if !s.dataCollectives {
		defer s.trace.wait("broadcast", name, time.Now())
		return s.job.broadcast(ctx, name, root, data)
	}
	if root < 0 || root >= s.cfg.Workers {
		return nil, fmt.Errorf("switchml: broadcast: root %d outside 0..%d", root, s.cfg.Workers-1)
	}
	if s.cfg.Rank == root && len(data) > math.MaxInt32 {
		return nil, s.refuse(fmt.Errorf("switchml: broadcast of %d bytes: at most %d", len(data), math.MaxInt32)).Err()
	}
	return dataBroadcast(ctx, s.AllReduceInt32, s.cfg.Rank, root, data)
}

// Abort ends the job for every rank, then closes the session as Close
// does. The controller ends the session with cause, naming this rank
// ("aborted by rank 1: interrupted"), and the peers' calls fail at once
// with it. A program that stops between its calls (interrupted while it
// prepares the next tensor) aborts: after a Close, its peers learn only
// that it left, and only once they wait for it.
func (s *Session) Abort(cause error) error {
	s.st.mu.Lock()
	closed := s.st.closed
	s.st.mu.Unlock()
	if !closed {
		s.job.leaveEarly(cause, nil)
	}
	return s.Close()
}

// Done is closed when the controller ended the session (Err says why): a
// rank failed, left in the middle of a call or aborted, or the switch was
// lost. Work between calls can stop on it rather than at its next call.
// With Config.FallbackOnLoss, a switch loss closes it too, and the session
// goes on over the ring.
func (s *Session) Done() <-chan struct{} { return s.st.aborted }

// Err is why the session can no longer be used, nil while it can.
func (s *Session) Err() error { return s.st.err() }

// Close stops the session after pending calls finish or fail, tells the
// controller this rank left and releases the sockets.
func (s *Session) Close() error {
	s.st.mu.Lock()
	if s.st.closed {
		s.st.mu.Unlock()
		return nil
	}
	s.st.closed = true
	s.st.mu.Unlock()
	close(s.st.quit)
	<-s.done
	if s.sw != nil {
		s.sw.close()
	}
	if s.ring != nil {
		s.ring.close()
	}
	// Barriers and broadcasts in flight end with the quit; those that
	// ended the job for it report before the job client leaves.
	err := s.job.close()
	if s.trace != nil {
		if terr := s.trace.flush(); terr != nil {
			err = errors.Join(err, fmt.Errorf("switchml: writing the trace: %w", terr))
		}
	}
	return err
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

// localAddressToward returns the local IP the routing table picks to reach
// target (host:port); no packet is sent.
func localAddressToward(target string) (string, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return "", fmt.Errorf("switchml: bad Config.Controller %q: want host:port: %v", target, err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("switchml: bad Config.Controller %q: the port is not a number", target)
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, port))
	if err != nil {
		return "", fmt.Errorf("switchml: no route to Config.Controller %s: %v (set Config.Bind)", target, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// authMismatch refuses a session whose tags the worker and the switch
// disagree on: the switch would drop every packet, or the worker would
// drop every result.
func authMismatch(auth, switchAuth bool) error {
	switch {
	case auth && !switchAuth:
		return configField.Errorf("%w: {Auth} is set, but the switch does not check tags: start the switch and its controller with tags checked (their Auth settings), or join without {Auth}", ErrJobMismatch)
	case !auth && switchAuth:
		return configField.Errorf("%w: {Auth} is not set, but the switch checks a tag on every packet (its controller's Auth is set): join with {Auth}", ErrJobMismatch)
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
		return fmt.Errorf("%w: a %d-byte key from the controller, want %d: controller and worker versions differ", ErrJobMismatch, len(key), wire.KeyLen)
	}
	return nil
}
