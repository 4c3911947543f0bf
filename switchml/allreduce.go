package switchml

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/engine"
)

// Handle is an allreduce in progress.
type Handle struct {
	ctx    context.Context
	op     engine.Op
	n      int
	queued time.Time // when the call was made
	err    error
	done   chan struct{}
}

// Wait blocks until the allreduce finished, failed or ctx ended. Ending ctx
// stops waiting but not the allreduce: cancel the context given to the
// Start call to abandon it.
func (h *Handle) Wait(ctx context.Context) error {
	select {
	case <-h.done:
		return h.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the allreduce finished or failed.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Err is the outcome once Done is closed.
func (h *Handle) Err() error {
	select {
	case <-h.done:
		return h.err
	default:
		return nil
	}
}

// refuse fails a call this rank cannot take part in. Its peers are (or will
// be) waiting for its share, so the session ends: the controller aborts the
// job and tells them the reason.
func (s *Session) refuse(err error) *Handle {
	s.mu.Lock()
	first := s.broken == nil
	if first {
		s.broken = fmt.Errorf("switchml: session ended after a refused allreduce (close it and join again): %w", err)
	}
	s.mu.Unlock()
	if first {
		s.reportAsync(err)
		// Ring peers would wait for this rank's share without end: the
		// broken ring tells them.
		s.closeRing()
	}
	return failed(err)
}

// notStarted fails a call whose context ended before it began. The peers
// make the same call and would wait for this rank's share, so a call its
// caller cancelled (an interrupt) ends the job for all of them.
func (s *Session) notStarted(h *Handle) error {
	err := h.ctx.Err()
	if why := s.departure(h.ctx, "allreduce"); why != nil {
		return s.leaveEarly(why, err)
	}
	return err
}

func (s *Session) start(ctx context.Context, op engine.Op, n int) *Handle {
	h := &Handle{ctx: ctx, op: op, n: n, queued: time.Now(), done: make(chan struct{})}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		h.err = ErrClosed
		close(h.done)
		return h
	}
	select {
	case s.ops <- h:
	case <-s.quit:
		h.err = ErrClosed
		close(h.done)
	case <-ctx.Done():
		h.err = s.notStarted(h)
		close(h.done)
	}
	return h
}

// Start begins an in-place sum across all ranks of data, values of type
// c (dtype.Bytes of a typed slice; dtype.ByName finds a type by name).
// data must not be touched until the handle is done. Unscaled (integer)
// types sum exactly, wrapping; scaled (float) types as block-scaled fixed
// point. NaN or Inf in a float input fails the call, naming the first bad
// index; since the other ranks would wait for this rank's share, the
// session ends and they learn why. On the switch the lanes find it as they
// scan each packet's block for its exponent, so the tensor is read once
// less; blocks before the bad one may have been sent. Where the call may
// run over the ring (the session is there, or FallbackOnLoss), it is
// refused before anything is sent.
func (s *Session) Start(ctx context.Context, c dtype.Codec, data []byte) *Handle {
	if c == nil {
		return failed(fmt.Errorf("switchml: no dtype: pass one of %v", dtype.Names()))
	}
	if len(data)%c.Size() != 0 {
		return s.refuse(fmt.Errorf("switchml: %d bytes of %s: not a whole number of %d-byte values", len(data), c.Name(), c.Size()))
	}
	n := len(data) / c.Size()
	op := engine.Op{DType: c, Data: data}
	if !c.Scaled() {
		return s.start(ctx, op, n)
	}
	s.mu.Lock()
	onSwitch := s.ring == nil && !s.cfg.FallbackOnLoss
	s.mu.Unlock()
	if onSwitch {
		op.CheckOnSend = true
		return s.start(ctx, op, n)
	}
	// One pass finds a bad value and every packet's block exponent.
	k := max(s.cfg.PacketElements, 1)
	op.Checked, op.Exps, op.ExpBlock = true, make([]int8, (n+k-1)/k), k
	if err := dtype.BlockExponents(c, op.Exps, data, k); err != nil {
		return s.refuse(fmt.Errorf("switchml: input not finite: %w", err))
	}
	return s.start(ctx, op, n)
}

// StartFloat32 is Start of float32 values.
func (s *Session) StartFloat32(ctx context.Context, x []float32) *Handle {
	return s.Start(ctx, dtype.Float32, dtype.Bytes(x))
}

// StartInt32 begins an in-place, exact (wrapping) sum of x across all ranks.
func (s *Session) StartInt32(ctx context.Context, x []int32) *Handle {
	return s.Start(ctx, dtype.Int32, dtype.Bytes(x))
}

// StartFloat16 is Start of IEEE half-precision values, given as their
// bits.
func (s *Session) StartFloat16(ctx context.Context, x []uint16) *Handle {
	return s.Start(ctx, dtype.Float16, dtype.Bytes(x))
}

// StartBFloat16 is Start of bfloat16 values, given as their bits.
func (s *Session) StartBFloat16(ctx context.Context, x []uint16) *Handle {
	return s.Start(ctx, dtype.BFloat16, dtype.Bytes(x))
}

func failed(err error) *Handle {
	h := &Handle{err: err, done: make(chan struct{})}
	close(h.done)
	return h
}

// AllReduce sums data, values of type c, across all ranks in place (Start).
func (s *Session) AllReduce(ctx context.Context, c dtype.Codec, data []byte) error {
	return s.Start(ctx, c, data).Wait(context.Background())
}

// AllReduceFloat32 sums x across all ranks in place.
func (s *Session) AllReduceFloat32(ctx context.Context, x []float32) error {
	return s.StartFloat32(ctx, x).Wait(context.Background())
}

// AllReduceInt32 sums x across all ranks in place, exactly.
func (s *Session) AllReduceInt32(ctx context.Context, x []int32) error {
	return s.StartInt32(ctx, x).Wait(context.Background())
}

// AllReduceFloat16 sums half-precision values (as bits) across all ranks in place.
func (s *Session) AllReduceFloat16(ctx context.Context, x []uint16) error {
	return s.StartFloat16(ctx, x).Wait(context.Background())
}

// AllReduceBFloat16 sums bfloat16 values (as bits) across all ranks in place.
func (s *Session) AllReduceBFloat16(ctx context.Context, x []uint16) error {
	return s.StartBFloat16(ctx, x).Wait(context.Background())
}

// run executes queued calls one at a time, in order, across the lanes.
func (s *Session) run() {
	defer close(s.done)
	for {
		select {
		case <-s.quit:
			// Fail what is still queued rather than leave callers waiting.
			for {
				select {
				case h := <-s.ops:
					h.err = ErrClosed
					close(h.done)
				default:
					return
				}
			}
		case h := <-s.ops:
			if h.ctx.Err() != nil {
				h.err = s.notStarted(h)
			} else {
				h.err = s.execute(h)
			}
			close(h.done)
		}
	}
}

// executeSwitch runs a call on the switch.
func (s *Session) executeSwitch(h *Handle) error {
	s.mu.Lock()
	if s.broken != nil {
		s.mu.Unlock()
		return s.broken
	}
	seq := s.seq
	s.seq++
	dense := s.cfg.Sparse && s.sparseDense(h.n)
	s.mu.Unlock()
	begin := time.Now()
	ranges := engine.SplitLanes(h.n, len(s.lanes), s.cfg.PacketElements)
	errs := make(chan error, len(s.lanes))
	active := 0
	for i, r := range ranges {
		if r.Len == 0 {
			continue
		}
		op := h.op.Slice(r)
		op.Seq, op.Dense = seq, dense
		active++
		go func(l *laneDriver) { errs <- l.run(h.ctx, s.quit, s.aborted, op) }(s.lanes[i])
	}
	var first error
	for i := 0; i < active; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	reported := false
	if errors.Is(first, ErrTimeoutBudget) && s.departure(h.ctx, "allreduce") == nil {
		// The switch stopped answering this rank: lost, or waiting for a
		// rank that stopped sending? The controller looks before it says.
		var verdict error
		if reported, verdict = s.verdictOnGiveUp(first); verdict != nil {
			s.abort(verdict)
			first = verdict
		}
	}
	held := 0.0
	if s.cfg.Sparse && first == nil {
		held = s.sparseHeld(h, dense, ranges)
	}
	end := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.stats
	if s.cfg.Sparse && first == nil {
		s.sparseDone(h.n, dense, held)
	}
	s.stats.Packets, s.stats.Retransmits, s.stats.Timeouts, s.stats.SentBytes, s.stats.RTT, s.stats.Timeout = 0, 0, 0, 0, 0, 0
	for _, l := range s.lanes {
		st := l.eng.Stats()
		s.stats.Packets += st.Sent + st.Retransmits
		s.stats.Retransmits += st.Retransmits
		s.stats.Timeouts += st.Timeouts
		s.stats.SentBytes += l.bytes
		rtt, rto := l.eng.RTT()
		s.stats.RTT, s.stats.Timeout = max(s.stats.RTT, rtt), max(s.stats.Timeout, rto)
	}
	if s.trace != nil {
		detail := ""
		if first != nil {
			detail = first.Error()
		}
		s.trace.span(0, "allreduce", "allreduce", detail, begin, end,
			traceArg{"seq", int64(seq)}, traceArg{"elements", int64(h.n)},
			traceArg{"packets", int64(s.stats.Packets - before.Packets)},
			traceArg{"retransmits", int64(s.stats.Retransmits - before.Retransmits)},
			traceArg{"queued_us", begin.Sub(h.queued).Microseconds()})
	}
	if first != nil {
		s.stats.Failed++
		if errors.Is(first, errAborted) {
			return s.broken
		}
		var nf *quant.NonFiniteError
		if errors.As(first, &nf) {
			// A lane found it in its share: name the tensor's first.
			if err := h.op.DType.Check(h.op.Data); err != nil {
				first = fmt.Errorf("switchml: input not finite: %w", err)
			}
		}
		// Some lane stopped mid-op: its slots are out of step with the
		// other workers, so no later call can be correct; the others
		// learn it through the controller.
		if s.broken == nil {
			s.broken = fmt.Errorf("switchml: session unusable after a failed allreduce (close it and join again): %w", first)
			reason := first
			if why := s.departure(h.ctx, "allreduce"); why != nil {
				reason = why // the caller stopped it: say so, not what the lanes saw
			}
			if !reported {
				s.reportAsync(reason)
			}
		}
		return first
	}
	s.stats.AllReduces++
	s.stats.Elements += uint64(h.n)
	s.durations.Observe(end.Sub(begin).Seconds())
	return nil
}
