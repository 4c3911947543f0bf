package switchml

// Fallback to the ring allreduce (Config.Fallback): at Join, when the
// switch cannot serve the job, and mid-training, when the switch is lost
// (Config.FallbackOnLoss).
//
// A move mid-training must lose nothing and count nothing twice. Results
// are written in place, so a call that failed on the switch has a partly
// overwritten buffer: the session keeps a copy of each call's input, and
// of the last completed call's result. Ranks can disagree by one on how
// many calls completed (the switch multicast a result to some ranks and
// died before the others got it). Once the ring is up, the ranks exchange
// their counts; if they differ, the lowest rank that completed the extra
// call sends its kept result as bits through an int32 sum (the others add
// zeros), which is exact for every type, and the ranks behind finish that
// call with the switch's own values. The kept copies are the tensor's bytes,
// whatever its type, and travel as little-endian int32 words. Then every rank redoes its current
// call over the ring from its kept input.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/switchml/ring"
)

// fallbackProbe bounds how long Join tries to reach the controller before
// it takes it for unreachable and, with FallbackPeers, forms the ring
// without it.
const fallbackProbe = 2 * time.Second

// fallbackState is a session's part in the fallback.
type fallbackState struct {
	// bind is the address the lanes bind, and the ring's host when its
	// listener has none.
	bind string
	// ringAddrs are every rank's ring address, kept for a move
	// mid-training.
	ringAddrs []string
	// dataCollectives: Barrier and Broadcast run on the data path.
	dataCollectives bool

	// Guarded by Session.mu: ringLn is this rank's ring listener until the
	// ring is dialled; ring carries every call once set; why says why the
	// session runs over the ring; moved, that it left a switch session.
	ringLn net.Listener
	ring   *ring.Ring
	why    string
	moved  bool

	// Touched only by the goroutine that runs the calls: calls counts the
	// completed calls; saved is the current call's input and last the
	// last completed call's result (with FallbackOnLoss); scratch is the
	// dtype codecs' buffer for the ring (dtype.Codec.RingSum).
	calls       uint64
	saved, last held
	scratch     []float32
}

// held is a copy of a call's tensor, as bytes.
type held struct{ data []byte }

func (b *held) save(op engine.Op) { b.data = append(b.data[:0], op.Data...) }

// restore writes the copy back into op's tensor.
func (b *held) restore(op engine.Op) { copy(op.Data, b.data) }

// words is the number of int32 words the copy's bytes fill.
func (b *held) words() int { return words(len(b.data)) }

func words(bytes int) int { return (bytes + 3) / 4 }

// bits writes the copy's bytes into dst as little-endian words.
func (b *held) bits(dst []int32) {
	var w [4]byte
	for i := range dst {
		clear(w[copy(w[:], b.data[min(4*i, len(b.data)):]):])
		dst[i] = int32(binary.LittleEndian.Uint32(w[:]))
	}
}

// setBits writes bytes given as little-endian words into op's tensor.
func setBits(op engine.Op, src []int32) {
	var w [4]byte
	for i, v := range src {
		binary.LittleEndian.PutUint32(w[:], uint32(v))
		copy(op.Data[4*i:], w[:])
	}
}

// Fallback reports whether the session runs over the ring instead of the
// switch (Config.Fallback), and why.
func (s *Session) Fallback() (active bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring != nil, s.why
}

// listenRing opens this rank's ring listener (Config.FallbackListen).
func (s *Session) listenRing(bind string) error {
	s.bind = bind
	addr := s.cfg.FallbackListen
	if addr == "" && len(s.cfg.FallbackPeers) > 0 {
		addr = s.cfg.FallbackPeers[s.cfg.Rank]
	}
	if addr == "" {
		addr = net.JoinHostPort(bind, "0")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("switchml: the ring's listener on %s: %w (check FallbackListen or FallbackPeers[%d])", addr, err, s.cfg.Rank)
	}
	s.ringLn = ln
	return nil
}

