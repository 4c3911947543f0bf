package softswitch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/secure"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// tlsSwitch is a software switch serving P4Runtime over mutual TLS on
// loopback, with a PKI to issue its callers' certificates.
type tlsSwitch struct {
	t    *testing.T
	pki  *secure.PKI
	addr string
}

func newTLSSwitch(t *testing.T, allow ...string) *tlsSwitch {
	t.Helper()
	pki, err := secure.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.Issue("switch", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := secure.Server(cert, key, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{DeviceID: testDevice, Pipeline: pipeline.Config{Slots: 64, MaxElements: 64, MaxWorkers: 32},
		TLS: tlsCfg, Allow: allow, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeP4Runtime(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeP4Runtime: %v", err)
		}
	})
	return &tlsSwitch{t: t, pki: pki, addr: lis.Addr().String()}
}

// client connects with a certificate named name carrying role ("" for
// none).
func (s *tlsSwitch) client(name, role string) p4v1.P4RuntimeClient {
	s.t.Helper()
	cert, key, err := s.pki.IssueRole(name, role)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg, err := secure.Client(s.pki.CA, cert, key)
	if err != nil {
		s.t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return p4v1.NewP4RuntimeClient(conn)
}

// arbitrateAs opens a stream and sends one arbitration update; it returns
// the stream and the switch's first answer (or the error ending the stream).
func arbitrateAs(ctx context.Context, c p4v1.P4RuntimeClient, role string, election *p4v1.Uint128) (p4v1.P4Runtime_StreamChannelClient, *p4v1.MasterArbitrationUpdate, error) {
	st, err := c.StreamChannel(ctx)
	if err != nil {
		return nil, nil, err
	}
	arb := &p4v1.MasterArbitrationUpdate{DeviceId: testDevice, ElectionId: election}
	if role != "" {
		arb.Role = &p4v1.Role{Name: role}
	}
	if err := st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: arb}}); err != nil && !errors.Is(err, io.EOF) {
		return st, nil, err
	}
	m, err := st.Recv()
	if err != nil {
		return st, nil, err
	}
	return st, m.GetArbitration(), nil
}

func readAll(ctx context.Context, c p4v1.P4RuntimeClient, role string) ([]*p4v1.Entity, error) {
	rc, err := c.Read(ctx, &p4v1.ReadRequest{DeviceId: testDevice, Role: role, Entities: []*p4v1.Entity{
		{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: p4info.TableWorkersID}}}}})
	if err != nil {
		return nil, err
	}
	var out []*p4v1.Entity
	for {
		r, err := rc.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r.GetEntities()...)
	}
}

func pushPipeline(ctx context.Context, c p4v1.P4RuntimeClient, role string, election *p4v1.Uint128) error {
	info, err := p4info.Load()
	if err != nil {
		return err
	}
	_, err = c.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
		DeviceId: testDevice, Role: role, ElectionId: election,
		Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
		Config: &p4v1.ForwardingPipelineConfig{P4Info: info},
	})
	return err
}

// wantDenied checks that err is PERMISSION_DENIED naming who.
func wantDenied(t *testing.T, what string, err error, who string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), who) || !strings.Contains(err.Error(), "role controller") {
		t.Errorf("%s: error %v, want PermissionDenied naming %q and who is allowed", what, err, who)
	}
}

