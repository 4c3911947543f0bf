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
// whatever its type, and travel as little-endian int32 words. Then every
// rank redoes its current call over the ring from its kept input.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/switchml/ring"
)

// ringLink is this rank's side of the ring: its listener until the ring
// is dialled, the ring since.
type ringLink struct {
	// bind is the address the lanes bind, and the ring's host when its
	// listener has none.
	bind string
	// addrs are every rank's ring address, kept for a move mid-training
	// (FallbackOnLoss).
	addrs []string

	mu   sync.Mutex
	ln   net.Listener
	ring *ring.Ring
}

// listenRing opens this rank's ring listener (Config.FallbackListen).
func listenRing(cfg Config, bind string) (*ringLink, error) {
	addr := cfg.FallbackListen
	if addr == "" && len(cfg.FallbackPeers) > 0 {
		addr = cfg.FallbackPeers[cfg.Rank]
	}
	if addr == "" {
		addr = net.JoinHostPort(bind, "0")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("switchml: the ring's listener on %s (Config.FallbackListen or FallbackPeers[%d]): %w", addr, cfg.Rank, err)
	}
	return &ringLink{bind: bind, ln: ln}, nil
}

// address is the address the other ranks reach this rank's ring at ("" once
// the listener is closed).
func (l *ringLink) address() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return ""
	}
	a, ok := l.ln.Addr().(*net.TCPAddr)
	if !ok {
		return l.ln.Addr().String()
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = l.bind
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// keep keeps the listener and the ranks' addresses of a job the switch
// took, for a move mid-training (FallbackOnLoss); without it the listener
// is closed.
func (l *ringLink) keep(cfg Config, addrs []string) error {
	if !cfg.FallbackOnLoss {
		l.close()
		return nil
	}
	if len(addrs) != cfg.Workers {
		if len(cfg.FallbackPeers) != cfg.Workers {
			return configField.Errorf("switchml: no ring addresses from the controller at %s: it predates fallback; give them in {FallbackPeers} for {FallbackOnLoss}",
				cfg.Controller)
		}
		addrs = cfg.FallbackPeers
	}
	l.addrs = addrs
	return nil
}

// dial forms the ring with the ranks at addrs, on this rank's listener.
func (l *ringLink) dial(ctx context.Context, cfg Config, addrs []string) (*ring.Ring, error) {
	l.mu.Lock()
	ln := l.ln
	l.ln = nil
	l.mu.Unlock()
	if ln == nil {
		return nil, errors.New("the ring's listener is closed")
	}
	r, err := ring.Dial(ctx, ring.Config{Rank: cfg.Rank, Workers: cfg.Workers, Addrs: addrs, Listener: ln, DialTimeout: cfg.JoinTimeout, StallTimeout: cfg.GiveUp})
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.ring = r
	l.mu.Unlock()
	return r, nil
}

// close closes the ring or its listener; peers in a call with this rank
// see their connections drop. Any goroutine may call it.
func (l *ringLink) close() {
	l.mu.Lock()
	r, ln := l.ring, l.ln
	l.ring, l.ln = nil, nil
	l.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	if r != nil {
		r.Close()
	}
}

// joinRing makes the session run over the ring at addrs from the start,
// for why; it releases what Join opened when it fails.
func (s *Session) joinRing(ctx context.Context, addrs []string, why string) (*Session, error) {
	if len(addrs) != s.cfg.Workers {
		s.abandon()
		return nil, fmt.Errorf("switchml: running over the ring: %d ring addresses for Config.Workers %d (%s)", len(addrs), s.cfg.Workers, why)
	}
	s.sw.close()
	s.sw = nil
	s.job.drop()
	start := time.Now()
	r, err := s.ring.dial(ctx, s.cfg, addrs)
	if err != nil {
		s.abandon()
		return nil, fmt.Errorf("switchml: running over the ring failed: %w (%s)", err, why)
	}
	s.st.mu.Lock()
	s.st.why = why
	s.st.mu.Unlock()
	s.exec = &ringSum{r: r, st: s.st, durations: s.durations}
	s.dataCollectives = true
	if s.cfg.PacketElements == 0 {
		s.cfg.PacketElements = DefaultPacketElements
	}
	slog.Warn("switchml: the job runs over the ring instead of the switch", "job", s.cfg.Job, "rank", s.cfg.Rank, "why", why,
		"ring_setup", time.Since(start).Round(time.Microsecond))
	go s.run()
	return s, nil
}

// ringSum is the executor that sums over the ring, as each dtype's codec
// sums it there.
type ringSum struct {
	r         *ring.Ring
	st        *state
	durations prometheus.Histogram
	// scratch is the codecs' buffer for the ring (dtype.Codec.RingSum).
	scratch []float32
}

func (x *ringSum) execute(h *Handle) error {
	begin := time.Now()
	err := h.op.DType.RingSum(h.ctx, x.r, h.op.Data, &x.scratch)
	x.finish(err, h.n, begin)
	return err
}

// finish counts a call of n values done over the ring, or breaks the
// session with its error.
func (x *ringSum) finish(err error, n int, begin time.Time) {
	st := x.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.stats.Failed++
		if st.broken == nil {
			st.broken = fmt.Errorf("switchml: session unusable after the ring failed (close it and join again): %w", err)
		}
		return
	}
	st.stats.AllReduces++
	st.stats.Ring++
	st.stats.Elements += uint64(n)
	x.durations.Observe(time.Since(begin).Seconds())
}

