package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
)

// TestHostileLaneAddresses: a client registering a lane address that would
// aim the switch's results at the switch itself, at a group, at every host
// or at a host not its own is refused with InvalidArgument naming the
// address and why, and takes no slots; a victim job on the same switch
// finishes, verified.
func TestHostileLaneAddresses(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	victim := make([]*proc, 2)
	for r := range victim {
		victim[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "victim", "--rank", fmt.Sprint(r),
			"--workers", "2", "--elements", "20000", "--iters", "1500", "--json")
	}
	waitRunning(t, f.ctl, "victim", 1)
	jobs := jobClient(t, f.controller, "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct{ lane, why string }{
		{f.dataplane, "is the switch's own data-plane address"},
		{"239.1.2.3:30000", "a multicast address"},
		{"255.255.255.255:30000", "the broadcast address"},
		{"0.0.0.0:30000", "an unspecified address"},
		{"127.0.0.1:0", "port 0"},
		// TEST-NET-1: a host that is not the caller's (nothing is sent).
		{"192.0.2.1:30000", "is not on the caller's host 127.0.0.1"},
	} {
		req := &jobpb.RegisterRequest{Job: "reflect", Rank: 0, WorldSize: 1, Lanes: 1, Window: 4, Elements: 64,
			LaneAddresses: []string{c.lane}, Token: "attacker"}
		_, err := jobs.Register(ctx, req, grpc.WaitForReady(true))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.lane) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("registering lane address %s: %v, want InvalidArgument naming it and saying %q", c.lane, err, c.why)
		}
	}
	if st, _ := jobState(t, jobs, "reflect"); st != "" {
		t.Errorf("the refused job is listed as %q, want it gone", st)
	}
	verifiedReports(t, victim)
}
