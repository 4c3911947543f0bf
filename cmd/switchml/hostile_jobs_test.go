package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/jobpb"
)

// Hostile clients of the job service, speaking its gRPC API directly: each
// test shows the controller's refusal and a real job running on, verified.

// jobClient dials the job service at addr from the local IP from (empty:
// the kernel's choice), as a client of that identity.
func jobClient(t *testing.T, addr, from string) jobpb.JobServiceClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if from != "" {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return jobpb.NewJobServiceClient(conn)
}

// hostileRegistration is a registration of a job of world ranks from a
// client that owns no socket: its lane address is made up.
func hostileRegistration(job string, world, window uint32, i int) *jobpb.RegisterRequest {
	return &jobpb.RegisterRequest{Job: job, Rank: 0, WorldSize: world, Lanes: 1, Window: window, Elements: 64,
		LaneAddresses: []string{fmt.Sprintf("127.%d.%d.%d:%d", 10+i/62500, i/250%250, i%250+1, 20000+i%40000)}}
}

// jobState is the state the controller's status gives job name ("" when
// it lists no such job).
func jobState(t *testing.T, jobs jobpb.JobServiceClient, name string) (string, *jobpb.StatusResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := jobs.Status(ctx, &jobpb.StatusRequest{SkipSwitchCounters: true}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, j := range st.GetJobs() {
		if j.GetName() == name {
			return j.GetState(), st
		}
	}
	return "", st
}

// verifiedReports waits for every rank of a job started with --json and
// checks that each finished with verified results.
func verifiedReports(t *testing.T, ps []*proc) {
	t.Helper()
	for r, p := range ps {
		if err := p.wait(t, 5*time.Minute); err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, p.Logs())
		}
		var rep benchmarks.WorkerReport
		if err := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &rep); err != nil || !rep.Verified || rep.Error != "" {
			t.Fatalf("rank %d: report %+v (%v): want verified results", r, rep, err)
		}
	}
}

// longNumber finds numbers as long as a session id's decimal form
// usually is (a random 64-bit value has ten or more digits but for a
// fraction of 2^-30 of them).
var longNumber = regexp.MustCompile(`\d{10,}`)

// TestHostileSessionIDWithoutSecret: an attacker who names a token job's
// session by any id it can find (a guess, the controller's log, the
// controller's answers) but lacks a rank's secret cannot abort it, end it
// by a lease, or join its barriers and broadcasts; no answer names a
// session id; the job runs to the end, verified.
func TestHostileSessionIDWithoutSecret(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	ps := make([]*proc, 2)
	for r := range ps {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "c2", "--rank", fmt.Sprint(r),
			"--workers", "2", "--elements", "20000", "--iters", "1500", "--token", "owner's token", "--json")
	}
	waitRunning(t, f.ctl, "c2", 1)
	jobs := jobClient(t, f.controller, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// What an attacker can learn: a guess, the controller's log, and what
	// the controller answers to a probe.
	ids := map[uint64]bool{1: true, 7547731872787113689: true}
	learn := func(text string) {
		for _, m := range regexp.MustCompile(`\d{4,20}`).FindAllString(text, -1) {
			if id, err := strconv.ParseUint(m, 10, 64); err == nil {
				ids[id] = true
			}
		}
	}
	learn(f.ctl.Logs())
	_, err := jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "c2", Rank: 1, SessionId: 1, Name: "probe"})
	if status.Code(err) == codes.OK {
		t.Fatal("a barrier of session 1 went through")
	}
	learn(err.Error())
	_, st := jobState(t, jobs, "c2")
	for _, j := range st.GetJobs() {
		ids[uint64(j.GetJobId())] = true
	}

	var texts []string
	refused := func(what string, err error) {
		t.Helper()
		if err != nil {
			texts = append(texts, what+": "+err.Error())
		}
	}
	randomSecret := make([]byte, 16)
	rand.Read(randomSecret)
	for id := range ids {
		for rank := range uint32(2) {
			for _, secret := range [][]byte{nil, randomSecret} {
				short, stop := context.WithTimeout(ctx, 2*time.Second)
				_, err := jobs.Barrier(short, &jobpb.BarrierRequest{Job: "c2", Rank: rank, SessionId: id, Name: "iter-3", RankSecret: secret})
				if err == nil {
					t.Errorf("barrier of rank %d with session id %d and no secret went through", rank, id)
				}
				refused("barrier", err)
				_, err = jobs.Broadcast(short, &jobpb.BroadcastRequest{Job: "c2", Rank: rank, Root: rank, SessionId: id, Name: "b", Data: []byte("x"), RankSecret: secret})
				if err == nil {
					t.Errorf("broadcast of rank %d with session id %d and no secret went through", rank, id)
				}
				refused("broadcast", err)
				_, err = jobs.Abort(short, &jobpb.AbortRequest{Job: "c2", Rank: rank, SessionId: id, Reason: "hostile abort", RankSecret: secret})
				refused("abort", err)
				// A lease taken and dropped would end the job as a lost rank.
				stream, err := jobs.Watch(short, &jobpb.WatchRequest{Job: "c2", Rank: rank, SessionId: id, Token: "guess", RankSecret: secret})
				if err == nil {
					if _, err = stream.Recv(); err == nil {
						t.Errorf("lease of rank %d with session id %d and no secret taken", rank, id)
					}
				}
				refused("watch", err)
				stop()
			}
		}
	}
	for _, text := range texts {
		if m := longNumber.FindString(text); m != "" {
			t.Errorf("an answer names %s: %s", m, text)
		}
	}
	if state, _ := jobState(t, jobs, "c2"); state != "active" {
		t.Fatalf("the job is %q after the attacks, want active (if it simply finished first, give it more --iters)", state)
	}
	verifiedReports(t, ps)
	for r, p := range ps {
		if strings.Contains(p.Logs(), "hostile") {
			t.Errorf("rank %d heard the attacker:\n%s", r, p.Logs())
		}
	}
	t.Logf("%d session ids tried, %d refusals, none naming a session id", len(ids), len(texts))
}

