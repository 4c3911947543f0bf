package controller

import (
	"context"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
)

// joined registers a job of n ranks and opens every rank's lease; it
// returns rank 0's answer (h.secret gives each rank's secret).
func joined(t *testing.T, h *jobHarness, job string, n uint32) ([]jobpb.JobService_WatchClient, []context.CancelFunc, *jobpb.RegisterResponse) {
	t.Helper()
	streams, cancels, resps := joinedAll(t, h, job, n)
	return streams, cancels, resps[0]
}

// joinedAll registers a job of n ranks and opens every rank's lease. It
// returns the ranks' leases, what ends each, and their registrations'
// answers.
func joinedAll(t *testing.T, h *jobHarness, job string, n uint32) ([]jobpb.JobService_WatchClient, []context.CancelFunc, []*jobpb.RegisterResponse) {
	t.Helper()
	ctx := testCtx(t)
	// Lane addresses of the job's own, so that jobs can run side by side.
	host := byte(10)
	for _, c := range job {
		host += byte(c)
	}
	reqs := make([]*jobpb.RegisterRequest, n)
	for r := range reqs {
		reqs[r] = regReq(job, uint32(r), n, 1, 4, host)
	}
	resps, errs := h.registerAll(ctx, reqs...)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		h.secrets[job+"/"+strconv.Itoa(r)] = resps[r].GetRankSecret()
	}
	var streams []jobpb.JobService_WatchClient
	var cancels []context.CancelFunc
	for r := range n {
		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		st, err := h.jobs.Watch(wctx, &jobpb.WatchRequest{Job: job, Rank: r, SessionId: resps[0].GetSessionId(), RankSecret: resps[r].GetRankSecret()})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := st.Recv(); err != nil || ev.GetAborted() {
			t.Fatalf("rank %d lease: %v, %v", r, ev, err)
		}
		streams, cancels = append(streams, st), append(cancels, cancel)
	}
	return streams, cancels, resps
}

// abortedWith waits for a lease's abort event and returns its reason.
func abortedWith(t *testing.T, st jobpb.JobService_WatchClient) string {
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
	streams, cancels, resps := joinedAll(t, h, "lease", 3)
	resp := resps[0]
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
	_, err := h.jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "lease", Rank: 0, SessionId: resp.GetSessionId(), Name: "b", RankSecret: resp.GetRankSecret()})
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "rank 2 lost its connection") {
		t.Errorf("barrier on the aborted session: %v, want Aborted naming rank 2", err)
	}
	// The same name joins again at once, on the freed slots.
	_, _, again := joinedAll(t, h, "lease", 3)
	if again[0].GetSessionId() == resp.GetSessionId() {
		t.Error("the new session reuses the aborted one's id")
	}
}

