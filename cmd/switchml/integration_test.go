package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
)

// The integration tests run the real binary: a software switch, a
// controller and worker processes talking UDP and gRPC on loopback.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "switchml-it")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "switchml")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building switchml:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	args   []string // as given to spawn
	cmd    *exec.Cmd
	stdout lockedBuffer
	stderr lockedBuffer
	done   chan struct{}
	err    error
}

// lockedBuffer is a bytes.Buffer that a test may read while the process
// still writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}

func (l *lockedBuffer) String() string { return string(l.Bytes()) }

// spawn starts the binary with args (prefix, e.g. "ip netns exec ns", goes
// first) and stops it when the test ends.
func spawn(t *testing.T, prefix []string, args ...string) *proc {
	t.Helper()
	full := append(append([]string{}, prefix...), binary)
	full = append(full, args...)
	p := &proc{args: args, cmd: exec.Command(full[0], full[1:]...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", full, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("%v stderr:\n%s", args[:1], p.stderr.String())
		}
	})
	return p
}

// wait waits for the process to exit within d.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%v did not finish within %v; stderr:\n%s", p.cmd.Args, d, p.stderr.String())
		return nil
	}
}

// fabric is a running software switch and controller.
type fabric struct {
	dataplane, p4rt, controller string
	sw, ctl                     *proc // when the test started them
}

