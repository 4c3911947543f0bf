package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/chaos"
	"github.com/switchml/switchml-go/jobpb"

	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/secure"
)

// faultJobWorkers is the size of the jobs the fault tests break.
const faultJobWorkers = 3

// longJob starts a job of many allreduces on f whose ranks would wait ten
// minutes for the switch (or giveUp, a --give-up value), and returns once
// the controller has programmed it and it runs: only the fault handling
// can end it sooner.
func longJob(t *testing.T, f switchSide, job string, giveUp ...string) []*proc {
	t.Helper()
	give := "10m"
	if len(giveUp) > 0 {
		give = giveUp[0]
	}
	ps := make([]*proc, faultJobWorkers)
	for r := range ps {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", job, "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(faultJobWorkers), "--elements", "1000000", "--iters", "100000", "--lanes", "2", "--window", "32",
			"--give-up", give, "--verify=false")
	}
	waitRunning(t, f.ctl, job, 1)
	for r, p := range ps {
		select {
		case <-p.Done():
			t.Fatalf("rank %d ended before the fault: %v\n%s", r, p.Wait(), p.Logs())
		default:
		}
	}
	return ps
}

// failNaming checks that each of ps exits with an error containing every
// one of want, and logs how long after the fault it did.
func failNaming(t *testing.T, ps []*proc, fault time.Time, want ...string) {
	t.Helper()
	for r, p := range ps {
		err := p.wait(t, 2*time.Minute)
		msg := p.Logs()
		ok := err != nil
		for _, w := range want {
			ok = ok && strings.Contains(msg, w)
		}
		if !ok {
			t.Errorf("rank %d: exit %v, stderr:\n%s\nwant a failure containing %q", r, err, msg, want)
		}
		t.Logf("rank %d failed %.2f s after the fault: %s", r, time.Since(fault).Seconds(), strings.TrimSpace(msg))
	}
}

// restart kills the switch or the controller (SIGKILL, as in a crash) and
// starts the same command again.
func (f *switchSide) restart(t *testing.T, which string) *proc {
	t.Helper()
	if err := f.fab.Crash(which); err != nil {
		t.Fatal(err)
	}
	np, err := f.fab.Restart(which)
	if err != nil {
		t.Fatal(err)
	}
	p := adopt(t, np)
	if which == "switch" {
		f.sw = p
	} else {
		f.ctl = p
	}
	return p
}

// TestKilledWorker: a worker killed (SIGKILL) in the middle of a run of
// allreduces. The other ranks must fail with an error that names the lost
// rank, long before the switch's give-up (set to ten minutes here, so only
// the controller's lease can end their wait), and the job name must be
// free for a new run at once, on the slots the dead job held.
func TestKilledWorker(t *testing.T) {
	needProcesses(t)
	// lanes*window = 64: the job takes every slot of the switch, so the
	// next run fits only if the dead job's partition was freed (its
	// client may hold the whole pool).
	f := startFabricWith(t, nil, "", []string{"--slots", "64"}, []string{"--slots", "64", "--max-slots-per-client", "-1"})
	ps := longJob(t, f, "killed")
	// Kill rank 2 as the OOM killer would.
	killed := time.Now()
	if err := ps[2].Cmd().Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failNaming(t, ps[:2], killed, "job aborted", "rank 2 lost its connection")
	// The name and the slots are free again.
	runJob(t, f, nil, jobSpec{name: "killed", dtype: "int32", workers: faultJobWorkers, elements: 50_000, iters: 2, lanes: 2, window: 32})
}

// TestSwitchRestart: the software switch is killed and started again under
// a running job. The ranks must fail with an error that says the switch was
// lost (their give-up is ten minutes away), the controller must stay up and
// program the new switch, and a new job must then run on it.
func TestSwitchRestart(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	ps := longJob(t, f, "restart")
	killed := time.Now()
	f.restart(t, "switch")
	failNaming(t, ps, killed, "job aborted", "lost the switch")
	select {
	case <-f.ctl.Done():
		t.Fatalf("the controller exited: %v\n%s", f.ctl.Wait(), f.ctl.Logs())
	default:
	}
	// The controller programs the new switch; a new run of the job works
	// (joins retry while the controller reconnects).
	runJob(t, f, nil, jobSpec{name: "restart", dtype: "float32", workers: faultJobWorkers, elements: 50_000, iters: 2, lanes: 2, window: 32})
}

