package controller

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
)

// serveJobsTCP serves svc on a TCP listener on loopback, so that calls
// carry the caller's address, and returns a client.
func serveJobsTCP(t *testing.T, svc *JobService) jobpb.JobServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	jobpb.RegisterJobServiceServer(g, svc)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return jobpb.NewJobServiceClient(conn)
}

// TestServiceChecksLaneAddressesAgainstTheCaller: the job service hands
// the core the caller's address from the connection: a loopback caller
// registering a lane on another host is refused, unless the service allows
// mismatches (NAT); the switch's own address is refused either way.
func TestServiceChecksLaneAddressesAgainstTheCaller(t *testing.T) {
	dp := netip.MustParseAddrPort("127.0.0.1:48864")
	for _, allow := range []bool{false, true} {
		svc, err := NewJobService(&recorder{}, ServiceConfig{Dataplane: dp, Slots: 64, Logger: quiet, JobLimits: harnessLimits,
			AllowLaneAddressMismatch: allow})
		if err != nil {
			t.Fatal(err)
		}
		jobs := serveJobsTCP(t, svc)
		ctx := testCtx(t)
		register := func(job, lane string) error {
			_, err := jobs.Register(ctx, &jobpb.RegisterRequest{Job: job, Rank: 0, WorldSize: 1, Lanes: 1, Window: 4, Elements: 64,
				LaneAddresses: []string{lane}}, grpc.WaitForReady(true))
			return err
		}
		// TEST-NET-1: not the caller's host (nothing is sent there).
		err = register("elsewhere", "192.0.2.1:30000")
		switch {
		case allow && err != nil:
			t.Errorf("with mismatches allowed, a lane on another host: %v, want it registered", err)
		case !allow && (status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "192.0.2.1:30000 is not on the caller's host 127.0.0.1")):
			t.Errorf("a lane on another host: %v, want InvalidArgument naming it and the caller", err)
		}
		if err := register("own", "127.0.0.1:30001"); err != nil {
			t.Errorf("allow mismatch %v: a loopback caller's loopback lane: %v", allow, err)
		}
		if err := register("self", dp.String()); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the switch's own data-plane address") {
			t.Errorf("allow mismatch %v: the switch's own address: %v, want InvalidArgument", allow, err)
		}
	}
}
