package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml/secure"
)

// TestKilledWorker: a worker killed (SIGKILL) in the middle of a run of
// allreduces. The other ranks must fail with an error that names the lost
// rank, long before the switch's give-up (set to ten minutes here, so only
// the controller's lease can end their wait), and the job name must be
// free for a new run at once, on the slots the dead job held.
func TestKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	f := startFabricWith(t, nil, "", []string{"--slots", "64"}, []string{"--slots", "64"})
	const workers = 3
	ps := make([]*proc, workers)
	for r := range ps {
		// lanes*window = 64: the job takes every slot of the switch, so
		// the next run fits only if the dead job's partition was freed.
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "killed", "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(workers), "--elements", "1000000", "--iters", "100000", "--lanes", "2", "--window", "32",
			"--give-up", "10m", "--verify=false")
	}
	// Let the job run a while, then kill rank 2 as the OOM killer would.
	waitRunning(t, f.ctl, "killed", 1)
	for r, p := range ps {
		select {
		case <-p.done:
			t.Fatalf("rank %d ended before the kill: %v\n%s", r, p.err, p.stderr.String())
		default:
		}
	}
	killed := time.Now()
	if err := ps[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		err := ps[r].wait(t, 2*time.Minute)
		msg := ps[r].stderr.String()
		if err == nil || !strings.Contains(msg, "job aborted") || !strings.Contains(msg, "rank 2 lost its connection") {
			t.Errorf("rank %d: exit %v, stderr:\n%s\nwant a failure naming the lost rank 2", r, err, msg)
		}
		t.Logf("rank %d failed %.2f s after rank 2 was killed: %s", r, time.Since(killed).Seconds(), strings.TrimSpace(msg))
	}
	// The name and the slots are free again.
	runJob(t, f, nil, jobSpec{name: "killed", dtype: "int32", workers: workers, elements: 50_000, iters: 2, lanes: 2, window: 32})
}

// TestSwitchRestart: the software switch is killed and started again under
// a running job. The ranks must fail with an error that says the switch was
// lost (their give-up is ten minutes away), the controller must stay up and
// program the new switch, and a new job must then run on it.
func TestSwitchRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	dp, _ := freePort("udp")
	p4, _ := freePort("tcp")
	ctl, _ := freePort("tcp")
	f := fabric{dataplane: fmt.Sprintf("127.0.0.1:%d", dp), p4rt: fmt.Sprintf("127.0.0.1:%d", p4), controller: fmt.Sprintf("127.0.0.1:%d", ctl)}
	sw := spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt)
	c := spawn(t, nil, "controller", "--target", f.p4rt, "--listen", f.controller, "--dataplane", f.dataplane)
	const workers = 3
	ps := make([]*proc, workers)
	for r := range ps {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "restart", "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(workers), "--elements", "1000000", "--iters", "100000", "--lanes", "2", "--window", "32",
			"--give-up", "10m", "--verify=false")
	}
	waitRunning(t, c, "restart", 1)
	for r, p := range ps {
		select {
		case <-p.done:
			t.Fatalf("rank %d ended before the switch was killed: %v\n%s", r, p.err, p.stderr.String())
		default:
		}
	}
	killed := time.Now()
	if err := sw.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sw.wait(t, 10*time.Second)
	spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt)
	for r, p := range ps {
		err := p.wait(t, 2*time.Minute)
		msg := p.stderr.String()
		if err == nil || !strings.Contains(msg, "job aborted") || !strings.Contains(msg, "lost the switch") {
			t.Errorf("rank %d: exit %v, stderr:\n%s\nwant a failure saying the switch was lost", r, err, msg)
		}
		t.Logf("rank %d failed %.2f s after the switch was killed: %s", r, time.Since(killed).Seconds(), strings.TrimSpace(msg))
	}
	select {
	case <-c.done:
		t.Fatalf("the controller exited: %v\n%s", c.err, c.stderr.String())
	default:
	}
	// The controller programs the new switch; a new run of the job works
	// (joins retry while the controller reconnects).
	runJob(t, f, nil, jobSpec{name: "restart", dtype: "float32", workers: workers, elements: 50_000, iters: 2, lanes: 2, window: 32})
}

