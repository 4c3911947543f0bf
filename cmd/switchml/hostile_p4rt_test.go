package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/secure"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// mtlsFabric is the README's mutual-TLS setup: `switchml certs`'s
// certificates, a switch that takes controllers signed by the CA, and a
// controller serving workers that present the worker certificate.
type mtlsFabric struct {
	switchSide
	pki        *secure.PKI
	workerArgs []string // the allreduce flags of a worker with worker.pem
}

func startMTLS(t *testing.T) *mtlsFabric {
	t.Helper()
	pki, err := secure.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	swCert, swKey, _ := pki.Issue("switch", "127.0.0.1")
	ctlCert, ctlKey, _ := pki.Issue("controller", "127.0.0.1")
	wCert, wKey, err := pki.Issue("worker")
	if err != nil {
		t.Fatal(err)
	}
	dp, _ := harness.FreePort("udp")
	p4, _ := harness.FreePort("tcp")
	ctl, _ := harness.FreePort("tcp")
	f := &mtlsFabric{pki: pki, workerArgs: []string{"--tls-ca", pki.CA, "--tls-cert", wCert, "--tls-key", wKey}}
	f.switchSide = switchSide{dataplane: fmt.Sprintf("127.0.0.1:%d", dp), p4rt: fmt.Sprintf("127.0.0.1:%d", p4), controller: fmt.Sprintf("127.0.0.1:%d", ctl)}
	f.sw = spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt, "--tls-cert", swCert, "--tls-key", swKey, "--tls-client-ca", pki.CA)
	f.ctl = spawn(t, nil, "controller", "--target", f.p4rt, "--listen", f.controller, "--dataplane", f.dataplane,
		"--target-tls-ca", pki.CA, "--target-tls-cert", ctlCert, "--target-tls-key", ctlKey,
		"--tls-cert", ctlCert, "--tls-key", ctlKey, "--tls-client-ca", pki.CA)
	waitLog(t, f.ctl, "controller: serving")
	return f
}

// waitLog waits up to two minutes for p to log want.
func waitLog(t *testing.T, p *proc, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(p.Logs(), want) {
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("%s never logged %q:\n%s", p.Name(), want, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// p4rtAs connects to the switch's P4Runtime port with the certificate
// file name (name.pem and name-key.pem in the PKI's directory).
func (f *mtlsFabric) p4rtAs(t *testing.T, name string) p4v1.P4RuntimeClient {
	t.Helper()
	cfg, err := secure.Client(f.pki.CA, filepath.Join(f.pki.Dir, name+".pem"), filepath.Join(f.pki.Dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(f.p4rt, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p4v1.NewP4RuntimeClient(conn)
}

func arbitration(role string, election *p4v1.Uint128) *p4v1.StreamMessageRequest {
	arb := &p4v1.MasterArbitrationUpdate{DeviceId: 1, ElectionId: election}
	if role != "" {
		arb.Role = &p4v1.Role{Name: role}
	}
	return &p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: arb}}
}

// wantRefused checks that err is PERMISSION_DENIED naming who.
func wantRefused(t *testing.T, what string, err error, who string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), who) {
		t.Errorf("%s: %v, want PermissionDenied naming %s", what, err, who)
	}
}

// TestHostileWorkerCertP4Runtime: a client holding the workers'
// certificate, which the switch's CA signed, tries to become primary of
// the default role and of a fresh role with election ids 1, 100 and
// 2^64-1, to read the workers table and to insert its own worker entry.
// Each is refused with PERMISSION_DENIED naming it; the controller stays
// primary, and a job started afterwards runs verified.
func TestHostileWorkerCertP4Runtime(t *testing.T) {
	needProcesses(t)
	f := startMTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := f.p4rtAs(t, "worker")
	const who = "cert:worker (role worker)"
	for _, role := range []string{"", "hostile"} {
		for _, e := range []uint64{1, 100, math.MaxUint64} {
			st, err := rt.StreamChannel(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(arbitration(role, &p4v1.Uint128{Low: e})); err != nil && err != io.EOF {
				t.Fatal(err)
			}
			m, err := st.Recv()
			if m != nil {
				t.Errorf("role %q election id %d: the switch answered the worker certificate's arbitration: %v", role, e, m)
			}
			wantRefused(t, fmt.Sprintf("arbitration, role %q, election id %d", role, e), err, who)
		}
	}
	rc, err := rt.Read(ctx, &p4v1.ReadRequest{DeviceId: 1, Entities: []*p4v1.Entity{
		{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: p4info.TableWorkersID}}}}})
	if err == nil {
		var r *p4v1.ReadResponse
		r, err = rc.Recv()
		if r != nil {
			t.Errorf("the worker certificate read %d entities of the workers table", len(r.GetEntities()))
		}
	}
	wantRefused(t, "Read of the workers table", err, who)
	_, err = rt.Write(ctx, &p4v1.WriteRequest{DeviceId: 1, ElectionId: &p4v1.Uint128{Low: 100}, Updates: []*p4v1.Update{{
		Type: p4v1.Update_INSERT, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{
			TableId: p4info.TableWorkersID,
			Match:   p4info.WorkerKey(0x7f000001, 40000),
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: p4info.ActionSetWorkerID, Params: []*p4v1.Action_Param{
				p4info.Param(p4info.SetWorkerJobID, 1), p4info.Param(p4info.SetWorkerRank, 0), p4info.Param(p4info.SetWorkerNumWorkers, 3),
				p4info.Param(p4info.SetWorkerMgid, 1), p4info.Param(p4info.SetWorkerLane, 0), p4info.Param(p4info.SetWorkerPoolBase, 0), p4info.Param(p4info.SetWorkerPoolSize, 8),
			}}}},
		}}},
	}}})
	wantRefused(t, "Write of a worker entry", err, who)

	runJob(t, f.switchSide, nil, jobSpec{name: "after-worker", dtype: "float32", workers: 3, elements: 30_000, iters: 2, extra: f.workerArgs})
	if strings.Contains(f.ctl.Logs(), "lost primaryship") {
		t.Errorf("the controller lost primaryship to a worker certificate:\n%s", f.ctl.Logs())
	}
}

