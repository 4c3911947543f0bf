package local_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml"
)

// joinN joins n ranks of job on fab's controller and closes them when the
// test ends.
func joinN(t *testing.T, ctx context.Context, fab interface{ ControllerAddr() string }, job string, n int) []*switchml.Session {
	t.Helper()
	sess := make([]*switchml.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range sess {
		wg.Go(func() {
			sess[r], errs[r] = switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: job, Rank: r, Workers: n,
				Lanes: 1, Window: 8, GiveUp: time.Hour})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range sess {
			s.Close()
		}
	})
	return sess
}

// peersInBarrier has ranks 1..n-1 wait in barrier "b" with a deadline
// far past what the abort needs but short of the test's own, and returns
// their outcomes once they all ended.
func peersInBarrier(ctx context.Context, sess []*switchml.Session) func() []error {
	errs := make([]error, len(sess))
	var wg sync.WaitGroup
	for r := 1; r < len(sess); r++ {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, 45*time.Second)
			defer cancel()
			errs[r] = sess[r].Barrier(c, "b")
		})
	}
	return func() []error { wg.Wait(); return errs[1:] }
}

// TestInterruptedBarrierEndsTheJob: rank 0's barrier call is cancelled
// (Ctrl-C in a program that passes its signal context): rank 0 reports it,
// and its peers, waiting in another barrier for it, fail with ErrAborted
// naming rank 0 and the interrupt instead of waiting out their deadline.
// The session of rank 0 is over too.
func TestInterruptedBarrierEndsTheJob(t *testing.T) {
	ctx, fab := startFabric(t)
	sess := joinN(t, ctx, fab, "interrupted", 3)
	wait := peersInBarrier(ctx, sess)
	c, interrupt := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sess[0].Barrier(c, "elsewhere") }()
	interrupt()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("rank 0: %v, want its own cancellation", err)
	}
	for r, err := range wait() {
		if !errors.Is(err, switchml.ErrAborted) || !strings.Contains(err.Error(), "aborted by rank 0: interrupted") {
			t.Errorf("rank %d: %v, want ErrAborted naming rank 0's interrupt", r+1, err)
		}
	}
	if err := sess[0].Barrier(ctx, "after"); err == nil {
		t.Error("rank 0's session still works after its interrupted call")
	}
}

// TestClosedMidBarrierEndsTheJob: rank 0 closes its session while its
// peers wait in a barrier for it (and while a barrier of its own may be in
// flight, or not yet sent); its peers fail with ErrAborted naming rank 0
// and that it closed its session.
func TestClosedMidBarrierEndsTheJob(t *testing.T) {
	ctx, fab := startFabric(t)
	sess := joinN(t, ctx, fab, "closed", 3)
	wait := peersInBarrier(ctx, sess)
	done := make(chan error, 1)
	go func() { done <- sess[0].Barrier(ctx, "elsewhere") }()
	sess[0].Close()
	if err := <-done; !errors.Is(err, switchml.ErrClosed) {
		t.Errorf("rank 0: %v, want ErrClosed", err)
	}
	for r, err := range wait() {
		if !errors.Is(err, switchml.ErrAborted) || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "closed its session") {
			t.Errorf("rank %d: %v, want ErrAborted naming rank 0's close", r+1, err)
		}
	}
}

// TestInterruptedAllReduceEndsTheJob: rank 0's allreduce, waiting for
// shares that never come, is cancelled; its peers' barrier fails with
// ErrAborted naming rank 0's interrupt.
func TestInterruptedAllReduceEndsTheJob(t *testing.T) {
	ctx, fab := startFabric(t)
	sess := joinN(t, ctx, fab, "interrupted-ar", 3)
	wait := peersInBarrier(ctx, sess)
	c, interrupt := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sess[0].AllReduceInt32(c, make([]int32, 10_000)) }()
	interrupt()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("rank 0: %v, want its own cancellation", err)
	}
	for r, err := range wait() {
		if !errors.Is(err, switchml.ErrAborted) || !strings.Contains(err.Error(), "aborted by rank 0: interrupted") {
			t.Errorf("rank %d: %v, want ErrAborted naming rank 0's interrupt", r+1, err)
		}
	}
}