// TestMutualTLS: switch, controller and workers authenticate each other
// with certificates of one CA. A job runs; a worker without TLS, a worker
// with a certificate of another CA and a controller that does not present
// a certificate to the switch are all refused.
func TestMutualTLS(t *testing.T) {
	needProcesses(t)
	dir := t.TempDir()
	pki, err := secure.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	swCert, swKey, _ := pki.Issue("switch", "127.0.0.1")
	ctlCert, ctlKey, _ := pki.Issue("controller", "127.0.0.1")
	wCert, wKey, err := pki.Issue("worker")
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := secure.NewPKI(filepath.Join(dir, "rogue"))
	if err != nil {
		t.Fatal(err)
	}
	rCert, rKey, err := rogue.Issue("worker")
	if err != nil {
		t.Fatal(err)
	}
	dp, _ := harness.FreePort("udp")
	p4, _ := harness.FreePort("tcp")
	ctl, _ := harness.FreePort("tcp")
	f := switchSide{dataplane: fmt.Sprintf("127.0.0.1:%d", dp), p4rt: fmt.Sprintf("127.0.0.1:%d", p4), controller: fmt.Sprintf("127.0.0.1:%d", ctl)}
	spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt, "--tls-cert", swCert, "--tls-key", swKey, "--tls-client-ca", pki.CA)

	// A controller that does not present a certificate is refused.
	other, _ := harness.FreePort("tcp")
	bad := spawn(t, nil, "controller", "--target", f.p4rt, "--listen", fmt.Sprintf("127.0.0.1:%d", other), "--dataplane", f.dataplane,
		"--target-tls-ca", pki.CA, "--connect-timeout", "3s")
	if err := bad.wait(t, time.Minute); err == nil {
		t.Fatalf("a controller without a certificate programmed the switch:\n%s", bad.Logs())
	}

	spawn(t, nil, "controller", "--target", f.p4rt, "--listen", f.controller, "--dataplane", f.dataplane,
		"--target-tls-ca", pki.CA, "--target-tls-cert", ctlCert, "--target-tls-key", ctlKey,
		"--tls-cert", ctlCert, "--tls-key", ctlKey, "--tls-client-ca", pki.CA)
	runJob(t, f, nil, jobSpec{name: "tls", dtype: "float32", workers: 3, elements: 30_000, iters: 2,
		extra: []string{"--tls-ca", pki.CA, "--tls-cert", wCert, "--tls-key", wKey}})

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no TLS", nil, "If it requires TLS"},
		{"certificate of another CA", []string{"--tls-ca", pki.CA, "--tls-cert", rCert, "--tls-key", rKey}, "controller unreachable"},
		{"no client certificate", []string{"--tls-ca", pki.CA}, "controller unreachable"},
	} {
		w := spawn(t, nil, append([]string{"allreduce", "--controller", f.controller, "--job", "intruder", "--workers", "1",
			"--elements", "100", "--join-timeout", "3s"}, c.args...)...)
		if err := w.wait(t, time.Minute); err == nil || !strings.Contains(w.Logs(), c.want) {
			t.Errorf("%s: exit %v, stderr:\n%s\nwant a refusal containing %q", c.name, err, w.Logs(), c.want)
		}
	}
}

// TestControllerRestart: the controller is killed and started again under a
// running job. The new controller finds the switch running the pipeline it
// would push, keeps it, reads the job back from the switch's tables, and
// the ranks take their leases up again: the job runs on to the end, every
// result verified, and a new job can then start beside nothing stale.
func TestControllerRestart(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	ps := make([]*proc, faultJobWorkers)
	for r := range ps {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "ctl-restart", "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(faultJobWorkers), "--elements", "500000", "--iters", "150", "--lanes", "2", "--window", "32",
			"--give-up", "10m", "--json")
	}
	waitRunning(t, f.ctl, "ctl-restart", 1)
	c := f.restart(t, "controller")
	for r, p := range ps {
		if err := p.wait(t, 5*time.Minute); err != nil {
			t.Errorf("rank %d: %v\n%s", r, err, p.Logs())
			continue
		}
		var rep benchmarks.WorkerReport
		if err := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &rep); err != nil || !rep.Verified || len(rep.TATs) != 150 {
			t.Errorf("rank %d: report %+v (%v): want 150 verified allreduces", r, rep, err)
		}
	}
	if !strings.Contains(c.Logs(), "job found on the switch, waiting for its ranks") {
		t.Errorf("the restarted controller did not take the job over:\n%s", c.Logs())
	}
	runJob(t, f, nil, jobSpec{name: "after-restart", dtype: "int32", workers: faultJobWorkers, elements: 50_000, iters: 2, lanes: 2, window: 32})
}