// TestLeaveIsNotDeath: ranks that leave and then close their lease end the
// job quietly; the lease of a rank still running sees the job finish.
func TestLeaveIsNotDeath(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	streams, cancels, resps := joinedAll(t, h, "leave", 2)
	resp := resps[0]
	if _, err := h.jobs.Leave(ctx, &jobpb.LeaveRequest{Job: "leave", Rank: 1, SessionId: resp.GetSessionId(), RankSecret: resps[1].GetRankSecret()}); err != nil {
		t.Fatal(err)
	}
	cancels[1]()
	// Rank 0 is still in the job: nothing happened to it.
	if got := h.svc.Jobs(); got["leave"] == nil {
		t.Fatal("the job ended when a rank that had left closed its lease")
	}
	if _, err := h.jobs.Leave(ctx, &jobpb.LeaveRequest{Job: "leave", Rank: 0, SessionId: resp.GetSessionId(), RankSecret: resp.GetRankSecret()}); err != nil {
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
	streams, _, resps := joinedAll(t, h, "abort", 2)
	resp := resps[0]
	long := strings.Repeat("x", 10000)
	if _, err := h.jobs.Abort(ctx, &jobpb.AbortRequest{Job: "abort", Rank: 1, SessionId: resp.GetSessionId(), Reason: "lane 0 gave up " + long, RankSecret: resps[1].GetRankSecret()}); err != nil {
		t.Fatal(err)
	}
	why := abortedWith(t, streams[0])
	if !strings.Contains(why, "aborted by rank 1: lane 0 gave up") || len(why) > 1000 {
		t.Errorf("rank 0 heard %.200q (%d bytes), want rank 1's reason, bounded", why, len(why))
	}
	// Aborting again, or an unknown session, is not an error.
	for _, id := range []uint64{resp.GetSessionId(), 12345} {
		if _, err := h.jobs.Abort(ctx, &jobpb.AbortRequest{Job: "abort", Rank: 0, SessionId: id, Reason: "again", RankSecret: resp.GetRankSecret()}); err != nil {
			t.Errorf("abort of session %d: %v", id, err)
		}
	}
	// A lease on an unknown session is refused.
	st, err := h.jobs.Watch(ctx, &jobpb.WatchRequest{Job: "nope", Rank: 0, SessionId: 1})
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

// restarted serves a second job service over the same switch, as a
// controller restarted beside running jobs would, adopting what the switch
// holds with the claims the first one kept in the harness's state file.
func restarted(t *testing.T, h *jobHarness, grace time.Duration) (*JobService, jobpb.JobServiceClient) {
	t.Helper()
	h.svc.stop()
	svc, err := NewJobService(h.sw, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: testSlots, Logger: quiet,
		State: h.state, StateTarget: h.target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.stop)
	if err := svc.Adopt(testCtx(t), h.sw, grace); err != nil {
		t.Fatal(err)
	}
	return svc, serveJobs(t, svc)
}

// statefulHarness is a job harness whose service keeps a state file.
func statefulHarness(t *testing.T) *jobHarness {
	t.Helper()
	return newJobHarnessWith(t, testSlots, Target{}, filepath.Join(t.TempDir(), "switchml", "controller.state"))
}

// TestRestartedControllerTakesJobsBack: a job found on the switch is handed
// back to its ranks, who prove themselves by the claim the controller kept
// before the restart, and never to a caller that names its switch job id
// or its session; barriers work again, and a new job gets slots of its
// own.
func TestRestartedControllerTakesJobsBack(t *testing.T) {
	h := statefulHarness(t)
	ctx := testCtx(t)
	_, _, resps := joinedAll(t, h, "kept", 2)
	resp := resps[0]
	svc, jobs := restarted(t, h, time.Hour)
	for _, req := range []*jobpb.WatchRequest{
		{Job: "attacker", Rank: 0, SessionId: 1, JobId: resp.GetJobId(), RankSecret: make([]byte, 16)},
		{Job: "kept", Rank: 0, SessionId: resp.GetSessionId(), JobId: resp.GetJobId(), RankSecret: make([]byte, 16)},
		{Job: "kept", Rank: 1, SessionId: resp.GetSessionId(), JobId: resp.GetJobId(), RankSecret: resps[0].GetRankSecret()},
	} {
		st, err := jobs.Watch(ctx, req)
		if err == nil {
			_, err = st.Recv()
		}
		if err == nil {
			t.Fatalf("watch %v took the job back", req)
		}
	}
	if _, err := jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "kept", Rank: 0, SessionId: resp.GetSessionId(), Name: "b", RankSecret: make([]byte, 16)}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("barrier with a made-up secret: %v, want PermissionDenied", err)
	}
	for r := range uint32(2) {
		st, err := jobs.Watch(ctx, &jobpb.WatchRequest{Job: "kept", Rank: r, SessionId: resp.GetSessionId(), JobId: resp.GetJobId(), RankSecret: resps[r].GetRankSecret()})
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			t.Fatalf("rank %d takes its lease up again: %v", r, err)
		}
	}
	if got := svc.Jobs()["kept"]; got == nil || got.GetPoolBase() != resp.GetPoolBase() || got.GetPoolSize() != resp.GetPoolSize() {
		t.Fatalf("taken-over job %v, want the partition of %v", got, resp)
	}
	done := make(chan error, 2)
	for r := range uint32(2) {
		go func() {
			_, err := jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "kept", Rank: r, SessionId: resp.GetSessionId(), Name: "b", RankSecret: resps[r].GetRankSecret()})
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("barrier after the claim: %v", err)
		}
	}
	r2, err := jobs.Register(ctx, regReq("new", 0, 1, 1, 4, 9))
	if err != nil {
		t.Fatal(err)
	}
	if r2.GetPoolBase() < resp.GetPoolBase()+resp.GetPoolSize() && resp.GetPoolBase() < r2.GetPoolBase()+r2.GetPoolSize() {
		t.Fatalf("new job's slots [%d, +%d) overlap the kept job's [%d, +%d)", r2.GetPoolBase(), r2.GetPoolSize(), resp.GetPoolBase(), resp.GetPoolSize())
	}
	if r2.GetJobId() == resp.GetJobId() {
		t.Fatal("the new job got the kept job's switch id")
	}
}

