package controller

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestServiceDefaultBounds: with no limits set, a job of more ranks than
// the software switch's default --max-workers is refused, naming the cap
// and where it comes from; and one client may take half the pool, not
// all of it, unless --max-slots-per-client says otherwise.
func TestServiceDefaultBounds(t *testing.T) {
	serve := func(limits JobLimits, target Target) jobpb.JobServiceClient {
		svc, err := NewJobService(&recorder{}, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: 64, Logger: quiet,
			Target: target, JobLimits: limits})
		if err != nil {
			t.Fatal(err)
		}
		return serveJobs(t, svc)
	}
	ctx := testCtx(t)
	jobs := serve(JobLimits{}, Target{})
	huge := regReq("huge", 0, 65535, 1, 4, 1)
	huge.Format = jobpb.Format_FORMAT_EXTENDED
	_, err := jobs.Register(ctx, huge)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 256 workers per job") || !strings.Contains(err.Error(), "MaxWorkers") {
		t.Fatalf("a job of 65535 ranks: %v, want InvalidArgument naming 256 and MaxWorkers", err)
	}
	target, err := TargetFor(KindSoftswitch, 0)
	if err != nil {
		t.Fatal(err)
	}
	target.SoftswitchMaxWorkers = 1000
	_, err = serve(JobLimits{}, target).Register(ctx, huge)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 1000 workers per job (the switch's MaxWorkers, as the controller's MaxWorkers gives it)") {
		t.Fatalf("a job of 65535 ranks on a switch of 1000: %v", err)
	}

	// Half the pool: 32 slots of 64.
	_, err = jobs.Register(ctx, regReq("whole", 0, 2, 2, 32, 2))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "over the limit of 32 per client (the controller's MaxSlotsPerClient)") {
		t.Fatalf("one client's job of the whole pool: %v, want ResourceExhausted naming the quota", err)
	}
	registerBoth := func(jobs jobpb.JobServiceClient, name string, window uint32) {
		t.Helper()
		errs := make(chan error, 2)
		for rank := range uint32(2) {
			go func() {
				short, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err := jobs.Register(short, regReq(name, rank, 2, 2, window, 3))
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("job %s of %d slots: %v", name, 2*window, err)
			}
		}
	}
	registerBoth(jobs, "half", 16)
	registerBoth(serve(JobLimits{MaxSlotsPerClient: -1}, Target{}), "whole", 32)
}

// TestCallsPerClientBounded: a client identity's calls beyond
// MaxCallsPerClient are refused as they arrive, naming the flag, while
// its status and leases are not counted; a call that ends makes room.
func TestCallsPerClientBounded(t *testing.T) {
	target, _ := startSwitch(t)
	ctx := testCtx(t)
	c := dial(t, ctx, target, 1)
	if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	limits := harnessLimits
	limits.MaxCallsPerClient = 3
	svc, err := NewJobService(c, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: testSlots, Logger: quiet, JobLimits: limits})
	if err != nil {
		t.Fatal(err)
	}
	jobs := serveJobs(t, svc)
	open := func() int {
		svc.callsMu.Lock()
		defer svc.callsMu.Unlock()
		n := 0
		for _, k := range svc.open {
			n += k
		}
		return n
	}
	// Three registrations wait for their jobs' other ranks.
	cancels := make([]context.CancelFunc, 3)
	errs := make(chan error, 3)
	for i := range cancels {
		rctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		go func() {
			_, err := jobs.Register(rctx, regReq(fmt.Sprintf("wait-%d", i), 0, 2, 1, 4, byte(10+i)))
			errs <- err
		}()
	}
	for open() < 3 {
		runtime.Gosched()
	}
	_, err = jobs.Register(ctx, regReq("one-too-many", 0, 2, 1, 4, 20))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "MaxCallsPerClient") {
		t.Fatalf("a fourth call: %v, want ResourceExhausted naming MaxCallsPerClient", err)
	}
	if _, err := jobs.Status(ctx, &jobpb.StatusRequest{SkipSwitchCounters: true}); err != nil {
		t.Fatalf("status at the limit: %v", err)
	}
	cancels[0]()
	if err := <-errs; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled registration: %v", err)
	}
	for open() > 2 {
		runtime.Gosched()
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, err := jobs.Register(rctx, regReq("room-again", 0, 2, 1, 4, 21))
		errs <- err
	}()
	for open() < 3 {
		select {
		case err := <-errs:
			t.Fatalf("a call once another ended: %v", err)
		default:
			runtime.Gosched()
		}
	}
	for _, c := range cancels[1:] {
		c()
	}
}