// lossGuard is the executor of a session that moves to the ring when the
// switch is lost (Config.FallbackOnLoss): the switch's lanes, with a copy
// of each call's input and of the last call's result.
type lossGuard struct {
	sw   *switchLanes
	link *ringLink
	// swap makes the ring the session's executor.
	swap func(executor)

	// calls counts the completed calls; saved is the current call's
	// input and last the last completed call's result.
	calls       uint64
	saved, last held
}

func (g *lossGuard) execute(h *Handle) error {
	if broken := g.sw.st.err(); broken != nil {
		if switchLoss(broken) {
			return g.moveToRing(h, broken, false) // nothing of this call was sent
		}
		return broken
	}
	g.saved.save(h.op)
	err := g.sw.execute(h)
	switch {
	case err == nil:
		g.last.save(h.op)
		g.calls++
		return nil
	case switchLoss(err):
		return g.moveToRing(h, err, true)
	}
	return err
}

// moveToRing takes the session from the lost switch to the ring at the
// call h; started says h was sent to the switch (its buffer then holds
// part of a result, and its input is in g.saved).
func (g *lossGuard) moveToRing(h *Handle, cause error, started bool) error {
	begin := time.Now()
	cfg, st := g.sw.cfg, g.sw.st
	g.sw.job.endLease() // the controller has nothing more to say about this session
	fail := func(err error) error {
		err = fmt.Errorf("switchml: moving to the ring failed: %w (the switch was lost: %v)", err, cause)
		st.mu.Lock()
		st.broken = err
		st.mu.Unlock()
		return err
	}
	ctx, cancel := context.WithTimeout(h.ctx, cfg.JoinTimeout)
	r, err := g.link.dial(ctx, cfg, g.link.addrs)
	cancel()
	if err != nil {
		return fail(err)
	}
	g.sw.job.detach()
	why := "the switch was lost mid-training: " + cause.Error()
	st.mu.Lock()
	st.why, st.broken = why, nil
	st.mu.Unlock()
	done, err := g.catchUp(r, h)
	if err != nil {
		g.link.close()
		return fail(err)
	}
	slog.Warn("switchml: the job moved to the ring", "job", cfg.Job, "rank", cfg.Rank, "why", why,
		"calls_completed", g.calls, "move", time.Since(begin).Round(time.Microsecond))
	next := &ringSum{r: r, st: st, durations: g.sw.durations}
	g.swap(next)
	if done {
		next.finish(nil, h.n, begin)
		return nil
	}
	if started {
		g.saved.restore(h.op)
	}
	return next.execute(h)
}

// catchUp brings the ranks to one count of completed calls over the new
// ring; done says that h is complete (this rank was the one behind, and h
// now holds the switch's result).
func (g *lossGuard) catchUp(r *ring.Ring, h *Handle) (done bool, err error) {
	cfg := g.sw.cfg
	counts := make([]int32, cfg.Workers)
	mine := int32(uint32(g.calls))
	counts[cfg.Rank] = mine
	if err := r.AllReduceInt32(h.ctx, counts); err != nil {
		return false, err
	}
	// Differences from this rank's count, with wrapping.
	lo, hi := int32(0), int32(0)
	for _, c := range counts {
		lo, hi = min(lo, c-mine), max(hi, c-mine)
	}
	if hi-lo > 1 {
		return false, fmt.Errorf("the ranks' counts of completed calls differ by more than one: %v; they did not make the same calls", counts)
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
		n = g.last.words()
	}
	bits := make([]int32, n)
	if cfg.Rank == leader {
		g.last.bits(bits)
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

// dataBarrier is Barrier as a one-value allreduce (sum).
func dataBarrier(ctx context.Context, sum func(context.Context, []int32) error) error {
	if err := sum(ctx, []int32{0}); err != nil {
		return fmt.Errorf("switchml: barrier: %w", err)
	}
	return nil
}

// dataBroadcast is Broadcast as two allreduce calls (sum), the length and
// the bytes, with zeros from every rank but the root: int32 sums are
// exact. The root's data is at most math.MaxInt32 bytes.
func dataBroadcast(ctx context.Context, sum func(context.Context, []int32) error, rank, root int, data []byte) ([]byte, error) {
	size := []int32{0}
	if rank == root {
		size[0] = int32(len(data))
	}
	if err := sum(ctx, size); err != nil {
		return nil, fmt.Errorf("switchml: broadcast: %w", err)
	}
	if size[0] == 0 {
		return nil, nil
	}
	words := make([]int32, (int(size[0])+3)/4)
	if rank == root {
		var w [4]byte
		for i := range words {
			n := copy(w[:], data[4*i:])
			clear(w[n:])
			words[i] = int32(binary.LittleEndian.Uint32(w[:]))
		}
	}
	if err := sum(ctx, words); err != nil {
		return nil, fmt.Errorf("switchml: broadcast: %w", err)
	}
	out := make([]byte, 4*len(words))
	for i, v := range words {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out[:size[0]], nil
}