// waitRunning waits until the controller has programmed job n times (its
// log says so) and then a moment longer, so that a fault lands while the
// job's allreduces run rather than while its ranks join.
func waitRunning(t *testing.T, ctl *proc, job string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for strings.Count(ctl.stderr.String(), `msg="controller: job ready" job=`+job+" ") < n {
		if time.Now().After(deadline) {
			t.Fatalf("job %s never became ready:\n%s", job, ctl.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
}

func startFabric(t *testing.T, prefix []string, host string, switchArgs ...string) fabric {
	t.Helper()
	return startFabricWith(t, prefix, host, switchArgs, nil)
}

// startFabricWith is startFabric with extra controller flags too.
func startFabricWith(t *testing.T, prefix []string, host string, switchArgs, controllerArgs []string) fabric {
	t.Helper()
	f := fabric{}
	if host == "" {
		host = "127.0.0.1"
		dp, _ := freePort("udp")
		p4, _ := freePort("tcp")
		ctl, _ := freePort("tcp")
		f = fabric{dataplane: fmt.Sprintf("%s:%d", host, dp), p4rt: fmt.Sprintf("%s:%d", host, p4), controller: fmt.Sprintf("%s:%d", host, ctl)}
	} else {
		f = fabric{dataplane: host + ":48864", p4rt: host + ":9559", controller: host + ":50051"}
	}
	f.sw = spawn(t, prefix, append([]string{"switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt}, switchArgs...)...)
	f.ctl = spawn(t, prefix, append([]string{"controller", "--target", f.p4rt, "--listen", f.controller, "--dataplane", f.dataplane}, controllerArgs...)...)
	return f
}

type jobSpec struct {
	name, dtype              string
	workers, elements, iters int
	lanes, window            int
	pe                       int      // values per packet; 0: 64, -1: the switch's choice
	bind                     []string // --bind per rank, if set
	extra                    []string
}

// runJob runs every rank of a job and returns their reports.
func runJob(t *testing.T, f fabric, prefixes func(rank int) []string, js jobSpec) []benchmarks.WorkerReport {
	t.Helper()
	if js.lanes == 0 {
		js.lanes = 2
	}
	if js.window == 0 {
		js.window = 32
	}
	if js.pe == 0 {
		js.pe = 64
	}
	ps := make([]*proc, js.workers)
	for r := range ps {
		var prefix []string
		if prefixes != nil {
			prefix = prefixes(r)
		}
		args := []string{"allreduce", "--controller", f.controller, "--job", js.name, "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(js.workers), "--elements", fmt.Sprint(js.elements), "--dtype", js.dtype,
			"--iters", fmt.Sprint(js.iters), "--lanes", fmt.Sprint(js.lanes), "--window", fmt.Sprint(js.window), "--json"}
		if js.pe > 0 {
			args = append(args, "--packet-elements", fmt.Sprint(js.pe))
		}
		if js.bind != nil {
			args = append(args, "--bind", js.bind[r])
		}
		ps[r] = spawn(t, prefix, append(args, js.extra...)...)
	}
	reps := make([]benchmarks.WorkerReport, js.workers)
	var wg sync.WaitGroup
	errs := make([]error, js.workers)
	for r, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-p.done:
			case <-time.After(3 * time.Minute):
				p.cmd.Process.Kill()
				<-p.done
			}
			if err := json.Unmarshal(bytes.TrimSpace(p.stdout.Bytes()), &reps[r]); err != nil {
				errs[r] = fmt.Errorf("rank %d: no JSON report (%v): exit %v, stderr:\n%s", r, err, p.err, p.stderr.String())
				return
			}
			if p.err != nil {
				errs[r] = fmt.Errorf("rank %d exited with %v: %s\n%s", r, p.err, reps[r].Error, p.stderr.String())
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r, rep := range reps {
		if !rep.Verified || rep.Workers != js.workers || rep.Elements != js.elements || len(rep.TATs) != js.iters {
			t.Fatalf("rank %d report %+v: want verified results of %d iterations", r, rep, js.iters)
		}
		// The allreduce calls' CPU time is part of the whole process's.
		if u, s := rep.CPULoopUserS, rep.CPULoopSysS; u == nil || s == nil || *u < 0 || *s < 0 || *u+*s > rep.CPUUserS+rep.CPUSysS+0.01 {
			t.Fatalf("rank %d: CPU of the calls %v/%v against %v/%v for the process", r, u, s, rep.CPUUserS, rep.CPUSysS)
		}
	}
	return reps
}

func TestLoopbackJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	f := startFabric(t, nil, "")
	// Several jobs in a row on the same switch and controller, both
	// types, two lane counts, sizes that do not fill the last packet.
	for i, js := range []jobSpec{
		{name: "int32-l1", dtype: "int32", workers: 4, elements: 100_003, iters: 3, lanes: 1},
		{name: "float32-l4", dtype: "float32", workers: 4, elements: 250_001, iters: 3, lanes: 4},
		{name: "int32-l4", dtype: "int32", workers: 4, elements: 7, iters: 2, lanes: 4},
		{name: "float16", dtype: "float16", workers: 4, elements: 40_000, iters: 2, lanes: 2},
		{name: "bfloat16", dtype: "bfloat16", workers: 4, elements: 40_000, iters: 2, lanes: 2},
		{name: "float32-ext", dtype: "float32", workers: 4, elements: 300_000, iters: 2, lanes: 2, pe: 1024, extra: []string{"--extended"}},
		// A second extended job on the same slots: the controller's reset
		// must let its fresh job numbers through.
		{name: "int32-ext-again", dtype: "int32", workers: 3, elements: 100_000, iters: 2, lanes: 2, pe: 512, extra: []string{"--extended"}},
	} {
		t.Run(fmt.Sprintf("%d-%s", i, js.name), func(t *testing.T) { runJob(t, f, nil, js) })
	}
}

func TestLoopbackLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	// 1% loss on the switch's output and on every worker's output, with
	// duplication and reordering on the workers' side.
	f := startFabric(t, nil, "", "--drop", "0.01", "--seed", "3")
	for _, js := range []jobSpec{
		{name: "loss-int32", dtype: "int32", workers: 4, elements: 200_000, iters: 2, lanes: 2,
			extra: []string{"--drop", "0.01", "--duplicate", "0.01", "--reorder", "0.01"}},
		{name: "loss-float32", dtype: "float32", workers: 4, elements: 200_000, iters: 2, lanes: 4,
			extra: []string{"--drop", "0.01", "--duplicate", "0.01", "--reorder", "0.01"}},
	} {
		t.Run(js.name, func(t *testing.T) {
			reps := runJob(t, f, nil, js)
			var retx uint64
			for _, r := range reps {
				retx += r.Retransmits
			}
			if retx == 0 {
				t.Fatalf("1%% loss but no retransmission was counted: the loss was not injected")
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	f := startFabric(t, nil, "")
	common := func(job string, rank, workers int, extra ...string) []string {
		return append([]string{"allreduce", "--controller", f.controller, "--job", job, "--rank", fmt.Sprint(rank),
			"--workers", fmt.Sprint(workers), "--elements", "1000", "--iters", "1", "--json"}, extra...)
	}
	t.Run("world size mismatch", func(t *testing.T) {
		a := spawn(t, nil, common("mismatch", 0, 2, "--join-timeout", "20s")...)
		time.Sleep(200 * time.Millisecond)
		b := spawn(t, nil, common("mismatch", 1, 3, "--join-timeout", "20s")...)
		if err := b.wait(t, 30*time.Second); err == nil {
			t.Fatalf("rank with the wrong world size succeeded")
		}
		if !strings.Contains(b.stdout.String()+b.stderr.String(), "world") {
			t.Fatalf("error does not name the world size: %s %s", b.stdout.String(), b.stderr.String())
		}
		a.wait(t, 30*time.Second)
	})
	t.Run("missing rank", func(t *testing.T) {
		a := spawn(t, nil, common("lonely", 0, 2, "--join-timeout", "2s")...)
		if err := a.wait(t, 20*time.Second); err == nil {
			t.Fatalf("join without the other rank succeeded")
		}
		if out := a.stdout.String() + a.stderr.String(); !strings.Contains(out, "did every rank") {
			t.Fatalf("error does not say ranks are missing: %s", out)
		}
	})
	t.Run("no controller", func(t *testing.T) {
		port, _ := freePort("tcp")
		a := spawn(t, nil, "allreduce", "--controller", fmt.Sprintf("127.0.0.1:%d", port), "--job", "x", "--workers", "1", "--join-timeout", "2s", "--json")
		if err := a.wait(t, 20*time.Second); err == nil {
			t.Fatalf("join without a controller succeeded")
		}
		if out := a.stdout.String() + a.stderr.String(); !strings.Contains(out, "controller") {
			t.Fatalf("error does not name the controller: %s", out)
		}
	})
	t.Run("switch not there", func(t *testing.T) {
		// A controller that points workers at a data plane address where
		// no switch listens.
		p4, _ := freePort("tcp")
		ctl, _ := freePort("tcp")
		dead, _ := freePort("udp")
		sw := spawn(t, nil, "switch", "--dataplane", "127.0.0.1:0", "--p4rt", fmt.Sprintf("127.0.0.1:%d", p4))
		_ = sw
		spawn(t, nil, "controller", "--target", fmt.Sprintf("127.0.0.1:%d", p4), "--listen", fmt.Sprintf("127.0.0.1:%d", ctl),
			"--dataplane", fmt.Sprintf("127.0.0.1:%d", dead))
		a := spawn(t, nil, "allreduce", "--controller", fmt.Sprintf("127.0.0.1:%d", ctl), "--job", "x", "--workers", "1",
			"--give-up", "2s", "--json")
		if err := a.wait(t, 30*time.Second); err == nil {
			t.Fatalf("allreduce without a switch succeeded")
		}
		if out := a.stdout.String() + a.stderr.String(); !strings.Contains(out, "no answer from the switch") {
			t.Fatalf("error does not say the switch is silent: %s", out)
		}
	})
	t.Run("slots disagree", func(t *testing.T) {
		// The controller would hand out slots the switch does not have.
		p4, _ := freePort("tcp")
		ctl, _ := freePort("tcp")
		spawn(t, nil, "switch", "--dataplane", "127.0.0.1:0", "--p4rt", fmt.Sprintf("127.0.0.1:%d", p4), "--slots", "64")
		c := spawn(t, nil, "controller", "--target", fmt.Sprintf("127.0.0.1:%d", p4), "--listen", fmt.Sprintf("127.0.0.1:%d", ctl),
			"--dataplane", "127.0.0.1:48864", "--slots", "128")
		if err := c.wait(t, 60*time.Second); err == nil || !strings.Contains(c.stderr.String(), "does not hold the controller's 128 slots per set") {
			t.Fatalf("controller with more slots than the switch: exit %v, stderr:\n%s", err, c.stderr.String())
		}
	})
}
