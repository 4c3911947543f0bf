package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
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

// needProcesses skips, with -short, a test that starts switchml processes
// (switch, controller, workers); a single `switchml --help` is not one.
func needProcesses(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped with -short: starts switchml processes")
	}
}

// proc is a running switchml process the test started.
type proc struct {
	*harness.Proc
}

// binaryCmd is the binary with args, behind prefix (e.g. "ip netns exec ns").
func binaryCmd(prefix []string, args ...string) *exec.Cmd {
	full := append(append(append([]string{}, prefix...), binary), args...)
	return exec.Command(full[0], full[1:]...)
}

// spawn starts the binary with args (prefix, e.g. "ip netns exec ns", goes
// first) and stops it when the test ends.
func spawn(t *testing.T, prefix []string, args ...string) *proc {
	t.Helper()
	needProcesses(t)
	fp, err := harness.StartProc(args[0], false, binaryCmd(prefix, args...))
	if err != nil {
		t.Fatal(err)
	}
	return adopt(t, fp)
}

// adopt stops p when the test ends and shows its log if the test failed.
func adopt(t *testing.T, fp *harness.Proc) *proc {
	t.Cleanup(func() {
		fp.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", fp.Name(), fp.Logs())
		}
	})
	return &proc{Proc: fp}
}

// wait waits for the process to exit within d.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(d):
		p.Cmd().Process.Kill()
		t.Fatalf("%v did not finish within %v; stderr:\n%s", p.Cmd().Args, d, p.Logs())
		return nil
	}
}

// switchSide is a running software switch and controller.
type switchSide struct {
	dataplane, p4rt, controller string
	sw, ctl                     *proc // when the test started them
	fab                         *harness.Fabric
}