// TestHostileRegistrationsWithoutLease: one client cannot take the whole
// pool (its share is half of it by default); two clients whose
// registrations take the pool between them and never open their leases
// hold it no longer than the lease grace (its default, 10 s): the pool is
// free again once it has passed, the controller saying why, and a job
// that needs a client's whole share runs, verified.
func TestHostileRegistrationsWithoutLease(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	jobs := jobClient(t, f.controller, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := jobClient(t, f.controller, "127.0.0.4").Register(ctx, hostileRegistration("hog", 1, 8192, 9), grpc.WaitForReady(true))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "over the limit of 4096 per client (the controller's --max-slots-per-client)") {
		t.Fatalf("one client's registration of the whole pool: %v, want ResourceExhausted naming its share and the flag", err)
	}
	start := time.Now()
	for i, from := range []string{"127.0.0.2", "127.0.0.3"} {
		if _, err := jobClient(t, f.controller, from).Register(ctx, hostileRegistration(fmt.Sprintf("squat-%d", i), 1, 4096, i), grpc.WaitForReady(true)); err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	_, st := jobState(t, jobs, "")
	if st.GetSlotsInUse() != 8192 {
		t.Fatalf("%d of %d slots in use after the two registrations, want 8192", st.GetSlotsInUse(), st.GetSlots())
	}
	for {
		if _, st = jobState(t, jobs, ""); st.GetSlotsInUse() == 0 {
			break
		}
		// The bound itself (the lease grace) is the core's, tested on a
		// fake clock; here the pool must come free, whatever the load.
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("%d slots still in use %v after registrations that never took their leases", st.GetSlotsInUse(), time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the pool was free again %.1f s after the registrations", time.Since(start).Seconds())
	for i := range 2 {
		if !strings.Contains(f.ctl.Logs(), fmt.Sprintf(`squat-%d why="aborted: rank 0 never took its lease (Watch) within 10s"`, i)) {
			t.Errorf("the controller's log does not say why squat-%d ended:\n%s", i, f.ctl.Logs())
		}
	}
	runJob(t, f, nil, jobSpec{name: "whole-share", dtype: "int32", workers: 2, elements: 50_000, iters: 2, lanes: 16, window: 256})
}

// TestHostileHugeJobName: a job name of 1 MB is refused before the
// controller keeps or logs it, and a job beside runs, verified.
func TestHostileHugeJobName(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	jobs := jobClient(t, f.controller, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	huge := strings.Repeat("j", 1<<20)
	for i := range 20 {
		_, err := jobs.Register(ctx, hostileRegistration(huge, 1, 4, i), grpc.WaitForReady(true))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "want at most 256") || len(err.Error()) > 300 {
			t.Fatalf("a 1 MB job name: %.300v, want a short InvalidArgument naming the limit", err)
		}
	}
	if state, st := jobState(t, jobs, huge); state != "" || len(st.GetJobs()) != 0 {
		t.Fatalf("the controller holds %d jobs after the refusals", len(st.GetJobs()))
	}
	runJob(t, f, nil, jobSpec{name: "beside", dtype: "float32", workers: 2, elements: 50_000, iters: 2})
	if n := len(f.ctl.Logs()); n > 64<<10 || strings.Contains(f.ctl.Logs(), strings.Repeat("j", 300)) {
		t.Fatalf("the controller logged %d bytes, with the name in them", n)
	}
}

// TestHostileFloodFromOneIdentity: a client that holds open 10,000
// registrations of jobs that never gather is stopped at the per-client
// limit (its default, 64), and a job from another identity runs, verified,
// while the flood holds its share.
func TestHostileFloodFromOneIdentity(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	flooder := jobClient(t, f.controller, "127.0.0.2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const flood = 10_000
	var held, refused, other atomic.Int64
	var firstRefusal atomic.Value
	var wg sync.WaitGroup
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := flooder.Register(ctx, hostileRegistration(fmt.Sprintf("flood-%d", i), 2, 4, i), grpc.WaitForReady(true))
			switch status.Code(err) {
			case codes.ResourceExhausted:
				refused.Add(1)
				firstRefusal.CompareAndSwap(nil, err.Error())
			case codes.Canceled:
				held.Add(1) // held open until the test let go
			default:
				other.Add(1)
			}
		}()
	}
	// Every registration beyond the limit is refused at once; those within
	// it stay open.
	deadline := time.Now().Add(2 * time.Minute)
	for refused.Load()+other.Load() < flood-64 {
		if time.Now().After(deadline) {
			t.Fatalf("%d refused, %d otherwise answered of %d: the flood was not stopped at 64 jobs", refused.Load(), other.Load(), flood)
		}
		time.Sleep(50 * time.Millisecond)
	}
	msg, _ := firstRefusal.Load().(string)
	if other.Load() != 0 || !strings.Contains(msg, "--max-jobs-per-client") || !strings.Contains(msg, "addr:127.0.0.2") || strings.Contains(msg, "flood-") {
		t.Fatalf("%d answered otherwise; a refusal says %q: want the limit, its flag and the identity, not the other jobs", other.Load(), msg)
	}
	_, st := jobState(t, jobClient(t, f.controller, ""), "")
	if n := len(st.GetJobs()); n != 64 {
		t.Fatalf("the controller holds %d jobs during the flood, want the flooder's 64", n)
	}
	runJob(t, f, nil, jobSpec{name: "despite-flood", dtype: "int32", workers: 2, elements: 50_000, iters: 2, bind: []string{"127.0.0.1", "127.0.0.1"}})
	cancel()
	wg.Wait()
	if held.Load() != 64 {
		t.Fatalf("%d registrations were held open, want 64", held.Load())
	}
}

// TestHostileManyIterations: a run of more iterations than the controller
// holds barrier names at once (two names each, one per iteration) runs to
// the end, verified: names whose rounds are over are forgotten. And a run
// that fails after iterations that checked out is not reported verified.
func TestHostileManyIterations(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	runJob(t, f, nil, jobSpec{name: "iters", dtype: "int32", workers: 2, elements: 256, iters: 600, lanes: 1, window: 8})

	// Rank 1 stops after two iterations; rank 0 waits for it at its
	// third barrier until its deadline.
	ps := make([]*proc, 2)
	for r, iters := range []string{"3", "1"} {
		ps[r] = spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "short", "--rank", fmt.Sprint(r), "--workers", "2",
			"--elements", "256", "--iters", iters, "--join-timeout", "5s", "--json")
	}
	for r, p := range ps {
		err := p.wait(t, 2*time.Minute)
		var rep benchmarks.WorkerReport
		if jerr := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &rep); jerr != nil {
			t.Fatalf("rank %d: no report (%v): exit %v\n%s", r, jerr, err, p.Logs())
		}
		if failed := err != nil || rep.Error != ""; failed == (r == 1) || rep.Verified == failed {
			t.Fatalf("rank %d: exit %v, report %+v: want rank 0 to fail unverified and rank 1 to pass verified", r, err, rep)
		}
	}
}
