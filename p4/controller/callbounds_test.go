package controller

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serveBounded serves a job service with limits over an in-memory
// connection, with the bounds the controller serves it with
// (jobServerOptions); it returns the service and the connection.
func serveBounded(t *testing.T, limits JobLimits) (*JobService, *grpc.ClientConn) {
	t.Helper()
	return serveWith(t, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: testSlots, Logger: quiet, JobLimits: limits})
}

// serveWith is serveBounded of a service configured as cfg.
func serveWith(t *testing.T, cfg ServiceConfig) (*JobService, *grpc.ClientConn) {
	t.Helper()
	svc, err := NewJobService(&recorder{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.stop)
	conn := serveConn(t, svc)
	return svc, conn
}

// openWithoutRequest opens a call of method that sends no request, as a
// client that holds calls open for nothing does: the service counts it
// as it arrives and waits for its request. The stream's first receive
// tells whether it was refused.
func openWithoutRequest(t *testing.T, ctx context.Context, conn *grpc.ClientConn, method string) grpc.ClientStream {
	t.Helper()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openCount is how many calls of kind the service counts as open.
func openCount(svc *JobService, kind callKind) int {
	svc.callsMu.Lock()
	defer svc.callsMu.Unlock()
	n := 0
	for k, open := range svc.open {
		if k.kind == kind {
			n += open
		}
	}
	return n
}

// TestLeasesAndQueriesPerClientBounded: a client identity's leases
// (Watch) beyond MaxLeasesPerClient, and its status and Describe calls
// beyond MaxCallsPerClient, are refused as they arrive, naming the flag,
// even when they send no request; each kind has its bound apart, so a
// registration still gets in while both are full.
func TestLeasesAndQueriesPerClientBounded(t *testing.T) {
	svc, conn := serveBounded(t, JobLimits{MaxLeasesPerClient: 2, MaxCallsPerClient: 2, MaxSlotsPerClient: -1})
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	for _, c := range []struct {
		kind          callKind
		method, flag  string
		first, second string
	}{
		{kindLease, jobpb.JobService_Watch_FullMethodName, "MaxLeasesPerClient", jobpb.JobService_Watch_FullMethodName, jobpb.JobService_Watch_FullMethodName},
		{kindQuery, jobpb.JobService_Status_FullMethodName, "MaxCallsPerClient", jobpb.JobService_Status_FullMethodName, jobpb.JobService_Describe_FullMethodName},
	} {
		openWithoutRequest(t, ctx, conn, c.first)
		openWithoutRequest(t, ctx, conn, c.second)
		for openCount(svc, c.kind) < 2 {
			runtime.Gosched()
		}
		err := openWithoutRequest(t, ctx, conn, c.method).RecvMsg(new(jobpb.WatchEvent))
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), c.flag) {
			t.Fatalf("a third %s with two open: %v, want ResourceExhausted naming %s", c.method, err, c.flag)
		}
	}
	// The registration waits for its job's other rank: it got in.
	rctx, stopRegister := context.WithCancel(ctx)
	errs := make(chan error, 1)
	go func() {
		_, err := jobpb.NewJobServiceClient(conn).Register(rctx, regReq("apart", 0, 2, 1, 4, 1))
		errs <- err
	}()
	for openCount(svc, kindCall) < 1 {
		select {
		case err := <-errs:
			t.Fatalf("a registration while leases and status calls are at their bounds: %v", err)
		default:
			runtime.Gosched()
		}
	}
	stopRegister()
	if err := <-errs; status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled registration: %v", err)
	}
}

// TestCallHeadersBounded: a call whose headers decode into more than
// maxHeaderListBytes never reaches the service (the service advertises
// the bound, which gRPC clients keep; the controller's test of the real
// binary sends past it), while a call with the headers our clients send,
// and some kilobytes more, is answered.
func TestCallHeadersBounded(t *testing.T) {
	_, conn := serveBounded(t, JobLimits{})
	jobs := jobpb.NewJobServiceClient(conn)
	ctx := testCtx(t)
	pad := func(n int) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("p", n))
	}
	if _, err := jobs.Describe(pad(4<<10), &jobpb.DescribeRequest{}); err != nil {
		t.Fatalf("Describe with 4 KiB of extra headers: %v", err)
	}
	if _, err := jobs.Describe(pad(maxHeaderListBytes), &jobpb.DescribeRequest{}); err == nil {
		t.Fatalf("Describe with %d bytes of headers answered, want it refused", maxHeaderListBytes)
	}
}

// TestConnsPerHostBounded: the job service's listener keeps at most
// MaxConnsPerHost connections open from one IP address, closing the next
// as it is accepted; another host's connection is taken meanwhile, and a
// connection that ends makes room.
func TestConnsPerHostBounded(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := newHostConns(raw, 2, quiet)
	defer lis.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dialFrom := func(host string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(host)}}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for range 2 {
		dialFrom("127.0.0.2")
		held = append(held, <-accepted)
	}
	// The third from that host is closed before anything is read of it.
	c := dialFrom("127.0.0.2")
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case <-accepted:
		t.Fatal("a third connection from one host accepted, want it closed")
	case err := <-read:
		if err == nil {
			t.Fatal("a third connection from one host read a byte, want it closed")
		}
	}
	dialFrom("127.0.0.3")
	other := <-accepted
	if got := other.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.3" {
		t.Fatalf("accepted a connection from %s, want the other host's", got)
	}
	held[0].Close()
	dialFrom("127.0.0.2")
	if again := <-accepted; again.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.2" {
		t.Fatalf("accepted %v once a connection ended, want the first host's", again.RemoteAddr())
	}
}

// TestRefusalsNameSettingsAsTheOperatorDoes: the settings a refusal names,
// the core's as the service's, reach the caller as ServiceConfig.Names
// writes them (the CLI: its flags), with the refusal's code; without
// Names, by their Go names.
func TestRefusalsNameSettingsAsTheOperatorDoes(t *testing.T) {
	ctx := testCtx(t)
	for _, c := range []struct {
		names      func(string) string
		open, busy string
	}{
		{nil, "start the controller with AllowOpenJobs", "(the controller's MaxCallsPerClient)"},
		{func(f string) string { return "<" + f + ">" }, "start the controller with <AllowOpenJobs>", "(the controller's <MaxCallsPerClient>)"},
	} {
		svc, conn := serveWith(t, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: testSlots, Logger: quiet,
			RefuseOpenJobs: true, JobLimits: JobLimits{MaxCallsPerClient: 1}, Names: c.names})
		jobs := jobpb.NewJobServiceClient(conn)
		// The core's refusal: an open job.
		_, err := jobs.Register(ctx, regReq("open", 0, 1, 1, 8, 0))
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), c.open) || strings.Contains(err.Error(), "{") {
			t.Errorf("an open job: %v; want PermissionDenied saying %q", err, c.open)
		}
		// The service's: a second call open of a client allowed one.
		held, cancel := context.WithCancel(ctx)
		s := openWithoutRequest(t, held, conn, jobpb.JobService_Barrier_FullMethodName)
		for openCount(svc, kindCall) != 1 {
			runtime.Gosched()
		}
		_, err = jobs.Leave(ctx, &jobpb.LeaveRequest{})
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), c.busy) {
			t.Errorf("a call beyond the client's one: %v; want ResourceExhausted saying %q", err, c.busy)
		}
		cancel()
		_ = s.RecvMsg(new(jobpb.BarrierResponse))
	}
}
