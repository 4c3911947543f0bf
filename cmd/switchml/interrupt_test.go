package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/internal/harness"
)

// TestInterruptedRank: Ctrl-C (SIGINT) to one rank of three mid-run. That
// rank exits as interrupted (status 130); the other two fail with the
// job's abort, naming the rank and the interrupt, not a timeout; the
// controller logs the cause; and the job's name and slots are free again.
func TestInterruptedRank(t *testing.T) {
	needProcesses(t)
	// The job takes every slot (lanes*window = 64), so its client may
	// hold the whole pool.
	f := startFabricWith(t, nil, "", []string{"--slots", "64"}, []string{"--slots", "64", "--max-slots-per-client", "-1"})
	ps := longJob(t, f, "sigint")
	fault := time.Now()
	if err := ps[1].Cmd().Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	failNaming(t, []*proc{ps[0], ps[2]}, fault, "job aborted", "aborted by rank 1: interrupted")
	err := ps[1].wait(t, 2*time.Minute)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitInterrupted || !strings.Contains(ps[1].Logs(), "interrupted") {
		t.Errorf("the interrupted rank: exit %v, stderr:\n%s\nwant status %d saying it was interrupted", err, ps[1].Logs(), exitInterrupted)
	}
	if !strings.Contains(f.ctl.Logs(), `reason="interrupted`) {
		t.Errorf("the controller did not log the interrupt:\n%s", f.ctl.Logs())
	}
	runJob(t, f, nil, jobSpec{name: "sigint", dtype: "int32", workers: faultJobWorkers, elements: 50_000, iters: 2, lanes: 2, window: 32})
}

// TestInterruptInEachStep: SIGINT to one rank of three, each running a
// 16M-value float32 job (1M under the race detector), in each of its long
// steps: computing the expected sums, filling its tensor, inside an
// allreduce, verifying the result. The interrupt is sent once the rank
// says the step started (--progress lines). Wherever it lands, that rank
// exits as interrupted and its two peers fail naming it and the
// interrupt (their reports' causes: interrupted, rank-failed), whether they wait for it in a call or are busy with a step of
// their own. The exit times are logged; the deadlines are only a guard
// against a hang.
func TestInterruptInEachStep(t *testing.T) {
	needProcesses(t)
	f := startFabricWith(t, nil, "", []string{"--slots", "64"}, []string{"--slots", "64", "--max-slots-per-client", "-1"})
	// The race detector makes each value's work ten times slower or
	// more: a sixteenth of the values keeps the steps about as long.
	elements := 16 << 20
	if raceEnabled {
		elements = 1 << 20
	}
	for _, step := range []struct{ name, line string }{
		{"expected-sums", "computing the expected sums"},
		{"fill", "filling the tensor of allreduce 0"},
		{"allreduce", "allreduce 0 of"},
		{"verify", "verifying allreduce 0"},
	} {
		t.Run(step.name, func(t *testing.T) {
			ps := make([]*proc, faultJobWorkers)
			for r := range ps {
				ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "sigint-"+step.name, "--rank", fmt.Sprint(r),
					"--workers", fmt.Sprint(faultJobWorkers), "--elements", fmt.Sprint(elements), "--iters", "2", "--lanes", "2", "--window", "32",
					"--give-up", "10m", "--progress", "lines", "--json")
			}
			waitLog(t, ps[1], fmt.Sprintf("rank 1/%d: %s", faultJobWorkers, step.line))
			if err := ps[1].Cmd().Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			fault := time.Now()
			for r, p := range ps {
				err := p.wait(t, 2*time.Minute)
				took := time.Since(fault)
				msg := p.Logs()
				var exit *exec.ExitError
				var rep benchmarks.WorkerReport
				if jerr := json.Unmarshal(p.Stdout(), &rep); jerr != nil {
					t.Errorf("rank %d: no report (%v): %q", r, jerr, p.Stdout())
				}
				if r == 1 {
					if !errors.As(err, &exit) || exit.ExitCode() != exitInterrupted || !strings.Contains(msg, "switchml allreduce: interrupted") || rep.Cause != "interrupted" {
						t.Errorf("the interrupted rank: exit %v, cause %q, stderr:\n%s\nwant status %d and the cause interrupted", err, rep.Cause, msg, exitInterrupted)
					}
				} else if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(msg, "aborted by rank 1: interrupted") || rep.Cause != "rank-failed" {
					t.Errorf("rank %d: exit %v, cause %q, stderr:\n%s\nwant a failure naming rank 1's interrupt, the cause rank-failed", r, err, rep.Cause, msg)
				}
				msg = strings.TrimSpace(msg)
				t.Logf("rank %d exited %.2f s after the SIGINT: %s", r, took.Seconds(), msg[strings.LastIndex(msg, "\n")+1:])
			}
		})
	}
}

// TestNoController: allreduce pointed at an address where nothing listens
// fails with ErrControllerUnreachable naming the address (after
// --connect-timeout, not the join timeout).
func TestNoController(t *testing.T) {
	needProcesses(t)
	port, err := harness.FreePort("tcp")
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	w := spawn(t, nil, "allreduce", "--controller", addr, "--job", "nobody", "--workers", "2", "--join-timeout", "10m")
	if err := w.wait(t, 2*time.Minute); err == nil || !strings.Contains(w.Logs(), "controller unreachable: no connection to "+addr+" within 5s") {
		t.Errorf("exit %v, stderr:\n%s\nwant an unreachable controller named", err, w.Logs())
	}
}

// TestWrongWorkersEndsTheJob: one rank started with another --workers than
// its peers. Whichever registered first, every rank exits at once (not
// after the join timeout, ten minutes here) with the mismatch as the
// cause.
func TestWrongWorkersEndsTheJob(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	var ps []*proc
	for r, n := range []int{3, 3, 4} {
		ps = append(ps, spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "mismatch", "--rank", fmt.Sprint(r),
			"--workers", fmt.Sprint(n), "--elements", "1000", "--join-timeout", "10m"))
	}
	for r, p := range ps {
		err := p.wait(t, 2*time.Minute)
		if err == nil || !strings.Contains(p.Logs(), "world_size") {
			t.Errorf("rank %d: exit %v, stderr:\n%s\nwant a failure naming the world size", r, err, p.Logs())
		}
	}
}

// TestStoppedRankIsNamed: one rank of three is stopped (SIGSTOP) mid-run.
// Its peers give up on the switch after --give-up and exit naming it as
// stopped; the controller, finding the switch answering, records no switch
// loss.
func TestStoppedRankIsNamed(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	ps := longJob(t, f, "stopped", "5s")
	stopped := ps[1].Cmd().Process
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopped.Signal(syscall.SIGCONT) })
	// Rank 1 stops inside an allreduce (its peers' slots wait for it) or
	// between two (its peers wait for it at a barrier): either way they
	// name it.
	for r, p := range []*proc{ps[0], ps[2]} {
		err := p.wait(t, 2*time.Minute)
		msg := p.Logs()
		if err == nil || !strings.Contains(msg, "rank 1 stopped sending") && !strings.Contains(msg, "rank 1 did not come") {
			t.Errorf("rank %d: exit %v, stderr:\n%s\nwant a failure naming rank 1", 2*r, err, msg)
		}
	}
	var out bytes.Buffer
	if err := statusCommand(context.Background(), []string{"--controller", f.controller, "--json", "--no-counters"}, &out); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Ended map[string]string `json:"ended"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if st.Ended["switch_lost"] != "0" || st.Ended["rank_failed"] != "1" {
		t.Errorf("jobs ended %v; want one rank_failed and no switch_lost", st.Ended)
	}
}
