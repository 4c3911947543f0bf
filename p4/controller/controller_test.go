package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/softswitch/softswitchtest"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

var quiet = slog.New(slog.DiscardHandler)

const testSlots = 64

// startSwitch runs a software switch's P4Runtime service on a real TCP
// listener on loopback and returns its address.
func startSwitch(t *testing.T) (string, *softswitch.Server) {
	t.Helper()
	return softswitchtest.Serve(t, softswitch.ServerConfig{DeviceID: 1, Pipeline: pipeline.Config{Slots: testSlots, MaxElements: 64, MaxWorkers: 32}, Logger: quiet})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, ctx context.Context, target string, election uint64) *p4rt.Client {
	t.Helper()
	c, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: target, ElectionID: election, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// jobHarness is a job service in front of a software switch, served over
// bufconn, plus a P4Runtime client to inspect the switch.
type jobHarness struct {
	svc  *JobService
	jobs jobpb.JobServiceClient
	sw   *p4rt.Client
	// secrets are the rank secrets joined handed out, by "job/rank".
	secrets map[string][]byte
	// state is the service's state file ("": none), for the switch at
	// target.
	state, target string
}

// secret is the rank secret joined got for a job's rank.
func (h *jobHarness) secret(job string, rank uint32) []byte {
	return h.secrets[fmt.Sprintf("%s/%d", job, rank)]
}

func newJobHarness(t *testing.T, slots int) *jobHarness {
	t.Helper()
	return newJobHarnessFor(t, slots, Target{})
}

// newJobHarnessFor serves a job service that believes the switch is target
// (the switch underneath is the software switch all the same).
func newJobHarnessFor(t *testing.T, slots int, kind Target) *jobHarness {
	t.Helper()
	return newJobHarnessWith(t, slots, kind, "")
}

// newJobHarnessWith is newJobHarnessFor with the service keeping its
// jobs' claims in the state file at state ("": none).
func newJobHarnessWith(t *testing.T, slots int, kind Target, state string) *jobHarness {
	t.Helper()
	target, _ := startSwitch(t)
	ctx := testCtx(t)
	c := dial(t, ctx, target, 1)
	if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	svc, err := NewJobService(c, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: slots, Target: kind, Logger: quiet,
		JobLimits: harnessLimits, State: state, StateTarget: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.stop)
	return &jobHarness{svc: svc, jobs: serveJobs(t, svc), sw: c, secrets: map[string][]byte{}, state: state, target: target}
}

// harnessLimits keep the time bounds of the harness's service out of the
// way of tests about other things, whose jobs may not watch; and its one
// in-memory client, which plays every job, may fill the pool.
var harnessLimits = JobLimits{LeaseGrace: time.Hour, JoinTimeout: time.Hour, MaxSlotsPerClient: -1}

// serveJobs serves svc over an in-memory connection, with the server
// options the controller serves it with, and returns a client.
func serveJobs(t *testing.T, svc *JobService) jobpb.JobServiceClient {
	t.Helper()
	return jobpb.NewJobServiceClient(serveConn(t, svc))
}

// serveConn serves svc as serveJobs does and returns the connection.
func serveConn(t *testing.T, svc *JobService) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(jobServerOptions(svc)...)
	jobpb.RegisterJobServiceServer(g, svc)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///jobs",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func regReq(job string, rank, world, lanes, window uint32, host byte) *jobpb.RegisterRequest {
	r := &jobpb.RegisterRequest{Job: job, Rank: rank, WorldSize: world, Lanes: lanes, Window: window, Elements: 64}
	for l := uint32(0); l < lanes; l++ {
		r.LaneAddresses = append(r.LaneAddresses, fmt.Sprintf("127.0.%d.%d:%d", host, rank+1, 30000+l))
	}
	return r
}

// registerAll registers every request concurrently and returns the answers.
func (h *jobHarness) registerAll(ctx context.Context, reqs ...*jobpb.RegisterRequest) ([]*jobpb.RegisterResponse, []error) {
	resps := make([]*jobpb.RegisterResponse, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], errs[i] = h.jobs.Register(ctx, r)
		}()
	}
	wg.Wait()
	return resps, errs
}

