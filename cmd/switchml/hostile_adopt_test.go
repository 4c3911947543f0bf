package main

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/jobpb"
)

// tokenJob starts a verified 2-rank job with token that outlasts a
// controller restart, and waits until it runs.
func tokenJob(t *testing.T, f switchSide, job, token string) []*proc {
	t.Helper()
	ps := make([]*proc, 2)
	for r := range ps {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", job, "--rank", fmt.Sprint(r),
			"--workers", "2", "--elements", "200000", "--iters", "200", "--lanes", "2", "--window", "32",
			"--give-up", "10m", "--token", token, "--json")
	}
	waitRunning(t, f.ctl, job, 1)
	return ps
}

// TestHostileAdoptionSpray: a controller restarts under a running 2-rank
// token job while a client sprays Watch calls naming every switch job id
// from 1 to 32, under made-up job names and under the job's own, with
// made-up sessions, tokens and secrets. The restarted controller hands the
// job back to its ranks alone (they prove themselves by the claim it kept
// in its --state file), the client claims nothing, and the job finishes
// verified.
func TestHostileAdoptionSpray(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	const job = "adopt-victim"
	ps := tokenJob(t, f, job, "victim's token")

	// The client reconnects at once, not after gRPC's usual back-off.
	conn, err := grpc.NewClient("passthrough:///"+f.controller, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1, MaxDelay: 5 * time.Millisecond},
			MinConnectTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := jobpb.NewJobServiceClient(conn)
	ctx, stop := context.WithCancel(context.Background())
	var claimed, tried atomic.Int64
	var wg sync.WaitGroup
	// One sprayer per switch job id, each call waiting for the job
	// service to be there: the calls queued while the controller is down
	// go out the moment the restarted one serves, ahead of the ranks'
	// retries.
	for id := uint32(1); id <= 32; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for _, name := range []string{fmt.Sprintf("attacker-%d", id), job} {
					secret := make([]byte, 16)
					_, _ = rand.Read(secret)
					req := &jobpb.WatchRequest{Job: name, Rank: id % 2, SessionId: mrand.Uint64() | 1, JobId: id,
						Token: "guess", RankSecret: secret}
					st, err := jobs.Watch(ctx, req, grpc.WaitForReady(true))
					if err == nil {
						var ev *jobpb.WatchEvent
						if ev, err = st.Recv(); err == nil && !ev.GetAborted() {
							claimed.Add(1)
							t.Errorf("Watch %s rank %d job id %d got a lease", name, req.Rank, id)
						}
					}
					tried.Add(1)
				}
			}
		}()
	}
	c := f.restart(t, "controller")
	verifiedReports(t, ps)
	stop()
	wg.Wait()
	if claimed.Load() != 0 {
		t.Fatalf("the client claimed %d leases", claimed.Load())
	}
	if tried.Load() < 64 {
		t.Fatalf("the client made only %d calls: the spray did not cover the job ids", tried.Load())
	}
	logs := c.Logs()
	if !strings.Contains(logs, "job found on the switch, waiting for its ranks") || !strings.Contains(logs, "job="+job) {
		t.Errorf("the restarted controller did not take the job back from its claim:\n%s", logs)
	}
	if strings.Contains(logs, "attacker-") {
		t.Errorf("the restarted controller's log names the client's made-up jobs:\n%s", logs)
	}
	t.Logf("%d Watch calls, none took a lease", tried.Load())
}

// TestHostileSecondControllerOnState: a second controller given the --state
// file of a running one is refused before it touches the switch, naming
// the file and the running controller's process; the first controller's
// claims survive, so that after it crashes and restarts it hands its job
// back to the ranks, which finish verified.
func TestHostileSecondControllerOnState(t *testing.T) {
	needProcesses(t)
	state := filepath.Join(t.TempDir(), "controller.state")
	f := startFabricWith(t, nil, "", nil, []string{"--state", state})
	const job = "state-owner"
	ps := tokenJob(t, f, job, "owner's token")

	// The second controller programs a switch of its own: its arbitration
	// on the first one's switch would fail anyway.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	other, err := harness.Start(ctx, harness.Config{Command: func(args ...string) *exec.Cmd { return binaryCmd(nil, args...) },
		ControllerArgs: []string{"--state", state}, ReadyTimeout: time.Minute})
	if err == nil {
		other.Close()
		t.Fatal("a second controller serves on the state file of a running one")
	}
	want := fmt.Sprintf("--state %s is in use by another controller (process %d)", state, f.ctl.Cmd().Process.Pid)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("a second controller on the state file: %v; want a refusal containing %q", err, want)
	}
	if b, err := os.ReadFile(state); err != nil || !strings.Contains(string(b), `"`+job+`"`) {
		t.Fatalf("the state file after the second controller (%v):\n%s", err, b)
	}

	c := f.restart(t, "controller")
	verifiedReports(t, ps)
	if logs := c.Logs(); !strings.Contains(logs, "job found on the switch, waiting for its ranks") || !strings.Contains(logs, "job="+job) {
		t.Errorf("the restarted controller did not take the job back from its claim:\n%s", logs)
	}
}
