package controller

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
)

// TestTokenBindsTheJob: while a job exists, registrations under its name
// with another token are refused, whether they would join it while it
// gathers or restart it once it runs; the owner's go through.
func TestTokenBindsTheJob(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	owned := func(rank uint32, token string) *jobpb.RegisterRequest {
		r := regReq("owned", rank, 2, 1, 4, 3)
		r.Token = token
		return r
	}
	first := make(chan error, 1)
	go func() {
		_, err := h.jobs.Register(ctx, owned(0, "secret"))
		first <- err
	}()
	for {
		h.svc.mu.Lock()
		in := h.svc.core.Has("owned")
		h.svc.mu.Unlock()
		if in {
			break
		}
	}
	// Another client takes rank 1 of the gathering job: refused.
	if _, err := h.jobs.Register(ctx, owned(1, "guess")); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "another owner") {
		t.Fatalf("rank 1 with another token: %v, want PermissionDenied", err)
	}
	if _, err := h.jobs.Register(ctx, owned(1, "secret")); err != nil {
		t.Fatalf("rank 1 with the owner's token: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	// Restarting the running job without its token: refused, job intact.
	if _, err := h.jobs.Register(ctx, owned(0, "")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("restart with the empty token: %v, want PermissionDenied", err)
	}
	if h.svc.Jobs()["owned"] == nil {
		t.Fatal("the refused registration ended the job")
	}
}

// TestAddressesOfARunningJobAreRefused: a registration that claims a lane
// address of another running job is refused, and that job runs on. The
// refusal names the holding job only to a caller with its token: to
// anyone else, an open job's included, a job's name is not theirs to know.
func TestAddressesOfARunningJobAreRefused(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	victim := regReq("secret-project-x", 0, 1, 2, 4, 4)
	victim.Token = "victim's token"
	if _, err := h.jobs.Register(ctx, victim); err != nil {
		t.Fatal(err)
	}
	open := regReq("open-project", 0, 1, 2, 4, 6)
	if _, err := h.jobs.Register(ctx, open); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, token, lane, want string
	}{
		{"a stranger", "thief's token", victim.LaneAddresses[1], "is held by another job"},
		{"a caller without a token", "", victim.LaneAddresses[1], "is held by another job"},
		{"a stranger to an open job", "thief's token", open.LaneAddresses[1], "is held by another job"},
		{"the job's owner", victim.Token, victim.LaneAddresses[1], `is held by rank 0 of job "secret-project-x"`},
	} {
		thief := regReq("thief", 0, 1, 2, 4, 5)
		thief.Token, thief.LaneAddresses[1] = c.token, c.lane
		_, err := h.jobs.Register(ctx, thief)
		if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s claims a running job's address: %v, want AlreadyExists saying %q", c.what, err, c.want)
		}
		if c.token != victim.Token && (strings.Contains(err.Error(), "project") || strings.Contains(err.Error(), "rank 0")) {
			t.Errorf("%s claims a running job's address: %v names the job", c.what, err)
		}
	}
	if h.svc.Jobs()["secret-project-x"] == nil || h.svc.Jobs()["open-project"] == nil {
		t.Fatal("a job whose address was claimed ended")
	}
	ws, err := h.sw.ReadWorkers(ctx)
	if err != nil || len(ws) != 4 {
		t.Fatalf("workers %v, %v: want the two jobs' four lanes", ws, err)
	}
}

// TestBarrierNamesDoNotRunOut: a name per barrier, as a loop of
// iterations uses them, never reaches the bound on names in use at once
// (TestCoreLimits checks that bound), since a name whose rounds are over
// is forgotten.
func TestBarrierNamesDoNotRunOut(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	resp, err := h.jobs.Register(ctx, regReq("names", 0, 1, 1, 4, 6))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2*jobcore.MaxRoundsPerJob + 1 {
		_, err := h.jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "names", SessionId: resp.GetSessionId(), Name: fmt.Sprintf("iter-%d", i), RankSecret: resp.GetRankSecret()})
		if err != nil {
			t.Fatalf("barrier %d: %v", i, err)
		}
	}
}