// TestHostileControllerTakeover: a second controller identity the switch
// allows (a certificate with the controller role) arbitrates with election
// id 100 and stays until it sees the switch's answer to the first
// controller's move. The first controller logs who took primaryship, takes
// it back with election id 101, and a job afterwards runs verified.
func TestHostileControllerTakeover(t *testing.T) {
	needProcesses(t)
	f := startMTLS(t)
	if _, _, err := f.pki.IssueRole("ctl2", secure.RoleController); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sctx, leave := context.WithCancel(ctx)
	st, err := f.p4rtAs(t, "ctl2").StreamChannel(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(arbitration("", &p4v1.Uint128{Low: 100})); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetArbitration().GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("the second controller identity's arbitration: %v %v, want primary", m, err)
	}
	// The first controller takes primaryship back: the switch tells the
	// second one, naming the first.
	m, err = st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.GetArbitration().GetStatus().GetMessage(), "backup: cert:controller (role controller) is primary with election id 101"; got != want {
		t.Errorf("the second controller was told %q, want %q", got, want)
	}
	leave()
	waitLog(t, f.ctl, "primary on the switch again")
	logs := f.ctl.Logs()
	for _, want := range []string{`msg="controller: lost primaryship of the switch"`, `primary="cert:ctl2 (role controller)"`, `msg="controller: taking primaryship back"`, "election_id=101"} {
		if !strings.Contains(logs, want) {
			t.Errorf("controller log lacks %s:\n%s", want, logs)
		}
	}
	runJob(t, f.switchSide, nil, jobSpec{name: "after-takeover", dtype: "float32", workers: 3, elements: 30_000, iters: 2, extra: f.workerArgs})
}

// TestStatusControlLost: `switchml status` prints why the controller is not
// primary on its switch, and nothing about it while it is.
func TestStatusControlLost(t *testing.T) {
	for _, lost := range []string{"", "the controller is not primary on the switch at 127.0.0.1:9559: cert:ctl2 (role controller) took it at 2026-01-02T03:04:05Z"} {
		var b strings.Builder
		if err := writeStatusText(&b, "127.0.0.1:50051", &jobpb.StatusResponse{TargetKind: "softswitch", ControlLost: lost}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "control lost: "+lost+"\n"); got != (lost != "") || (lost == "" && strings.Contains(b.String(), "control lost")) {
			t.Errorf("control_lost %q: status printed\n%s", lost, b.String())
		}
	}
}