// TestP4RuntimeRefusesWorkerCertificate: a caller with a worker
// certificate the switch's CA signed can neither arbitrate (any role, any
// election id), nor Read, Write, or set or get the pipeline; the
// controller stays primary and its table stays as it wrote it.
func TestP4RuntimeRefusesWorkerCertificate(t *testing.T) {
	ctx := ctxT(t)
	sw := newTLSSwitch(t)
	ctl := sw.client("controller", secure.RoleController)
	one := &p4v1.Uint128{Low: 1}
	ctlStream, upd, err := arbitrateAs(ctx, ctl, "", one)
	if err != nil || upd.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("controller arbitration: %v %v, want primary", upd, err)
	}
	if err := pushPipeline(ctx, ctl, "", one); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Write(ctx, &p4v1.WriteRequest{DeviceId: testDevice, ElectionId: one,
		Updates: []*p4v1.Update{workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 1}, 5000, 0)}}); err != nil {
		t.Fatal(err)
	}

	worker := sw.client("worker", secure.RoleWorker)
	const who = "cert:worker (role worker)"
	for _, role := range []string{"", "fresh-role"} {
		for _, e := range []*p4v1.Uint128{{Low: 1}, {Low: 100}, {Low: math.MaxUint64}, {High: math.MaxUint64, Low: math.MaxUint64}} {
			_, upd, err := arbitrateAs(ctx, worker, role, e)
			if upd != nil {
				t.Errorf("role %q election %s: the switch answered a worker's arbitration: %v", role, fmt128(e), upd)
			}
			wantDenied(t, "arbitration role "+role+" election "+fmt128(e), err, who)
		}
		_, err := readAll(ctx, worker, role)
		wantDenied(t, "Read", err, who)
		_, err = worker.Write(ctx, &p4v1.WriteRequest{DeviceId: testDevice, Role: role, ElectionId: &p4v1.Uint128{Low: 100},
			Updates: []*p4v1.Update{workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 9}, 6000, 0)}})
		wantDenied(t, "Write", err, who)
		wantDenied(t, "SetForwardingPipelineConfig", pushPipeline(ctx, worker, role, &p4v1.Uint128{Low: 100}), who)
	}
	_, err = worker.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: testDevice})
	wantDenied(t, "GetForwardingPipelineConfig", err, who)
	if _, err := worker.Capabilities(ctx, &p4v1.CapabilitiesRequest{}); err != nil {
		t.Errorf("Capabilities for a verified worker: %v", err)
	}

	// The controller is still the primary: its writes go through, and its
	// table holds its one entry only.
	if _, err := ctl.Write(ctx, &p4v1.WriteRequest{DeviceId: testDevice, ElectionId: one,
		Updates: []*p4v1.Update{workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 2}, 5000, 1)}}); err != nil {
		t.Fatalf("the controller lost its primaryship to a worker: %v", err)
	}
	ents, err := readAll(ctx, ctl, "")
	if err != nil || len(ents) != 2 {
		t.Fatalf("controller reads %d worker entries (%v), want its 2", len(ents), err)
	}
	ctlStream.CloseSend()
}

// TestP4RuntimeAcceptsControllers: a certificate with the controller role
// and one named by the allow list may arbitrate, push, write and read; a
// backup is told who the primary is.
func TestP4RuntimeAcceptsControllers(t *testing.T) {
	ctx := ctxT(t)
	sw := newTLSSwitch(t, "ops.example")
	ctl := sw.client("controller", secure.RoleController)
	st1, upd, err := arbitrateAs(ctx, ctl, "", &p4v1.Uint128{Low: 1})
	if err != nil || upd.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("controller arbitration: %v %v, want primary", upd, err)
	}
	if err := pushPipeline(ctx, ctl, "", &p4v1.Uint128{Low: 1}); err != nil {
		t.Fatalf("controller push: %v", err)
	}

	// A certificate without a role, allowed by name.
	ops := sw.client("ops.example", "")
	e := &p4v1.Uint128{Low: 100}
	_, upd, err = arbitrateAs(ctx, ops, "", e)
	if err != nil || upd.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("allowed name's arbitration: %v %v, want primary", upd, err)
	}
	if _, err := ops.Write(ctx, &p4v1.WriteRequest{DeviceId: testDevice, ElectionId: e,
		Updates: []*p4v1.Update{workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 1}, 5000, 0)}}); err != nil {
		t.Fatalf("allowed name's write: %v", err)
	}
	if ents, err := readAll(ctx, ops, ""); err != nil || len(ents) != 1 {
		t.Fatalf("allowed name reads %d entries (%v), want 1", len(ents), err)
	}
	// The first controller learns who took primaryship.
	m, err := st1.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := "backup: cert:ops.example is primary with election id 100"
	if a := m.GetArbitration(); a.GetStatus().GetCode() == int32(codes.OK) || a.GetStatus().GetMessage() != want || a.GetElectionId().GetLow() != 100 {
		t.Errorf("the old primary was told %v, want %q with election id 100", a, want)
	}

	// A certificate with neither is refused.
	other := sw.client("someone", "")
	if _, _, err := arbitrateAs(ctx, other, "", &p4v1.Uint128{Low: 200}); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "cert:someone") || !strings.Contains(err.Error(), "name ops.example") {
		t.Errorf("unlisted certificate's arbitration: %v, want PermissionDenied naming it and the allow list", err)
	}
}

