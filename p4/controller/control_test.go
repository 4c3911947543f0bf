package controller

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/softswitch/softswitchtest"
	"github.com/switchml/switchml-go/secure"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// syncBuffer is a log sink tests can search while the controller writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// eventually polls cond until it holds or a minute passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// takeoverFixture is a software switch over mutual TLS, a controller
// daemon programming it, and a second controller certificate.
type takeoverFixture struct {
	pki    *secure.PKI
	target string
	jobs   jobpb.JobServiceClient
	reg    *prometheus.Registry
	logs   *syncBuffer
}

// tlsSwitch serves a software switch's P4Runtime over mutual TLS with
// pki's certificates on loopback, and returns its address.
func tlsSwitch(t *testing.T, pki *secure.PKI, parent netip.AddrPort) string {
	t.Helper()
	swCert, swKey, err := pki.Issue("switch", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := secure.Server(swCert, swKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := softswitchtest.Serve(t, softswitch.ServerConfig{DeviceID: 1, TLS: serverTLS, Logger: quiet, Parent: parent,
		Pipeline: pipeline.Config{Slots: testSlots, MaxElements: 64, MaxWorkers: 32}})
	return addr
}

func startTakeover(t *testing.T, ctx context.Context, yield bool) *takeoverFixture {
	t.Helper()
	pki, err := secure.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	f := &takeoverFixture{pki: pki, target: tlsSwitch(t, pki, netip.AddrPort{})}
	f.run(t, ctx, Config{Target: f.target, YieldPrimary: yield})
	return f
}

// run starts the controller daemon with cfg, as the controller
// certificate, and connects to its job service.
func (f *takeoverFixture) run(t *testing.T, ctx context.Context, cfg Config) {
	t.Helper()
	ctlCert, ctlKey, err := f.pki.Issue("controller")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TargetTLS, err = secure.Client(f.pki.CA, ctlCert, ctlKey)
	if err != nil {
		t.Fatal(err)
	}
	f.reg, f.logs = prometheus.NewRegistry(), &syncBuffer{}
	cfg.Listen, cfg.Slots, cfg.Metrics, cfg.Logger = "127.0.0.1:0", testSlots, f.reg, slog.New(slog.NewTextHandler(f.logs, nil))
	rctx, rcancel := context.WithCancel(ctx)
	addr := make(chan net.Addr, 1)
	cfg.Ready = func(a net.Addr) { addr <- a }
	done := make(chan error, 1)
	go func() { done <- Run(rctx, cfg) }()
	t.Cleanup(func() {
		rcancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var a net.Addr
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	conn, err := grpc.NewClient(a.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.jobs = jobpb.NewJobServiceClient(conn)
}

// intrude connects as a second allowed controller (certificate ctl2, role
// controller) and arbitrates with election id 100; it returns the stream
// once the switch made it primary.
func (f *takeoverFixture) intrude(t *testing.T, ctx context.Context, target string) p4v1.P4Runtime_StreamChannelClient {
	t.Helper()
	cert, key, err := f.pki.IssueRole("ctl2", secure.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := secure.Client(f.pki.CA, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := p4v1.NewP4RuntimeClient(conn).StreamChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
		DeviceId: 1, ElectionId: &p4v1.Uint128{Low: 100}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.GetArbitration().GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("the second controller did not become primary: %v", m)
	}
	return st
}

const ctl2 = "cert:ctl2 (role controller)"

// TestControllerTakesPrimaryshipBack: another allowed controller takes
// primaryship with a higher election id; the controller logs who took it,
// counts the loss, takes primaryship back with an election id above it,
// and jobs are programmed again.
func TestControllerTakesPrimaryshipBack(t *testing.T) {
	ctx := testCtx(t)
	f := startTakeover(t, ctx, false)
	st := f.intrude(t, ctx, f.target)
	// The intruder is told the controller is primary again, above it.
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("intruder's stream: %v", err)
		}
		a := m.GetArbitration()
		if a.GetStatus().GetCode() != int32(codes.OK) {
			if want := "backup: cert:controller (role controller) is primary with election id 101"; a.GetStatus().GetMessage() != want {
				t.Errorf("the intruder was told %q, want %q", a.GetStatus().GetMessage(), want)
			}
			break
		}
	}
	st.CloseSend()
	eventually(t, "the controller logging it is primary again", func() bool {
		return strings.Contains(f.logs.String(), "primary on the switch again")
	})
	logs := f.logs.String()
	for _, want := range []string{"lost primaryship of the switch", ctl2, "taking primaryship back", "election_id=101"} {
		if !strings.Contains(logs, want) {
			t.Errorf("controller log lacks %q:\n%s", want, logs)
		}
	}
	if n := testutil.ToFloat64(metricOf(t, f.reg, "switchml_controller_primary_lost_total")); n != 1 {
		t.Errorf("primaryship losses = %v, want 1", n)
	}
	eventually(t, "the primary gauge back at 1", func() bool {
		return testutil.ToFloat64(metricOf(t, f.reg, "switchml_controller_primary")) == 1
	})
	resp, err := f.jobs.Register(ctx, regReq("after", 0, 1, 1, 4, 0))
	if err != nil {
		t.Fatalf("a job after the controller took primaryship back: %v", err)
	}
	if resp.GetPoolSize() != 4 {
		t.Errorf("registration answer %v", resp)
	}
	s, err := f.jobs.Status(ctx, &jobpb.StatusRequest{SkipSwitchCounters: true})
	if err != nil || s.GetControlLost() != "" {
		t.Errorf("Status control_lost %q (%v), want empty once primary again", s.GetControlLost(), err)
	}
}

// TestControllerYieldsPrimaryship: with YieldPrimary the controller stays
// backup when another controller takes over; Status and the gauge say so,
// naming who, and jobs fail with that cause.
func TestControllerYieldsPrimaryship(t *testing.T) {
	ctx := testCtx(t)
	f := startTakeover(t, ctx, true)
	if g := testutil.ToFloat64(metricOf(t, f.reg, "switchml_controller_primary")); g != 1 {
		t.Fatalf("primary gauge %v before the takeover, want 1", g)
	}
	st := f.intrude(t, ctx, f.target)
	defer st.CloseSend()
	var lost string
	eventually(t, "Status reporting the lost control", func() bool {
		s, err := f.jobs.Status(ctx, &jobpb.StatusRequest{SkipSwitchCounters: true})
		lost = s.GetControlLost()
		return err == nil && lost != ""
	})
	if !strings.Contains(lost, "not primary on the switch") || !strings.Contains(lost, ctl2+" took it at") {
		t.Errorf("control_lost %q does not say who took primaryship", lost)
	}
	if g := testutil.ToFloat64(metricOf(t, f.reg, "switchml_controller_primary")); g != 0 {
		t.Errorf("primary gauge %v after yielding, want 0", g)
	}
	_, err := f.jobs.Register(ctx, regReq("yielded", 0, 1, 1, 4, 0))
	if err == nil || !strings.Contains(err.Error(), "the controller is not primary on the switch") || !strings.Contains(err.Error(), ctl2) ||
		strings.Contains(err.Error(), "reset pool") {
		t.Errorf("a job while another controller is primary: %v, want a failure naming %s", err, ctl2)
	}
	if strings.Contains(f.logs.String(), "taking primaryship back") {
		t.Errorf("a yielding controller took primaryship back:\n%s", f.logs.String())
	}
}

// metricOf finds the collector of a metric registered with reg.
func metricOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "copy"})
			g.Set(v)
			return g
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

// TestTreeOverTLSTakesLeafBack: the controller programs a spine and two
// leaves over mutual TLS as the controller identity; another controller
// takes a leaf, the controller takes it back, and a job across both
// leaves is programmed.
func TestTreeOverTLSTakesLeafBack(t *testing.T) {
	ctx := testCtx(t)
	pki, err := secure.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	spineDP := netip.MustParseAddrPort("127.0.0.1:48990")
	f := &takeoverFixture{pki: pki}
	spine := tlsSwitch(t, pki, netip.AddrPort{})
	leaves := []string{tlsSwitch(t, pki, spineDP), tlsSwitch(t, pki, spineDP)}
	topo, err := ParseTopology(strings.NewReader(fmt.Sprintf(`{"spine": {"p4runtime": %q, "dataplane": %q},
		"leaves": [{"p4runtime": %q, "dataplane": "127.0.1.254:48991", "workers": ["127.0.1.0/24"]},
		           {"p4runtime": %q, "dataplane": "127.0.2.254:48992", "workers": ["127.0.2.0/24"]}]}`,
		spine, spineDP, leaves[0], leaves[1])))
	if err != nil {
		t.Fatal(err)
	}
	f.run(t, ctx, Config{Topology: topo})
	st := f.intrude(t, ctx, leaves[1])
	defer st.CloseSend()
	eventually(t, "the controller taking leaf1 back", func() bool {
		return strings.Contains(f.logs.String(), "primary on the switch again")
	})
	if logs := f.logs.String(); !strings.Contains(logs, "target="+leaves[1]) || !strings.Contains(logs, ctl2) {
		t.Errorf("the controller's log does not name the leaf and who took it:\n%s", logs)
	}
	_, errs := registerBoth(ctx, f.jobs, regReq("tree", 0, 2, 1, 4, 1), regReq("tree", 1, 2, 1, 4, 2))
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d of a job across the leaves: %v", r, err)
		}
	}
}

// registerBoth registers the requests concurrently.
func registerBoth(ctx context.Context, jobs jobpb.JobServiceClient, reqs ...*jobpb.RegisterRequest) ([]*jobpb.RegisterResponse, []error) {
	resps := make([]*jobpb.RegisterResponse, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { resps[i], errs[i] = jobs.Register(ctx, r) })
	}
	wg.Wait()
	return resps, errs
}
