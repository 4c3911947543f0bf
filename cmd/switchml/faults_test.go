package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
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
	time.Sleep(3 * time.Second)
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