func TestRegisterProgramsTheSwitch(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	// With a token, which a restart in place needs.
	tokened := func(r *jobpb.RegisterRequest) *jobpb.RegisterRequest { r.Token = "t"; return r }
	resps, errs := h.registerAll(ctx, tokened(regReq("a", 0, 2, 2, 4, 0)), tokened(regReq("a", 1, 2, 2, 4, 0)))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	checkSessionResponses(t, resps)
	checkSessionEntries(ctx, t, h, resps[0])

	// Barrier and broadcast within the session.
	checkBarrierBroadcast(ctx, t, h, resps)
	checkBarrierRefusals(ctx, t, h, resps[0])

	// Rank 0 registering again starts a fresh session: old entries replaced.
	resps2, errs := h.registerAll(ctx, tokened(regReq("a", 0, 2, 1, 4, 0)), tokened(regReq("a", 1, 2, 1, 4, 0)))
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if resps2[0].GetSessionId() == resps[0].GetSessionId() {
		t.Fatal("restart kept the session id")
	}
	if workers, _ := h.sw.ReadWorkers(ctx); len(workers) != 2 {
		t.Fatalf("after restart with 1 lane: %d worker entries, want 2", len(workers))
	}

	// Leave: entries stay until the last rank leaves.
	checkLeaveRemovesEntries(ctx, t, h, resps2)
}

// checkSessionResponses checks that two ranks registered into one session,
// each with a rank secret of its own, and got the job's placement.
func checkSessionResponses(t *testing.T, resps []*jobpb.RegisterResponse) {
	t.Helper()
	r := resps[0]
	if resps[1].GetSessionId() != r.GetSessionId() || resps[1].GetJobId() != r.GetJobId() || resps[1].GetFirstSeq() != r.GetFirstSeq() {
		t.Fatalf("ranks got different sessions: %v / %v", resps[0], resps[1])
	}
	if len(r.GetRankSecret()) != jobcore.RankSecretLen || bytes.Equal(r.GetRankSecret(), resps[1].GetRankSecret()) {
		t.Fatalf("rank secrets %x and %x: want one of %d bytes per rank", r.GetRankSecret(), resps[1].GetRankSecret(), jobcore.RankSecretLen)
	}
	if r.GetPoolSize() != 8 || r.GetSwitchDataplane() != "127.0.0.1:48864" || r.GetSessionId() == 0 {
		t.Fatalf("response = %v", r)
	}
}

// checkSessionEntries checks the switch's worker, reply and multicast
// entries for a job of 2 ranks x 2 lanes placed as r says.
func checkSessionEntries(ctx context.Context, t *testing.T, h *jobHarness, r *jobpb.RegisterResponse) {
	t.Helper()
	workers, err := h.sw.ReadWorkers(ctx)
	if err != nil || len(workers) != 4 {
		t.Fatalf("switch has %d worker entries (%v), want 2 ranks x 2 lanes", len(workers), err)
	}
	for _, w := range workers {
		wantAddr := netip.MustParseAddrPort(fmt.Sprintf("127.0.0.%d:%d", w.Rank+1, 30000+int(w.Lane)))
		if w.Addr != wantAddr || w.JobID != r.GetJobId() || w.NumWorkers != 2 || w.PoolBase != r.GetPoolBase() || w.PoolSize != 8 {
			t.Errorf("worker entry %+v", w)
		}
	}
	replies, _ := h.sw.ReadReplies(ctx)
	groups, _ := h.sw.ReadMulticastGroups(ctx)
	if len(replies) != 4 || len(groups) != 1 {
		t.Fatalf("switch has %d reply entries and %d groups, want 4 and 1", len(replies), len(groups))
	}
	for _, reps := range groups {
		if !reflect.DeepEqual(reps, []switchjob.Replica{{EgressPort: 0, Instance: 0}, {EgressPort: 1, Instance: 1}}) {
			t.Fatalf("replicas = %v, want ranks 0 and 1", reps)
		}
	}
}

// checkBarrierBroadcast has both ranks pass a barrier, then broadcast from
// rank 1, and checks both get its data.
func checkBarrierBroadcast(ctx context.Context, t *testing.T, h *jobHarness, resps []*jobpb.RegisterResponse) {
	t.Helper()
	session := resps[0].GetSessionId()
	var wg sync.WaitGroup
	got := make([][]byte, 2)
	bErrs := make([]error, 2)
	for rank := uint32(0); rank < 2; rank++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "a", Rank: rank, SessionId: session, Name: "start", RankSecret: resps[rank].GetRankSecret()}); err != nil {
				bErrs[rank] = err
				return
			}
			var data []byte
			if rank == 1 {
				data = []byte("hello")
			}
			resp, err := h.jobs.Broadcast(ctx, &jobpb.BroadcastRequest{Job: "a", Rank: rank, SessionId: session, Root: 1, Data: data, RankSecret: resps[rank].GetRankSecret()})
			bErrs[rank] = err
			got[rank] = resp.GetData()
		}()
	}
	wg.Wait()
	for rank := range got {
		if bErrs[rank] != nil || string(got[rank]) != "hello" {
			t.Fatalf("rank %d broadcast = %q, %v", rank, got[rank], bErrs[rank])
		}
	}
}