// TestChaosShort runs `switchml chaos` briefly: whatever the schedule of
// kills, restarts and loss, no sum may be wrong, no slot leak, and every
// failure must name the fault that caused it (the command exits non-zero
// otherwise).
func TestChaosShort(t *testing.T) {
	needProcesses(t)
	out := filepath.Join(t.TempDir(), "chaos.json")
	p := spawn(t, nil, "chaos", "--duration", "15s", "--seed", "3", "--iters", "60", "--json", out)
	if err := p.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("chaos: %v\n%s\n%s", err, string(p.Stdout()), p.Logs())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var sum chaos.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Rounds) == 0 || sum.WrongSums != 0 || sum.LeakedSlots != 0 || sum.ByOutcome["unexpected"] != 0 {
		t.Fatalf("summary %+v", sum)
	}
	t.Logf("%d rounds: %v, worst time to detect %.2f s\n%s", len(sum.Rounds), sum.ByOutcome, sum.WorstDetect, string(p.Stdout()))
}

// TestNaNRank: one rank's input holds a NaN at its fourth allreduce. It
// refuses the call, and its peers, waiting for its share, fail with its
// reason instead of waiting for the switch (ten minutes).
func TestNaNRank(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	ps := make([]*proc, faultJobWorkers)
	fault := time.Now()
	for r := range ps {
		args := []string{"allreduce", "--controller", f.controller, "--job", "nan", "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(faultJobWorkers), "--elements", "200000", "--iters", "10", "--give-up", "10m"}
		if r == 1 {
			args = append(args, "--nan-at", "3")
		}
		ps[r] = spawn(t, nil, args...)
	}
	failNaming(t, ps[1:2], fault, "input not finite")
	failNaming(t, []*proc{ps[0], ps[2]}, fault, "job aborted", "aborted by rank 1", "input not finite")
}

// TestHijackAndFlood: while a job with a token runs, other clients try to
// take its name (without the token, with a wrong one), and a flood of
// registrations that give up piles on the controller. The intruders are
// refused at once, the job runs to the end, verified, and the controller
// still has room for new jobs.
func TestHijackAndFlood(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	ps := make([]*proc, faultJobWorkers)
	for r := range ps {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "owned", "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(faultJobWorkers), "--elements", "300000", "--iters", "60", "--token", "secret", "--json")
	}
	waitRunning(t, f.ctl, "owned", 1)
	for _, token := range []string{"", "guess"} {
		in := spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "owned", "--rank", "0",
			"--workers", fmt.Sprint(faultJobWorkers), "--elements", "1000", "--token", token, "--join-timeout", "10s")
		if err := in.wait(t, time.Minute); err == nil || !strings.Contains(in.Logs(), "belongs to another owner") {
			t.Errorf("intruder with token %q: exit %v, stderr:\n%s\nwant it refused", token, err, in.Logs())
		}
	}
	// More registrations than the controller holds jobs, each giving up.
	conn, err := grpc.NewClient(f.controller, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := jobpb.NewJobServiceClient(conn)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var refused, other atomic.Int64
	for i := 0; i < 5000; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := jobs.Register(ctx, &jobpb.RegisterRequest{Job: fmt.Sprintf("flood-%d", i), Rank: 0, WorldSize: 2, Lanes: 1, Window: 4,
				Elements: 64, LaneAddresses: []string{fmt.Sprintf("127.9.%d.%d:%d", i/250, i%250+1, 1000+i)}})
			switch status.Code(err) {
			case codes.DeadlineExceeded:
			case codes.ResourceExhausted:
				refused.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	wg.Wait()
	if other.Load() != 0 {
		t.Errorf("%d flood registrations ended otherwise than by their deadline or a refusal", other.Load())
	}
	for r, p := range ps {
		if err := p.wait(t, 3*time.Minute); err != nil {
			t.Fatalf("rank %d of the owned job: %v\n%s", r, err, p.Logs())
		}
		var rep benchmarks.WorkerReport
		if err := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &rep); err != nil || !rep.Verified {
			t.Fatalf("rank %d: %+v (%v): want verified results", r, rep, err)
		}
	}
	// The flood left nothing behind: a new job still finds room.
	runJob(t, f, nil, jobSpec{name: "after-flood", dtype: "int32", workers: 2, elements: 10_000, iters: 2})
	t.Logf("flood: 5000 registrations, %d refused for want of room while they piled up", refused.Load())
}