// waitRunning waits until the controller has programmed job n times (its
// log says so) and then a moment longer, so that a fault lands while the
// job's allreduces run rather than while its ranks join.
func waitRunning(t *testing.T, ctl *proc, job string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for strings.Count(ctl.Logs(), `msg="controller: job ready" job=`+job+" ") < n {
		if time.Now().After(deadline) {
			t.Fatalf("job %s never became ready:\n%s", job, ctl.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
}

func startFabric(t *testing.T, prefix []string, host string, switchArgs ...string) switchSide {
	t.Helper()
	return startFabricWith(t, prefix, host, switchArgs, nil)
}

// startFabricWith is startFabric with extra controller flags too. With a
// host, the two run behind prefix (a network namespace) at fixed ports of
// host, and the readiness check dials from inside namespace ns.
func startFabricWith(t *testing.T, prefix []string, host string, switchArgs, controllerArgs []string) switchSide {
	t.Helper()
	cfg := harness.Config{
		Command:    func(args ...string) *exec.Cmd { return binaryCmd(prefix, args...) },
		SwitchArgs: switchArgs, ControllerArgs: controllerArgs, ReadyTimeout: time.Minute,
	}
	if host != "" {
		cfg.Dataplane, cfg.P4Runtime, cfg.Controller = host+":48864", host+":9559", host+":50051"
		cfg.Dial = rack.DialIn(prefix[len(prefix)-1])
		// The namespaces are the test's own, and its workers join
		// without a token.
		cfg.ControllerArgs = append(slices.Clone(controllerArgs), "--allow-open-jobs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab, err := harness.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sw, ctl := fab.Procs()
	return switchSide{dataplane: fab.DataplaneAddr(), p4rt: fab.P4RuntimeAddr(), controller: fab.ControllerAddr(), sw: adopt(t, sw), ctl: adopt(t, ctl), fab: fab}
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
func runJob(t *testing.T, f switchSide, prefixes func(rank int) []string, js jobSpec) []benchmarks.WorkerReport {
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
			case <-p.Done():
			case <-time.After(3 * time.Minute):
				p.Cmd().Process.Kill()
				<-p.Done()
			}
			if err := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &reps[r]); err != nil {
				errs[r] = fmt.Errorf("rank %d: no JSON report (%v): exit %v, stderr:\n%s", r, err, p.Wait(), p.Logs())
				return
			}
			if p.Wait() != nil {
				errs[r] = fmt.Errorf("rank %d exited with %v: %s\n%s", r, p.Wait(), reps[r].Error, p.Logs())
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
	needProcesses(t)
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
		// must let its fresh sequence numbers through.
		{name: "int32-ext-again", dtype: "int32", workers: 3, elements: 100_000, iters: 2, lanes: 2, pe: 512, extra: []string{"--extended"}},
	} {
		t.Run(fmt.Sprintf("%d-%s", i, js.name), func(t *testing.T) { runJob(t, f, nil, js) })
	}
}

func TestLoopbackLoss(t *testing.T) {
	needProcesses(t)
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
	needProcesses(t)
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
		if !strings.Contains(string(b.Stdout())+b.Logs(), "world") {
			t.Fatalf("error does not name the world size: %s %s", string(b.Stdout()), b.Logs())
		}
		a.wait(t, 30*time.Second)
	})
	t.Run("missing rank", func(t *testing.T) {
		a := spawn(t, nil, common("lonely", 0, 2, "--join-timeout", "2s")...)
		if err := a.wait(t, 20*time.Second); err == nil {
			t.Fatalf("join without the other rank succeeded")
		}
		if out := string(a.Stdout()) + a.Logs(); !strings.Contains(out, "did every rank") {
			t.Fatalf("error does not say ranks are missing: %s", out)
		}
	})
	t.Run("no controller", func(t *testing.T) {
		port, _ := harness.FreePort("tcp")
		a := spawn(t, nil, "allreduce", "--controller", fmt.Sprintf("127.0.0.1:%d", port), "--job", "x", "--workers", "1", "--join-timeout", "2s", "--json")
		if err := a.wait(t, 20*time.Second); err == nil {
			t.Fatalf("join without a controller succeeded")
		}
		if out := string(a.Stdout()) + a.Logs(); !strings.Contains(out, "controller") {
			t.Fatalf("error does not name the controller: %s", out)
		}
	})
	t.Run("switch not there", func(t *testing.T) {
		// A controller that points workers at a data plane address where
		// no switch listens.
		p4, _ := harness.FreePort("tcp")
		ctl, _ := harness.FreePort("tcp")
		dead, _ := harness.FreePort("udp")
		sw := spawn(t, nil, "switch", "--dataplane", "127.0.0.1:0", "--p4rt", fmt.Sprintf("127.0.0.1:%d", p4))
		_ = sw
		spawn(t, nil, "controller", "--target", fmt.Sprintf("127.0.0.1:%d", p4), "--listen", fmt.Sprintf("127.0.0.1:%d", ctl),
			"--dataplane", fmt.Sprintf("127.0.0.1:%d", dead))
		// The controller serves once its probe of the data plane has gone
		// unanswered (3 s): the worker waits for it as long as it takes.
		a := spawn(t, nil, "allreduce", "--controller", fmt.Sprintf("127.0.0.1:%d", ctl), "--job", "x", "--workers", "1",
			"--give-up", "2s", "--connect-timeout", "2m", "--json")
		if err := a.wait(t, 3*time.Minute); err == nil {
			t.Fatalf("allreduce without a switch succeeded")
		}
		if out := string(a.Stdout()) + a.Logs(); !strings.Contains(out, "no answer from the switch") {
			t.Fatalf("error does not say the switch is silent: %s", out)
		}
	})
	t.Run("slots disagree", func(t *testing.T) {
		// The controller would hand out slots the switch does not have.
		p4, _ := harness.FreePort("tcp")
		ctl, _ := harness.FreePort("tcp")
		spawn(t, nil, "switch", "--dataplane", "127.0.0.1:0", "--p4rt", fmt.Sprintf("127.0.0.1:%d", p4), "--slots", "64")
		c := spawn(t, nil, "controller", "--target", fmt.Sprintf("127.0.0.1:%d", p4), "--listen", fmt.Sprintf("127.0.0.1:%d", ctl),
			"--dataplane", "127.0.0.1:48864", "--slots", "128")
		if err := c.wait(t, 60*time.Second); err == nil || !strings.Contains(c.Logs(), "--slots 128: the switch at") || !strings.Contains(c.Logs(), "does not hold them") {
			t.Fatalf("controller with more slots than the switch: exit %v, stderr:\n%s", err, c.Logs())
		}
	})
}

// TestWait: switchml wait returns once a controller serves, and fails,
// naming the address, where none does.
func TestWait(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	ctx := context.Background()
	if err := runWait(ctx, []string{"--controller", f.controller, "--timeout", "30s"}); err != nil {
		t.Fatalf("wait for a serving controller: %v", err)
	}
	dead := fmt.Sprintf("127.0.0.1:%d", must(harness.FreePort("tcp")))
	err := runWait(ctx, []string{"--controller", dead, "--timeout", "500ms"})
	if err == nil || !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), "--timeout") {
		t.Fatalf("wait for nothing: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestLoopbackJobsSharedMemory runs jobs whose workers and switch exchange
// packets through shared-memory inboxes, one with loss injected on both
// sides, and one whose ranks mix shared memory and UDP.
func TestLoopbackJobsSharedMemory(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "", "--transport", "shm", "--drop", "0.005", "--seed", "5")
	if !strings.Contains(f.sw.Logs(), "transport=shm") {
		t.Fatalf("the switch does not serve shared memory:\n%s", f.sw.Logs())
	}
	shmFlags := []string{"--transport", "shm"}
	for _, js := range []jobSpec{
		{name: "shm-int32", dtype: "int32", workers: 4, elements: 300_007, iters: 3, lanes: 4, extra: shmFlags},
		{name: "shm-float32-ext", dtype: "float32", workers: 3, elements: 200_000, iters: 2, lanes: 2, pe: 1024, extra: append([]string{"--extended"}, shmFlags...)},
		{name: "shm-loss", dtype: "float32", workers: 4, elements: 200_000, iters: 2, lanes: 2,
			extra: append([]string{"--drop", "0.01", "--duplicate", "0.01", "--reorder", "0.01"}, shmFlags...)},
	} {
		t.Run(js.name, func(t *testing.T) {
			reps := runJob(t, f, nil, js)
			var retx uint64
			for r, rep := range reps {
				if rep.Transport != "shm" {
					t.Errorf("rank %d moved packets over %q, want shm", r, rep.Transport)
				}
				retx += rep.Retransmits
			}
			if js.name == "shm-loss" && retx == 0 {
				t.Fatal("loss injected but no retransmission was counted")
			}
		})
	}
	t.Run("mixed", func(t *testing.T) {
		// Ranks 0 and 2 on shared memory, 1 and 3 on UDP sockets: one
		// switch serves both.
		js := jobSpec{name: "mixed", dtype: "int32", workers: 4, elements: 150_000, iters: 2, lanes: 2}
		ps := make([]*proc, js.workers)
		for r := range ps {
			args := []string{"allreduce", "--controller", f.controller, "--job", js.name, "--rank", fmt.Sprint(r),
				"--workers", "4", "--elements", fmt.Sprint(js.elements), "--dtype", js.dtype, "--iters", "2", "--json"}
			if r%2 == 0 {
				args = append(args, shmFlags...)
			}
			ps[r] = spawn(t, nil, args...)
		}
		for r, p := range ps {
			if err := p.wait(t, 3*time.Minute); err != nil {
				t.Fatalf("rank %d: %v\n%s", r, err, p.Logs())
			}
			var rep benchmarks.WorkerReport
			if err := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &rep); err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{true: "shm", false: "udp"}[r%2 == 0]
			if !rep.Verified || rep.Transport != want {
				t.Fatalf("rank %d: verified %v over %q, want verified over %s", r, rep.Verified, rep.Transport, want)
			}
		}
	})
}
