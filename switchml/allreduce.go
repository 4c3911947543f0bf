package switchml

import (
	"context"
	"fmt"
	"time"

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
	if s.st.fail(fmt.Errorf("switchml: session ended after a refused allreduce (close it and join again): %w", err)) {
		s.job.reportAsync(err)
		// Ring peers would wait for this rank's share without end: the
		// broken ring tells them.
		if s.ring != nil {
			s.ring.close()
		}
	}
	return failed(err)
}

// start queues the call of op, n values, for run.
func (s *Session) start(ctx context.Context, op engine.Op, n int) *Handle {
	h := &Handle{ctx: ctx, op: op, n: n, queued: time.Now(), done: make(chan struct{})}
	s.st.mu.Lock()
	closed := s.st.closed
	s.st.mu.Unlock()
	if closed {
		h.err = ErrClosed
		close(h.done)
		return h
	}
	select {
	case s.ops <- h:
	case <-s.st.quit:
		h.err = ErrClosed
		close(h.done)
	case <-ctx.Done():
		h.err = s.job.notStarted(ctx)
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
	op := engine.Op{DType: c, Data: data, Wire16: s.cfg.WireWidth(c) == dtype.WireNarrow}
	if !c.Scaled() {
		return s.start(ctx, op, n)
	}
	if active, _ := s.Fallback(); !active && !s.cfg.FallbackOnLoss {
		op.CheckOnSend = true
		return s.start(ctx, op, n)
	}
	// One pass finds a bad value and every packet's block exponent.
	k := op.PerPacket(max(s.cfg.PacketElements, 1))
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

// run executes queued calls one at a time, in order, through the
// session's executor.
func (s *Session) run() {
	defer close(s.done)
	for {
		select {
		case <-s.st.quit:
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
				h.err = s.job.notStarted(h.ctx)
			} else {
				h.err = s.exec.execute(h)
			}
			close(h.done)
		}
	}
}