// TestRestartedControllerEndsWhatNobodyClaims: a job nobody takes back is
// removed after the grace period; a job whose ranks do not all come back is
// aborted, naming the missing rank.
func TestRestartedControllerEndsWhatNobodyClaims(t *testing.T) {
	h := statefulHarness(t)
	ctx := testCtx(t)
	joined(t, h, "orphan", 2)
	_, _, halves := joinedAll(t, h, "half", 2)
	half := halves[0]
	svc, jobs := restarted(t, h, time.Hour)
	st, err := jobs.Watch(ctx, &jobpb.WatchRequest{Job: "half", Rank: 0, SessionId: half.GetSessionId(), JobId: half.GetJobId(), RankSecret: half.GetRankSecret()})
	if err == nil {
		_, err = st.Recv()
	}
	if err != nil {
		t.Fatal(err)
	}
	// The grace ends: the service's timer would tick the core then; the
	// test ticks it past the grace at once, so that no loaded machine can
	// let the grace run out before rank 0's claim.
	svc.step(func(c *jobcore.Core) { c.Tick(time.Now().Add(2 * time.Hour)) })
	if why := abortedWith(t, st); !strings.Contains(why, "rank 1 did not come back") {
		t.Errorf("half-claimed job ended with %q", why)
	}
	<-svc.Drained()
	if ws, err := h.sw.ReadWorkers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workers after the grace period: %v, %v; want none", ws, err)
	}
}

// TestBarrierPassedBeforeTheRestart: a rank that re-sends a barrier its
// peers passed on the controller before the restart is released, since they
// have counted past it; on a job that was never taken over, counts release
// nothing.
func TestBarrierPassedBeforeTheRestart(t *testing.T) {
	h := statefulHarness(t)
	ctx := testCtx(t)
	_, _, resps := joinedAll(t, h, "rounds", 2)
	resp := resps[0]
	_, jobs := restarted(t, h, time.Hour)
	for r := range uint32(2) {
		st, err := jobs.Watch(ctx, &jobpb.WatchRequest{Job: "rounds", Rank: r, SessionId: resp.GetSessionId(), JobId: resp.GetJobId(), RankSecret: resps[r].GetRankSecret()})
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Rank 1 passed barrier 7 ("done-3") before the restart and now waits
	// at barrier 8; rank 0 re-sends barrier 7, whose answer it lost.
	waiting := make(chan error, 1)
	go func() {
		_, err := jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "rounds", Rank: 1, SessionId: resp.GetSessionId(), Name: "iter-4", Seq: 8, RankSecret: resps[1].GetRankSecret()})
		waiting <- err
	}()
	if _, err := jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "rounds", Rank: 0, SessionId: resp.GetSessionId(), Name: "done-3", Seq: 7, RankSecret: resp.GetRankSecret()}); err != nil {
		t.Fatalf("re-sent barrier: %v", err)
	}
	if _, err := jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "rounds", Rank: 0, SessionId: resp.GetSessionId(), Name: "iter-4", Seq: 8, RankSecret: resp.GetRankSecret()}); err != nil {
		t.Fatalf("next barrier: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("rank 1: %v", err)
	}

	// The same calls on a job that was never taken over: barrier 7 waits
	// for rank 1's arrival, counts or not.
	_, _, freshes := joinedAll(t, h, "fresh", 2)
	fresh := freshes[0]
	go func() {
		_, _ = h.jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "fresh", Rank: 1, SessionId: fresh.GetSessionId(), Name: "iter-4", Seq: 8, RankSecret: freshes[1].GetRankSecret()})
	}()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := h.jobs.Barrier(short, &jobpb.BarrierRequest{Job: "fresh", Rank: 0, SessionId: fresh.GetSessionId(), Name: "done-3", Seq: 7, RankSecret: fresh.GetRankSecret()}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("barrier on a job never taken over: %v, want it to wait for rank 1", err)
	}
}

// TestUnwatchedJobEndsAfterTheLeaseGrace: the service's timer ends a job
// whose rank never opens its lease, and its entries leave the switch.
func TestUnwatchedJobEndsAfterTheLeaseGrace(t *testing.T) {
	target, _ := startSwitch(t)
	ctx := testCtx(t)
	sw := dial(t, ctx, target, 1)
	if err := sw.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	svc, err := NewJobService(sw, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: testSlots, Logger: quiet,
		JobLimits: JobLimits{LeaseGrace: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.stop()
	jobs := serveJobs(t, svc)
	if _, err := jobs.Register(ctx, regReq("squat", 0, 1, 2, 4, 3)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ws, err := sw.ReadWorkers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 0 && len(svc.Jobs()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a job whose rank never watched still holds %d worker entries", len(ws))
		}
		time.Sleep(10 * time.Millisecond)
	}
	svc.mu.Lock()
	n := svc.core.Gauges().Ended[jobcore.EndRankLost]
	svc.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d jobs ended as a lost rank, want 1", n)
	}
}
