package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/p4/controller/controllerpb"
)

// joined registers a job of n ranks and opens every rank's lease.
func joined(t *testing.T, h *jobHarness, job string, n uint32) ([]controllerpb.JobService_WatchClient, []context.CancelFunc, *controllerpb.RegisterResponse) {
	t.Helper()
	ctx := testCtx(t)
	reqs := make([]*controllerpb.RegisterRequest, n)
	for r := range reqs {
		reqs[r] = regReq(job, uint32(r), n, 1, 4, 1)
	}
	resps, errs := h.registerAll(ctx, reqs...)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	var streams []controllerpb.JobService_WatchClient
	var cancels []context.CancelFunc
	for r := range n {
		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		st, err := h.jobs.Watch(wctx, &controllerpb.WatchRequest{Job: job, Rank: r, SessionId: resps[0].GetSessionId()})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := st.Recv(); err != nil || ev.GetAborted() {
			t.Fatalf("rank %d lease: %v, %v", r, ev, err)
		}
		streams, cancels = append(streams, st), append(cancels, cancel)
	}
	return streams, cancels, resps[0]
}

// abortedWith waits for a lease's abort event and returns its reason.
func abortedWith(t *testing.T, st controllerpb.JobService_WatchClient) string {
	t.Helper()
	ev, err := st.Recv()
	if err != nil {
		t.Fatalf("lease ended without an event: %v", err)
	}
	if !ev.GetAborted() {
		t.Fatalf("event %v, want an abort", ev)
	}
	return ev.GetReason()
}

// TestLostRankAbortsTheJob: a rank whose lease ends without Leave aborts
// the job; the other ranks hear why, the entries go and the name is free.
func TestLostRankAbortsTheJob(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	streams, cancels, resp := joined(t, h, "lease", 3)
	cancels[2]() // rank 2's process dies: its stream ends
	for _, r := range []int{0, 1} {
		if why := abortedWith(t, streams[r]); !strings.Contains(why, "rank 2 lost its connection") {
			t.Errorf("rank %d heard %q, want the lost rank named", r, why)
		}
	}
	<-h.svc.Drained()
	if ws, err := h.sw.ReadWorkers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workers after the abort: %v, %v; want none", ws, err)
	}
	_, err := h.jobs.Barrier(ctx, &controllerpb.BarrierRequest{Job: "lease", Rank: 0, SessionId: resp.GetSessionId(), Name: "b"})
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "rank 2 lost its connection") {
		t.Errorf("barrier on the aborted session: %v, want Aborted naming rank 2", err)
	}
	// The same name joins again at once, on the freed slots.
	_, _, again := joined(t, h, "lease", 3)
	if again.GetSessionId() == resp.GetSessionId() {
		t.Error("the new session reuses the aborted one's id")
	}
}

// TestLeaveIsNotDeath: ranks that leave and then close their lease end the
// job quietly; the lease of a rank still running sees the job finish.
func TestLeaveIsNotDeath(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	streams, cancels, resp := joined(t, h, "leave", 2)
	if _, err := h.jobs.Leave(ctx, &controllerpb.LeaveRequest{Job: "leave", Rank: 1, SessionId: resp.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	cancels[1]()
	// Rank 0 is still in the job: nothing happened to it.
	if got := h.svc.Jobs(); got["leave"] == nil {
		t.Fatal("the job ended when a rank that had left closed its lease")
	}
	if _, err := h.jobs.Leave(ctx, &controllerpb.LeaveRequest{Job: "leave", Rank: 0, SessionId: resp.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	if why := abortedWith(t, streams[0]); !strings.Contains(why, "every rank left") {
		t.Errorf("rank 0's lease ended with %q, want the job finished", why)
	}
}

// TestAbortTellsThePeers: a rank that fails locally reports it, and the
// others hear its reason.
func TestAbortTellsThePeers(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	streams, _, resp := joined(t, h, "abort", 2)
	long := strings.Repeat("x", 10000)
	if _, err := h.jobs.Abort(ctx, &controllerpb.AbortRequest{Job: "abort", Rank: 1, SessionId: resp.GetSessionId(), Reason: "lane 0 gave up " + long}); err != nil {
		t.Fatal(err)
	}
	why := abortedWith(t, streams[0])
	if !strings.Contains(why, "aborted by rank 1: lane 0 gave up") || len(why) > 1000 {
		t.Errorf("rank 0 heard %.200q (%d bytes), want rank 1's reason, bounded", why, len(why))
	}
	// Aborting again, or an unknown session, is not an error.
	for _, id := range []uint64{resp.GetSessionId(), 12345} {
		if _, err := h.jobs.Abort(ctx, &controllerpb.AbortRequest{Job: "abort", Rank: 0, SessionId: id, Reason: "again"}); err != nil {
			t.Errorf("abort of session %d: %v", id, err)
		}
	}
	// A lease on an unknown session is refused.
	st, err := h.jobs.Watch(ctx, &controllerpb.WatchRequest{Job: "nope", Rank: 0, SessionId: 1})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Errorf("lease on an unknown job: %v, want NotFound", err)
	}
}

// TestSwitchLostEndsJobsAndHoldsRegistrations: losing the switch ends every
// job with that cause; a registration meanwhile waits until the switch is
// back, then goes through.
func TestSwitchLostEndsJobsAndHoldsRegistrations(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	streams, _, _ := joined(t, h, "before", 2)
	h.svc.SwitchLost("aborted: the switch went away")
	for r, st := range streams {
		if why := abortedWith(t, st); !strings.Contains(why, "the switch went away") {
			t.Errorf("rank %d heard %q", r, why)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.jobs.Register(ctx, regReq("after", 0, 1, 1, 4, 2))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("registration went through while the switch was away: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// Reconnecting pushes the pipeline afresh, which clears the tables.
	if err := h.sw.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	h.svc.SwitchBack(h.sw)
	if err := <-done; err != nil {
		t.Fatalf("registration after the switch came back: %v", err)
	}
}