// TestMutualTLS: switch, controller and workers authenticate each other
// with certificates of one CA. A job runs; a worker without TLS, a worker
// with a certificate of another CA and a controller that does not present
// a certificate to the switch are all refused.
func TestMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
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
	dp, _ := freePort("udp")
	p4, _ := freePort("tcp")
	ctl, _ := freePort("tcp")
	f := fabric{dataplane: fmt.Sprintf("127.0.0.1:%d", dp), p4rt: fmt.Sprintf("127.0.0.1:%d", p4), controller: fmt.Sprintf("127.0.0.1:%d", ctl)}
	spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt, "--tls-cert", swCert, "--tls-key", swKey, "--tls-client-ca", pki.CA)

	// A controller that does not present a certificate is refused.
	other, _ := freePort("tcp")
	bad := spawn(t, nil, "controller", "--target", f.p4rt, "--listen", fmt.Sprintf("127.0.0.1:%d", other), "--dataplane", f.dataplane,
		"--target-tls-ca", pki.CA, "--connect-timeout", "3s")
	if err := bad.wait(t, time.Minute); err == nil {
		t.Fatalf("a controller without a certificate programmed the switch:\n%s", bad.stderr.String())
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
		if err := w.wait(t, time.Minute); err == nil || !strings.Contains(w.stderr.String(), c.want) {
			t.Errorf("%s: exit %v, stderr:\n%s\nwant a refusal containing %q", c.name, err, w.stderr.String(), c.want)
		}
	}
}

// TestControllerRestart: the controller is killed and started again under a
// running job. A restarted controller reprograms the switch, so the job
// cannot go on: every rank must fail with an error that says the controller
// no longer holds its session (their give-up is ten minutes away), and a
// new run of the job must work.
func TestControllerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	dp, _ := freePort("udp")
	p4, _ := freePort("tcp")
	ctl, _ := freePort("tcp")
	f := fabric{dataplane: fmt.Sprintf("127.0.0.1:%d", dp), p4rt: fmt.Sprintf("127.0.0.1:%d", p4), controller: fmt.Sprintf("127.0.0.1:%d", ctl)}
	spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt)
	controllerArgs := []string{"controller", "--target", f.p4rt, "--listen", f.controller, "--dataplane", f.dataplane}
	c := spawn(t, nil, controllerArgs...)
	const workers = 3
	ps := make([]*proc, workers)
	for r := range ps {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "ctl-restart", "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(workers), "--elements", "1000000", "--iters", "100000", "--lanes", "2", "--window", "32",
			"--give-up", "10m", "--verify=false")
	}
	waitRunning(t, c, "ctl-restart", 1)
	for r, p := range ps {
		select {
		case <-p.done:
			t.Fatalf("rank %d ended before the controller was killed: %v\n%s", r, p.err, p.stderr.String())
		default:
		}
	}
	killed := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 10*time.Second)
	spawn(t, nil, controllerArgs...)
	for r, p := range ps {
		err := p.wait(t, 2*time.Minute)
		msg := p.stderr.String()
		if err == nil || !strings.Contains(msg, "job aborted") || !strings.Contains(msg, "no longer holds this session") {
			t.Errorf("rank %d: exit %v, stderr:\n%s\nwant a failure saying the controller no longer holds the session", r, err, msg)
		}
		t.Logf("rank %d failed %.2f s after the controller was killed: %s", r, time.Since(killed).Seconds(), strings.TrimSpace(msg))
	}
	runJob(t, f, nil, jobSpec{name: "ctl-restart", dtype: "int32", workers: workers, elements: 50_000, iters: 2, lanes: 2, window: 32})
}

// TestChaosShort runs `switchml chaos` briefly: whatever the schedule of
// kills, restarts and loss, no sum may be wrong, no slot leak, and every
// failure must name the fault that caused it (the command exits non-zero
// otherwise).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	out := filepath.Join(t.TempDir(), "chaos.json")
	p := spawn(t, nil, "chaos", "--duration", "15s", "--seed", "3", "--iters", "60", "--json", out)
	if err := p.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("chaos: %v\n%s\n%s", err, p.stdout.String(), p.stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var sum chaosSummary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Rounds) == 0 || sum.WrongSums != 0 || sum.LeakedSlots != 0 || sum.ByOutcome["unexpected"] != 0 {
		t.Fatalf("summary %+v", sum)
	}
	t.Logf("%d rounds: %v, worst time to detect %.2f s\n%s", len(sum.Rounds), sum.ByOutcome, sum.WorstDetect, p.stdout.String())
}