// checkBarrierRefusals checks that a barrier of a stale session is refused
// and one nobody else joins waits until its deadline.
func checkBarrierRefusals(ctx context.Context, t *testing.T, h *jobHarness, r *jobpb.RegisterResponse) {
	t.Helper()
	if _, err := h.jobs.Barrier(ctx, &jobpb.BarrierRequest{Job: "a", Rank: 0, SessionId: r.GetSessionId() + 2, RankSecret: r.GetRankSecret()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("barrier with a stale session = %v, want FAILED_PRECONDITION", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := h.jobs.Barrier(short, &jobpb.BarrierRequest{Job: "a", Rank: 0, SessionId: r.GetSessionId(), Name: "lonely", RankSecret: r.GetRankSecret()})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("barrier nobody joins = %v, want DEADLINE_EXCEEDED", err)
	}
}

// checkLeaveRemovesEntries has the two ranks leave one after the other and
// checks the switch keeps the job's entries until the last one leaves.
func checkLeaveRemovesEntries(ctx context.Context, t *testing.T, h *jobHarness, resps []*jobpb.RegisterResponse) {
	t.Helper()
	s := resps[0].GetSessionId()
	if _, err := h.jobs.Leave(ctx, &jobpb.LeaveRequest{Job: "a", Rank: 0, SessionId: s, RankSecret: resps[0].GetRankSecret()}); err != nil {
		t.Fatal(err)
	}
	if workers, _ := h.sw.ReadWorkers(ctx); len(workers) != 2 {
		t.Fatalf("after one leave: %d worker entries, want 2", len(workers))
	}
	if _, err := h.jobs.Leave(ctx, &jobpb.LeaveRequest{Job: "a", Rank: 1, SessionId: s, RankSecret: resps[1].GetRankSecret()}); err != nil {
		t.Fatal(err)
	}
	<-h.svc.Drained() // entries go in the background
	workers, _ := h.sw.ReadWorkers(ctx)
	replies, _ := h.sw.ReadReplies(ctx)
	groups, _ := h.sw.ReadMulticastGroups(ctx)
	if len(workers)+len(replies)+len(groups) != 0 {
		t.Fatalf("after all left: %d workers, %d replies, %d groups remain", len(workers), len(replies), len(groups))
	}
	if len(h.svc.Jobs()) != 0 {
		t.Fatalf("jobs still active: %v", h.svc.Jobs())
	}
}

func TestRegisterMismatch(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	host := byte(10)
	for _, c := range []struct {
		name   string
		change func(*jobpb.RegisterRequest)
	}{
		{"world_size", func(r *jobpb.RegisterRequest) { r.WorldSize = 3 }},
		{"lanes", func(r *jobpb.RegisterRequest) {
			r.Lanes = 2
			r.LaneAddresses = append(r.LaneAddresses, "127.0.0.9:1")
		}},
		{"window", func(r *jobpb.RegisterRequest) { r.Window = 8 }},
		{"elements", func(r *jobpb.RegisterRequest) { r.Elements = 128 }},
		{"format", func(r *jobpb.RegisterRequest) { r.Format = jobpb.Format_FORMAT_EXTENDED }},
	} {
		// Each case on addresses of its own: a cancelled registration
		// leaves the controller a moment after its caller.
		host++
		t.Run(c.name, func(t *testing.T) {
			job := "mismatch-" + c.name
			first := make(chan error, 1)
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				_, err := h.jobs.Register(rctx, regReq(job, 0, 2, 1, 4, host))
				first <- err
			}()
			// Wait until rank 0 is in, so rank 1's request is compared to it.
			for {
				h.svc.mu.Lock()
				in := h.svc.core.Has(job)
				h.svc.mu.Unlock()
				if in {
					break
				}
				select {
				case err := <-first:
					t.Fatalf("rank 0 did not get in: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			r1 := regReq(job, 1, 2, 1, 4, host)
			c.change(r1)
			_, err := h.jobs.Register(ctx, r1)
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("mismatched %s = %v, want FAILED_PRECONDITION naming it", c.name, err)
			}
			cancel()
			<-first
		})
	}
	// Requests wrong on their own are INVALID_ARGUMENT.
	bad := regReq("x", 2, 2, 1, 4, 0)
	if _, err := h.jobs.Register(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("rank >= world = %v", err)
	}
	bad = regReq("x", 0, 1, 1, 4, 0)
	bad.LaneAddresses[0] = "0.0.0.0:5"
	if _, err := h.jobs.Register(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unspecified lane address = %v", err)
	}
	bad = regReq("x", 0, 1, 1, 4, 0)
	bad.Elements = 100
	if _, err := h.jobs.Register(ctx, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "compatible") {
		t.Fatalf("compat with 100 elements = %v", err)
	}
}

func TestRegisterDeadlineNamesMissingRanks(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resps, errs := h.registerAll(short, regReq("late", 0, 4, 1, 4, 0), regReq("late", 2, 4, 1, 4, 0))
	for i, err := range errs {
		if resps[i] != nil || status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "ranks 1 and 3 of 4") {
			t.Fatalf("register %d = %v, want DEADLINE_EXCEEDED naming ranks 1 and 3", i, err)
		}
	}
	if ws, _ := h.sw.ReadWorkers(ctx); len(ws) != 0 {
		t.Fatalf("incomplete job installed %d entries", len(ws))
	}
	// The ranks that timed out are forgotten: a complete retry works.
	var reqs []*jobpb.RegisterRequest
	for r := uint32(0); r < 4; r++ {
		reqs = append(reqs, regReq("late", r, 4, 1, 4, 0))
	}
	_, errs = h.registerAll(ctx, reqs...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("retry rank %d: %v", i, err)
		}
	}
}

func TestConcurrentJobsGetDisjointPartitions(t *testing.T) {
	h := newJobHarness(t, 32)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	results := make([][]*jobpb.RegisterResponse, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job := fmt.Sprintf("job%d", i)
			resps, errs := h.registerAll(ctx, regReq(job, 0, 2, 2, 4, byte(i)), regReq(job, 1, 2, 2, 4, byte(i)))
			for _, err := range errs {
				if err != nil {
					t.Errorf("%s: %v", job, err)
				}
			}
			results[i] = resps
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	used := make([]string, 32)
	ids := map[uint32]bool{}
	for i, rs := range results {
		r := rs[0]
		ids[r.GetJobId()] = true
		for s := r.GetPoolBase(); s < r.GetPoolBase()+r.GetPoolSize(); s++ {
			if used[s] != "" {
				t.Fatalf("slot %d given to %s and job%d", s, used[s], i)
			}
			used[s] = fmt.Sprintf("job%d", i)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("job ids not distinct: %v", ids)
	}
	workers, _ := h.sw.ReadWorkers(ctx)
	groups, _ := h.sw.ReadMulticastGroups(ctx)
	if len(workers) != 12 || len(groups) != 3 {
		t.Fatalf("switch has %d workers and %d groups, want 12 and 3", len(workers), len(groups))
	}
	// 24 of 32 slots used: a job needing 16 does not fit.
	_, errs := h.registerAll(ctx, regReq("big", 0, 1, 2, 8, 9))
	if status.Code(errs[0]) != codes.ResourceExhausted || !strings.Contains(errs[0].Error(), "no room") {
		t.Fatalf("job beyond capacity = %v, want RESOURCE_EXHAUSTED", errs[0])
	}
	// Once the two jobs at the bottom of the pool leave, their slots are
	// reused.
	for i, rs := range results {
		if rs[0].GetPoolBase() >= 16 {
			continue
		}
		for r := uint32(0); r < 2; r++ {
			if _, err := h.jobs.Leave(ctx, &jobpb.LeaveRequest{Job: fmt.Sprintf("job%d", i), Rank: r, SessionId: rs[0].GetSessionId(), RankSecret: rs[r].GetRankSecret()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	resps, errs := h.registerAll(ctx, regReq("big", 0, 1, 2, 8, 9))
	if errs[0] != nil || resps[0].GetPoolSize() != 16 || resps[0].GetPoolBase() != 0 {
		t.Fatalf("big job after a leave = %v, %v", resps[0], errs[0])
	}
}

// TestRunEndToEnd starts the controller daemon against a software switch
// over TCP and registers a one-rank job through its real listener.
func TestRunEndToEnd(t *testing.T) {
	target, _ := startSwitch(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Target: target, Listen: "127.0.0.1:0", Slots: testSlots, ElectionID: 5, Logger: quiet,
			Ready: func(a net.Addr) { addr <- a }})
	}()
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
	defer conn.Close()
	resp, err := jobpb.NewJobServiceClient(conn).Register(ctx, regReq("solo", 0, 1, 1, 4, 0))
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(target)
	if resp.GetSwitchDataplane() != net.JoinHostPort(host, "48864") || resp.GetPoolSize() != 4 {
		t.Fatalf("response = %v", resp)
	}
	// A second controller with a lower election id that yields does not
	// take over.
	err = Run(ctx, Config{Target: target, Listen: "127.0.0.1:0", ElectionID: 2, Logger: quiet, YieldPrimary: true})
	if !errors.Is(err, p4rt.ErrNotPrimary) {
		t.Fatalf("second Run = %v, want p4rt.ErrNotPrimary", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}