// ringAddress is the address the other ranks reach this rank's ring at
// ("" without a listener).
func (s *Session) ringAddress() string {
	if s.ringLn == nil {
		return ""
	}
	a, ok := s.ringLn.Addr().(*net.TCPAddr)
	if !ok {
		return s.ringLn.Addr().String()
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = s.bind
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// probe asks the controller what the switch takes, failing fast while no
// connection comes up, for up to fallbackProbe. unreachable says why the
// controller counts as unreachable; d is nil when the answer was anything
// else than a description, which Join then asks for again.
func (s *Session) probe(ctx context.Context) (d *jobpb.DescribeResponse, unreachable error) {
	pctx, cancel := context.WithTimeout(ctx, fallbackProbe)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		d, err := s.client.Describe(pctx, &jobpb.DescribeRequest{})
		switch {
		case err == nil:
			return d, nil
		case status.Code(err) != codes.Unavailable && pctx.Err() == nil:
			return nil, nil
		}
		select {
		case <-pctx.Done():
			if ctx.Err() != nil {
				return nil, nil // the caller's own deadline: Join says so
			}
			return nil, fmt.Errorf("no connection to the controller at %s within %v: %s", s.cfg.Controller, fallbackProbe, status.Convert(err).Message())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// joinRingWithoutController forms the ring at FallbackPeers when the
// controller cannot be reached.
func (s *Session) joinRingWithoutController(ctx context.Context, unreachable error, fail func(error) (*Session, error)) (*Session, error) {
	if len(s.cfg.FallbackPeers) == 0 {
		return fail(fmt.Errorf("%w: %v (%s); to run over the ring without it, give every rank's ring address in rank order (FallbackPeers, --fallback-peers)",
			ErrControllerUnreachable, unreachable, s.unreachableHint()))
	}
	return s.joinRing(ctx, s.cfg.FallbackPeers, "the controller is unreachable: "+unreachable.Error(), fail)
}

// joinRing makes the session run over the ring at addrs from the start.
func (s *Session) joinRing(ctx context.Context, addrs []string, why string, fail func(error) (*Session, error)) (*Session, error) {
	if len(addrs) != s.cfg.Workers {
		return fail(fmt.Errorf("switchml: %s; the ring needs %d addresses, the controller gave %d", why, s.cfg.Workers, len(addrs)))
	}
	for _, l := range s.lanes {
		l.conn.Close()
	}
	s.lanes = nil
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.client = nil, nil
	}
	ln := s.ringLn
	s.ringLn = nil
	start := time.Now()
	r, err := ring.Dial(ctx, ring.Config{Rank: s.cfg.Rank, Workers: s.cfg.Workers, Addrs: addrs, Listener: ln, DialTimeout: s.cfg.JoinTimeout, StallTimeout: s.cfg.GiveUp})
	if err != nil {
		return fail(fmt.Errorf("switchml: %s; running over the ring instead failed: %w", why, err))
	}
	s.ring, s.why, s.dataCollectives = r, why, true
	if s.cfg.PacketElements == 0 {
		s.cfg.PacketElements = DefaultPacketElements
	}
	s.durations = newDurations(s.cfg)
	slog.Warn("switchml: the job runs over the ring instead of the switch", "job", s.cfg.Job, "rank", s.cfg.Rank, "why", why,
		"ring_setup", time.Since(start).Round(time.Microsecond))
	go s.run()
	return s, nil
}

// keepRing keeps the ring's listener and the ranks' addresses of a job the
// switch took, for a move mid-training (FallbackOnLoss); without it the
// listener is closed.
func (s *Session) keepRing(addrs []string) error {
	if s.ringLn == nil {
		return nil
	}
	if !s.cfg.FallbackOnLoss {
		s.ringLn.Close()
		s.ringLn = nil
		return nil
	}
	if len(addrs) != s.cfg.Workers {
		if len(s.cfg.FallbackPeers) != s.cfg.Workers {
			return fmt.Errorf("switchml: the controller at %s did not hand back the ranks' ring addresses (it predates fallback): give them in FallbackPeers (--fallback-peers) for FallbackOnLoss",
				s.cfg.Controller)
		}
		addrs = s.cfg.FallbackPeers
	}
	s.ringAddrs, s.dataCollectives = addrs, true
	return nil
}

// closeRing closes the ring or its listener; peers in a call with this
// rank see their connections drop.
func (s *Session) closeRing() {
	s.mu.Lock()
	r, ln := s.ring, s.ringLn
	s.ringLn = nil
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	if r != nil {
		r.Close()
	}
}

// movedOff reports whether the session left its switch session.
func (s *Session) movedOff() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.moved
}

// switchLoss reports whether err means the switch is gone.
func switchLoss(err error) bool {
	return errors.Is(err, ErrSwitchLost) || errors.Is(err, ErrTimeoutBudget)
}

// abortedBy is the error of a lease's end.
func abortedBy(ev *jobpb.WatchEvent) error {
	if ev.GetCause() == "switch_lost" {
		return fmt.Errorf("%w: %w: %s", ErrAborted, ErrSwitchLost, ev.GetReason())
	}
	return fmt.Errorf("%w: %s", ErrAborted, ev.GetReason())
}

// execute runs one call: over the ring once the session is there, else on
// the switch, moving to the ring when the switch is lost and
// FallbackOnLoss allows it.
func (s *Session) execute(h *Handle) error {
	if err := h.ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	r, broken := s.ring, s.broken
	s.mu.Unlock()
	if r != nil {
		return s.executeRing(r, h)
	}
	if !s.cfg.FallbackOnLoss {
		// Every call the loss fails names the option, also one made after
		// the controller said the switch was lost.
		err := s.executeSwitch(h)
		if err != nil && switchLoss(err) {
			err = fmt.Errorf("%w (to move to the ring when the switch is lost, set FallbackOnLoss with Fallback %q: --fallback ring --fallback-on-loss)", err, FallbackRing)
		}
		return err
	}
	if broken != nil {
		if switchLoss(broken) {
			return s.moveToRing(h, broken, false) // nothing of this call was sent
		}
		return broken
	}
	s.saved.save(h.op)
	err := s.executeSwitch(h)
	switch {
	case err == nil:
		s.last.save(h.op)
		s.calls++
		return nil
	case switchLoss(err):
		return s.moveToRing(h, err, true)
	}
	return err
}

// executeRing runs a call over the ring, as its dtype's codec sums it
// there.
func (s *Session) executeRing(r *ring.Ring, h *Handle) error {
	begin := time.Now()
	err := h.op.DType.RingSum(h.ctx, r, h.op.Data, &s.scratch)
	s.finishRing(err, h.n, begin)
	return err
}

// finishRing counts a call done over the ring, or breaks the session with
// its error.
func (s *Session) finishRing(err error, n int, begin time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stats.Failed++
		if s.broken == nil {
			s.broken = fmt.Errorf("switchml: session unusable after the ring failed (close it and join again): %w", err)
		}
		return
	}
	s.calls++
	s.stats.AllReduces++
	s.stats.Ring++
	s.stats.Elements += uint64(n)
	s.durations.Observe(time.Since(begin).Seconds())
}

// moveToRing takes the session from the lost switch to the ring at the
// call h; started says h was sent to the switch (its buffer then holds
// part of a result, and its input is in s.saved).
func (s *Session) moveToRing(h *Handle, cause error, started bool) error {
	begin := time.Now()
	if s.stopWatch != nil {
		s.stopWatch() // the controller has nothing more to say about this session
	}
	s.mu.Lock()
	ln := s.ringLn
	s.ringLn = nil
	s.mu.Unlock()
	fail := func(err error) error {
		err = fmt.Errorf("switchml: the switch was lost (%v), and moving to the ring failed: %w", cause, err)
		s.mu.Lock()
		s.broken = err
		s.mu.Unlock()
		return err
	}
	if ln == nil {
		return fail(errors.New("the ring's listener is closed"))
	}
	ctx, cancel := context.WithTimeout(h.ctx, s.cfg.JoinTimeout)
	r, err := ring.Dial(ctx, ring.Config{Rank: s.cfg.Rank, Workers: s.cfg.Workers, Addrs: s.ringAddrs, Listener: ln, DialTimeout: s.cfg.JoinTimeout, StallTimeout: s.cfg.GiveUp})
	cancel()
	if err != nil {
		return fail(err)
	}
	why := "the switch was lost mid-training: " + cause.Error()
	s.mu.Lock()
	s.ring, s.why, s.moved, s.broken = r, why, true, nil
	s.mu.Unlock()
	done, err := s.catchUp(r, h)
	if err != nil {
		r.Close()
		return fail(err)
	}
	slog.Warn("switchml: the job moved to the ring", "job", s.cfg.Job, "rank", s.cfg.Rank, "why", why,
		"calls_completed", s.calls, "move", time.Since(begin).Round(time.Microsecond))
	if done {
		s.finishRing(nil, h.n, begin)
		return nil
	}
	if started {
		s.saved.restore(h.op)
	}
	return s.executeRing(r, h)
}

// catchUp brings the ranks to one count of completed calls over the new
// ring; done says that h is complete (this rank was the one behind, and h
// now holds the switch's result).
func (s *Session) catchUp(r *ring.Ring, h *Handle) (done bool, err error) {
	counts := make([]int32, s.cfg.Workers)
	mine := int32(uint32(s.calls))
	counts[s.cfg.Rank] = mine
	if err := r.AllReduceInt32(h.ctx, counts); err != nil {
		return false, err
	}
	// Differences from this rank's count, with wrapping.
	lo, hi := int32(0), int32(0)
	for _, c := range counts {
		lo, hi = min(lo, c-mine), max(hi, c-mine)
	}
	if hi-lo > 1 {
		return false, fmt.Errorf("the ranks' counts of completed calls differ by more than one (%v): they did not make the same calls", counts)
	}
	if hi == lo {
		return false, nil
	}
	leader := -1
	for i, c := range counts {
		if c-mine == hi {
			leader = i
			break
		}
	}
	ahead := hi == 0
	n := words(len(h.op.Data))
	if ahead {
		n = s.last.words()
	}
	bits := make([]int32, n)
	if s.cfg.Rank == leader {
		s.last.bits(bits)
	}
	if err := r.AllReduceInt32(h.ctx, bits); err != nil {
		return false, fmt.Errorf("handing the last call's result to the ranks behind: %w", err)
	}
	if ahead {
		return false, nil
	}
	setBits(h.op, bits)
	return true, nil
}

// dataBarrier is Barrier as a one-value allreduce.
func (s *Session) dataBarrier(ctx context.Context) error {
	if err := s.AllReduceInt32(ctx, []int32{0}); err != nil {
		return fmt.Errorf("switchml: barrier: %w", err)
	}
	return nil
}

// dataBroadcast is Broadcast as two allreduce calls, the length and the
// bytes, with zeros from every rank but the root: int32 sums are exact.
func (s *Session) dataBroadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= s.cfg.Workers {
		return nil, fmt.Errorf("switchml: broadcast: root %d outside 0..%d", root, s.cfg.Workers-1)
	}
	size := []int32{0}
	if s.cfg.Rank == root {
		if len(data) > math.MaxInt32 {
			return nil, s.refuse(fmt.Errorf("switchml: broadcast of %d bytes: at most %d", len(data), math.MaxInt32)).Err()
		}
		size[0] = int32(len(data))
	}
	if err := s.AllReduceInt32(ctx, size); err != nil {
		return nil, fmt.Errorf("switchml: broadcast: %w", err)
	}
	if size[0] == 0 {
		return nil, nil
	}
	words := make([]int32, (int(size[0])+3)/4)
	if s.cfg.Rank == root {
		var w [4]byte
		for i := range words {
			n := copy(w[:], data[4*i:])
			clear(w[n:])
			words[i] = int32(binary.LittleEndian.Uint32(w[:]))
		}
	}
	if err := s.AllReduceInt32(ctx, words); err != nil {
		return nil, fmt.Errorf("switchml: broadcast: %w", err)
	}
	out := make([]byte, 4*len(words))
	for i, v := range words {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out[:size[0]], nil
}
