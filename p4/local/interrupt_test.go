package local_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/switchml"
)

// joinN joins n ranks of job on fab's controller (one lane of 8, give-up
// an hour away, unless giveUp says otherwise) and closes them when the
// test ends.
func joinN(t *testing.T, ctx context.Context, fab interface{ ControllerAddr() string }, job string, n int, giveUp ...time.Duration) []*switchml.Session {
	t.Helper()
	sess := make([]*switchml.Session, n)
	errs := make([]error, n)
	cfg := switchml.Config{Controller: fab.ControllerAddr(), Job: job, Workers: n, Lanes: 1, Window: 8, GiveUp: time.Hour}
	if len(giveUp) > 0 {
		cfg.GiveUp = giveUp[0]
	}
	var wg sync.WaitGroup
	for r := range sess {
		wg.Go(func() {
			c := cfg
			c.Rank = r
			sess[r], errs[r] = switchml.Join(ctx, c)
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

// TestStalledRankIsNamed: rank 2 of a job is alive and holds its lease but
// stops calling allreduce (a stopped process, a stuck data loader). Its
// peers give up on the switch, and the controller, finding the switch
// answering with slots that wait for rank 2, ends the job naming rank 2:
// no switch loss is recorded, and the peers' errors are not taken for one
// (a session with FallbackOnLoss would not move a healthy job to the ring).
func TestStalledRankIsNamed(t *testing.T) {
	ctx, fab := startFabric(t)
	sess := joinN(t, ctx, fab, "stalled", 3, 2*time.Second)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { errs[r] = sess[r].AllReduceFloat32(ctx, make([]float32, 20_000)) })
	}
	wg.Wait()
	for r, err := range errs[:2] {
		if !errors.Is(err, switchml.ErrAborted) || errors.Is(err, switchml.ErrTimeoutBudget) || errors.Is(err, switchml.ErrSwitchLost) ||
			!strings.Contains(err.Error(), "rank 2 stopped sending") {
			t.Errorf("rank %d: %v, want ErrAborted naming rank 2 as stopped, not a switch loss", r, err)
		}
	}
	st := controllerStatus(t, ctx, fab.ControllerAddr(), false)
	if st.GetEnded()["switch_lost"] != 0 || st.GetEnded()["rank_failed"] != 1 {
		t.Errorf("the controller counted %v; want one rank_failed and no switch_lost", st.GetEnded())
	}
}

// controllerStatus asks a controller without TLS for its status, with the
// switch's counters or not.
func controllerStatus(t *testing.T, ctx context.Context, addr string, counters bool) *jobpb.StatusResponse {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := jobpb.NewJobServiceClient(conn).Status(ctx, &jobpb.StatusRequest{SkipSwitchCounters: !counters})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLeftMidAllReduceEndsTheJob: rank 2 closes its session (as
// destroy_process_group does) while ranks 0 and 1 are inside an allreduce
// it never makes. The controller, finding the job's slots waiting for rank
// 2's share, ends the job at once: ranks 0 and 1 fail with ErrAborted
// naming rank 2, although their give-up is an hour away.
func TestLeftMidAllReduceEndsTheJob(t *testing.T) {
	ctx, fab := startFabric(t)
	sess := joinN(t, ctx, fab, "left", 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { errs[r] = sess[r].AllReduceInt32(ctx, make([]int32, 10_000)) })
	}
	// Wait until the switch holds the ranks' first packets.
	for {
		received := uint64(0)
		for _, c := range controllerStatus(t, ctx, fab.ControllerAddr(), true).GetSwitchCounters() {
			if c.GetName() == "received" {
				received = c.GetPackets()
			}
		}
		if received > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the switch never received the ranks' packets")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := sess[2].Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for r, err := range errs[:2] {
		if !errors.Is(err, switchml.ErrAborted) || !strings.Contains(err.Error(), "rank 2 closed its session (left) while") {
			t.Errorf("rank %d: %v, want ErrAborted naming rank 2's leaving", r, err)
		}
	}
}

// TestAbortEndsTheJob: rank 0 aborts between its calls (interrupted while
// it prepares a tensor). Rank 1, waiting in a barrier for it, fails with
// ErrAborted naming rank 0 and the cause; rank 2, busy between calls,
// learns the same through Done and Err; rank 0's session is closed.
func TestAbortEndsTheJob(t *testing.T) {
	ctx, fab := startFabric(t)
	sess := joinN(t, ctx, fab, "aborted", 3)
	select {
	case <-sess[2].Done():
		t.Fatalf("rank 2's session ended before any abort: %v", sess[2].Err())
	default:
	}
	if err := sess[2].Err(); err != nil {
		t.Fatalf("rank 2's session broken before any abort: %v", err)
	}
	barrier := make(chan error, 1)
	go func() { barrier <- sess[1].Barrier(ctx, "b") }()
	if err := sess[0].Abort(errors.New("interrupted")); err != nil {
		t.Errorf("rank 0's abort: %v", err)
	}
	const want = "aborted by rank 0: interrupted"
	if err := <-barrier; !errors.Is(err, switchml.ErrAborted) || !strings.Contains(err.Error(), want) {
		t.Errorf("rank 1's barrier: %v, want ErrAborted with %q", err, want)
	}
	select {
	case <-sess[2].Done():
	case <-ctx.Done():
		t.Fatal("rank 2's session never ended")
	}
	if err := sess[2].Err(); !errors.Is(err, switchml.ErrAborted) || !strings.Contains(err.Error(), want) {
		t.Errorf("rank 2's session ended with %v, want ErrAborted with %q", err, want)
	}
	if err := sess[0].Barrier(ctx, "after"); !errors.Is(err, switchml.ErrClosed) {
		t.Errorf("rank 0's barrier after its abort: %v, want ErrClosed", err)
	}
}