// TestP4RuntimeRoleConfigRefused: a role config the switch cannot honour
// ends the stream with INVALID_ARGUMENT saying so.
func TestP4RuntimeRoleConfigRefused(t *testing.T) {
	ctx := ctxT(t)
	sw := newTLSSwitch(t)
	ctl := sw.client("controller", secure.RoleController)
	st, err := ctl.StreamChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := anypb.New(&p4v1.Uint128{Low: 1})
	if err := st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
		DeviceId: testDevice, ElectionId: &p4v1.Uint128{Low: 1}, Role: &p4v1.Role{Name: "scoped", Config: cfg}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cannot honour role configs") {
		t.Errorf("role config: %v, want InvalidArgument saying the switch cannot honour it", err)
	}
}

// TestP4RuntimeRefusesOtherRoles: a controller certificate arbitrating
// for a role other than the default one is refused with
// PERMISSION_DENIED naming the role, at any election id, and cannot
// write beside the default role's primary, which stays primary.
func TestP4RuntimeRefusesOtherRoles(t *testing.T) {
	ctx := ctxT(t)
	sw := newTLSSwitch(t)
	ctl := sw.client("controller", secure.RoleController)
	one := &p4v1.Uint128{Low: 1}
	if _, upd, err := arbitrateAs(ctx, ctl, "", one); err != nil || upd.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("controller arbitration: %v %v, want primary", upd, err)
	}
	shadow := sw.client("shadow", secure.RoleController)
	for _, e := range []*p4v1.Uint128{{Low: 1}, {Low: math.MaxUint64}} {
		_, upd, err := arbitrateAs(ctx, shadow, "shadow", e)
		if upd != nil || status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `role "shadow"`) {
			t.Errorf("role shadow election %s: %v, %v; want PermissionDenied naming the role", fmt128(e), upd, err)
		}
	}
	_, err := shadow.Write(ctx, &p4v1.WriteRequest{DeviceId: testDevice, Role: "shadow", ElectionId: &p4v1.Uint128{Low: 100},
		Updates: []*p4v1.Update{workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 9}, 6000, 0)}})
	if status.Code(err) == codes.OK {
		t.Error("a write for role shadow went through")
	}
	if err := pushPipeline(ctx, ctl, "", one); err != nil {
		t.Fatalf("the default role's primary: %v", err)
	}
}

// TestP4RuntimeAllowNeedsClientCA: an allow list on a switch that checks
// no client certificates is a configuration error, not a silent no-op.
func TestP4RuntimeAllowNeedsClientCA(t *testing.T) {
	_, err := NewServer(ServerConfig{Pipeline: pipeline.Config{Slots: 8, MaxElements: 64, MaxWorkers: 2}, Allow: []string{"ops"}})
	if err == nil || !strings.Contains(err.Error(), "TLS with client CAs") {
		t.Errorf("NewServer with an allow list and no TLS: %v, want an error asking for TLS with client CAs", err)
	}
}

// syncBuf is a log sink read while the server writes.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestP4RuntimeWarnsWhenOpen: a P4Runtime port without client
// certificates warns that anyone may program the switch when it listens
// beyond loopback, and stays quiet on loopback.
func TestP4RuntimeWarnsWhenOpen(t *testing.T) {
	for _, c := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {"0.0.0.0:0", true}} {
		logs := &syncBuf{}
		srv, err := NewServer(ServerConfig{DeviceID: testDevice, Pipeline: pipeline.Config{Slots: 8, MaxElements: 64, MaxWorkers: 2},
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctxT(t))
		done := make(chan error, 1)
		go func() { done <- srv.ServeP4Runtime(ctx, lis) }()
		// Once a call is answered, the server has said what it says at start.
		_, port, _ := net.SplitHostPort(lis.Addr().String())
		conn, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p4v1.NewP4RuntimeClient(conn).Capabilities(ctx, &p4v1.CapabilitiesRequest{}); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "whoever reaches it can program the switch"); got != c.warn {
			t.Errorf("listening on %s: warned %v, want %v; log:\n%s", c.addr, got, c.warn, logs.String())
		}
	}
}
