package jobcore

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// rig steps a core by hand: it hands out waiters, keeps the answers and
// the switch work the core asks for, and lets the test set the time.
type rig struct {
	t       *testing.T
	c       *Core
	now     time.Time
	last    Waiter
	answers map[Waiter]Answer
	// regs are the registrations by Waiter, secrets the rank secrets
	// their answers carried, by job and rank.
	regs     map[Waiter]*jobpb.RegisterRequest
	secrets  map[string][]byte
	installs []Install
	removals []Removal
	forgets  []uint32
}

// The rig's time bounds: long enough that tests about other things never
// reach them.
const (
	rigDrainWait   = time.Minute
	rigLeaseGrace  = 10 * time.Hour
	rigJoinTimeout = 20 * time.Hour
)

// quiet discards the core's log.
var quiet = slog.New(slog.DiscardHandler)

// regReq is rank's registration of a job of world ranks, with lanes lanes
// on addresses of host and a window of window slots per lane.
func regReq(job string, rank, world, lanes, window uint32, host byte) *jobpb.RegisterRequest {
	r := &jobpb.RegisterRequest{Job: job, Rank: rank, WorldSize: world, Lanes: lanes, Window: window, Elements: 64}
	for l := uint32(0); l < lanes; l++ {
		r.LaneAddresses = append(r.LaneAddresses, fmt.Sprintf("127.0.%d.%d:%d", host, rank+1, 30000+l))
	}
	return r
}

// withToken sets req's token.
func withToken(req *jobpb.RegisterRequest, token string) *jobpb.RegisterRequest {
	req.Token = token
	return req
}

// rigMaxWorkers is the largest job the rig's switch serves.
const rigMaxWorkers = 32

// rigAdmit is what the rig's switch takes: the compatible header's packet
// sizes, and jobs of up to rigMaxWorkers ranks.
func rigAdmit(r *jobpb.RegisterRequest, _ []netip.AddrPort) error {
	switch {
	case r.GetFormat() == jobpb.Format_FORMAT_COMPAT && !slices.Contains([]uint32{32, 64, 128, 256}, r.GetElements()):
		return Invalid("%d values per packet: the switch aggregates 32, 64, 128 or 256 with the compatible header", r.GetElements())
	case r.GetWorldSize() > rigMaxWorkers:
		return &TooBig{Refuse(codes.InvalidArgument, "world size %d: the switch serves at most %d workers per job", r.GetWorldSize(), rigMaxWorkers).(*Refusal)}
	}
	return nil
}

// rigClient is the identity the rig registers as.
const rigClient = "addr:127.0.0.1"

func newRig(t *testing.T, slots int) *rig {
	t.Helper()
	var draws uint64
	c := New(Config{
		Dataplane: netip.MustParseAddrPort("10.0.0.254:48864"), Slots: slots, Admit: rigAdmit, Logger: quiet,
		Rand:      func() uint64 { draws++; return draws * 0x9e3779b97f4a7c15 },
		DrainWait: rigDrainWait, LeaseGrace: rigLeaseGrace, JoinTimeout: rigJoinTimeout,
	})
	return &rig{t: t, c: c, now: time.Unix(1_000_000, 0), answers: map[Waiter]Answer{},
		regs: map[Waiter]*jobpb.RegisterRequest{}, secrets: map[string][]byte{}}
}

// collect takes what the core asked for since the last step.
func (r *rig) collect() {
	r.t.Helper()
	fx := r.c.Ready()
	for _, a := range fx.Answers {
		if _, dup := r.answers[a.to]; dup {
			r.t.Fatalf("waiter %d answered twice", a.to)
		}
		r.answers[a.to] = a
		if req := r.regs[a.to]; req != nil && a.resp.GetRankSecret() != nil {
			r.secrets[fmt.Sprintf("%s/%d", req.GetJob(), req.GetRank())] = a.resp.GetRankSecret()
		}
	}
	r.installs = append(r.installs, fx.Installs...)
	r.removals = append(r.removals, fx.Removals...)
	r.forgets = append(r.forgets, fx.Forgets...)
}

func (r *rig) waiter() Waiter {
	r.last++
	return r.last
}

// register hands the core a registration at the rig's time.
func (r *rig) register(req *jobpb.RegisterRequest) (Waiter, error) {
	r.t.Helper()
	w := r.waiter()
	r.regs[w] = req
	err := r.c.admit(w, req, rigClient, r.now)
	r.collect()
	return w, err
}

// admit checks a registration and registers it, as the driver does: a
// Refusal by Check ends the gathering job it was for when waiting cannot
// mend it.
func (c *Core) admit(w Waiter, req *jobpb.RegisterRequest, client string, now time.Time) error {
	chk, err := c.Check(req, netip.Addr{})
	if err != nil {
		c.CannotForm(req, client, err, now)
		return err
	}
	return c.Register(w, chk, client, now)
}

// mustRegister registers every request, which must be accepted.
func (r *rig) mustRegister(reqs ...*jobpb.RegisterRequest) []Waiter {
	r.t.Helper()
	var ws []Waiter
	for _, req := range reqs {
		w, err := r.register(req)
		if err != nil {
			r.t.Fatalf("register %s rank %d: %v", req.GetJob(), req.GetRank(), err)
		}
		ws = append(ws, w)
	}
	return ws
}

// takeOne returns the one piece of switch work of a kind the core asked
// for since the last take.
func takeOne[W any](t *testing.T, what string, asked *[]W) W {
	t.Helper()
	if len(*asked) != 1 {
		t.Fatalf("%d %s asked for, want 1", len(*asked), what)
	}
	w := (*asked)[0]
	*asked = nil
	return w
}

func (r *rig) takeInstall() Install {
	r.t.Helper()
	return takeOne(r.t, "installs", &r.installs)
}

func (r *rig) takeRemoval() Removal {
	r.t.Helper()
	return takeOne(r.t, "removals", &r.removals)
}

// run gathers a job of world ranks (lanes 1, window 4, addresses of host),
// installs it and returns the response its ranks got.
func (r *rig) run(job string, world uint32, host byte) *jobpb.RegisterResponse {
	r.t.Helper()
	return r.runWith(job, world, host, "")
}

// runWith is run with every rank registering with token.
func (r *rig) runWith(job string, world uint32, host byte, token string) *jobpb.RegisterResponse {
	r.t.Helper()
	var reqs []*jobpb.RegisterRequest
	for rank := range world {
		reqs = append(reqs, withToken(regReq(job, rank, world, 1, 4, host), token))
	}
	ws := r.mustRegister(reqs...)
	in := r.takeInstall()
	r.c.Installed(in.Gen, nil, r.now)
	r.collect()
	resp := r.answer(ws[0]).resp
	if resp == nil {
		r.t.Fatalf("job %s installed, rank 0 answered %+v", job, r.answer(ws[0]))
	}
	return resp
}

// retiredOne runs a one-rank job "old" at slots [0, 4) on host 1 and lets
// it finish: its entries are then draining, and the removal is returned.
func (r *rig) retiredOne() Removal {
	r.t.Helper()
	old := r.run("old", 1, 1)
	if err := r.c.Leave(&jobpb.LeaveRequest{Job: "old", SessionId: old.GetSessionId(), RankSecret: r.sec("old", 0)}); err != nil {
		r.t.Fatal(err)
	}
	r.collect()
	return r.takeRemoval()
}

// answer returns w's answer, which must have come.
func (r *rig) answer(w Waiter) Answer {
	r.t.Helper()
	a, ok := r.answers[w]
	if !ok {
		r.t.Fatalf("Waiter %d not answered", w)
	}
	return a
}

func (r *rig) pending(ws ...Waiter) {
	r.t.Helper()
	for _, w := range ws {
		if a, ok := r.answers[w]; ok {
			r.t.Fatalf("Waiter %d answered early: %+v", w, a)
		}
	}
}

// sec is the secret of a job's rank: the one its last registration was
// answered with, else the one the tests give ranks that take a job back
// from the switch.
func (r *rig) sec(job string, rank uint32) []byte {
	if s, ok := r.secrets[fmt.Sprintf("%s/%d", job, rank)]; ok {
		return s
	}
	return adoptedSecret(rank)
}

func adoptedSecret(rank uint32) []byte {
	return []byte(fmt.Sprintf("adopted-%08d", rank))[:RankSecretLen]
}

// watch takes a rank's lease, with the rank's secret unless req has one.
func (r *rig) watch(req *jobpb.WatchRequest) Waiter {
	r.t.Helper()
	if req.RankSecret == nil {
		req.RankSecret = r.sec(req.GetJob(), req.GetRank())
	}
	w := r.waiter()
	if err := r.c.Watch(w, req); err != nil {
		r.t.Fatalf("watch %s rank %d: %v", req.GetJob(), req.GetRank(), err)
	}
	r.collect()
	return w
}

func (r *rig) barrier(job string, rank uint32, session uint64, name string, seq uint64) (Waiter, error) {
	r.t.Helper()
	w := r.waiter()
	err := r.c.Barrier(w, &jobpb.BarrierRequest{Job: job, Rank: rank, SessionId: session, Name: name, Seq: seq, RankSecret: r.sec(job, rank)})
	r.collect()
	return w, err
}

func wantRefusal(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	if CodeOf(err) != code || !strings.Contains(fmt.Sprint(err), text) {
		t.Fatalf("got %v (%v), want %v containing %q", err, CodeOf(err), code, text)
	}
}

func TestCoreGathersThenInstalls(t *testing.T) {
	r := newRig(t, 64)
	w0, _ := r.register(regReq("a", 0, 3, 2, 4, 1))
	w2, _ := r.register(regReq("a", 2, 3, 2, 4, 1))
	if len(r.installs) != 0 || r.c.jobs["a"].state != jobGathering {
		t.Fatalf("installs %v, state %v before the last rank, want none and gathering", r.installs, r.c.jobs["a"].state)
	}
	w1, _ := r.register(regReq("a", 1, 3, 2, 4, 1))
	in := r.takeInstall()
	p := in.Place
	if p.PoolBase != 0 || p.PoolSize != 8 || len(p.Workers) != 6 || len(p.Replies) != 6 || len(p.Replicas) != 3 {
		t.Fatalf("install %+v, want slots [0, 8) and 3 ranks x 2 lanes", in)
	}
	if p.JobID != 1 || p.World != 3 || p.Group != 1 {
		t.Errorf("placement %+v, want job id 1 of 3 ranks in group 1", p)
	}
	for _, w := range p.Workers {
		want := netip.MustParseAddrPort(fmt.Sprintf("127.0.1.%d:%d", w.Rank+1, 30000+int(w.Lane)))
		if w.Addr != want {
			t.Errorf("lane %+v, want address %v", w, want)
		}
	}
	r.pending(w0, w1, w2)
	if got := r.c.ActiveJobs(); len(got) != 0 {
		t.Fatalf("active jobs while installing: %v", got)
	}
	r.c.Installed(in.Gen, nil, r.now)
	r.collect()
	resp := r.answer(w0).resp
	secrets := map[string]bool{}
	for _, w := range []Waiter{w0, w1, w2} {
		got := r.answer(w).resp
		if len(got.GetRankSecret()) != RankSecretLen || secrets[string(got.GetRankSecret())] {
			t.Fatalf("rank secret %x: want %d bytes, one of its own per rank", got.GetRankSecret(), RankSecretLen)
		}
		secrets[string(got.GetRankSecret())] = true
		if got.GetSessionId() != resp.GetSessionId() || got.GetJobId() != resp.GetJobId() || got.GetFirstSeq() != resp.GetFirstSeq() {
			t.Fatalf("ranks got different sessions: %v, %v", resp, got)
		}
	}
	if r.c.ActiveJobs()["a"].GetRankSecret() != nil {
		t.Fatal("the job's shared response holds a rank's secret")
	}
	if resp.GetSessionId()&1 == 0 || resp.GetJobId() != 1 || resp.GetPoolSize() != 8 || resp.GetSwitchDataplane() != "10.0.0.254:48864" {
		t.Fatalf("response %v", resp)
	}
	if r.c.ActiveJobs()["a"].GetSessionId() != resp.GetSessionId() {
		t.Fatalf("active jobs %v", r.c.ActiveJobs())
	}
}

// TestCoreIsDeterministic: the same steps give the same outputs.
func TestCoreIsDeterministic(t *testing.T) {
	script := func() []any {
		r := newRig(t, 64)
		var out []any
		for i := range 3 {
			out = append(out, r.run(fmt.Sprintf("job%d", i), 2, byte(i)))
		}
		for rank := range uint32(2) {
			if err := r.c.Leave(&jobpb.LeaveRequest{Job: "job1", Rank: rank, SessionId: out[1].(*jobpb.RegisterResponse).GetSessionId(), RankSecret: r.sec("job1", rank)}); err != nil {
				t.Fatal(err)
			}
		}
		r.collect()
		r.c.SwitchLost("gone")
		r.collect()
		return append(out, r.installs, r.removals, r.answers)
	}
	if a, b := script(), script(); !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ:\n%v\n%v", a, b)
	}
}

// TestCoreChecksARegistrationOnce: the target's check (Config.Admit) runs
// once per registration: Register takes what Check found and checks
// nothing again, and refuses a registration that did not go through Check.
func TestCoreChecksARegistrationOnce(t *testing.T) {
	r := newRig(t, 64)
	calls := 0
	r.c.cfg.Admit = func(q *jobpb.RegisterRequest, lanes []netip.AddrPort) error {
		calls++
		return rigAdmit(q, lanes)
	}
	r.mustRegister(regReq("once", 0, 2, 1, 4, 1), regReq("once", 1, 2, 1, 4, 1))
	if calls != 2 {
		t.Fatalf("the target checked 2 registrations %d times, want once each", calls)
	}
	r.takeInstall()
	err := r.c.Register(r.waiter(), Checked{}, rigClient, r.now)
	wantRefusal(t, err, codes.InvalidArgument, "through Check first")
}

func TestCoreRefusesRegistrations(t *testing.T) {
	for _, c := range []struct {
		name string
		// change turns rank 1 of job "j" (whose rank 0 gathers with token
		// "t" on host 1) into the refused registration.
		change func(q *jobpb.RegisterRequest)
		code   codes.Code
		text   string
	}{
		{"world_size", func(q *jobpb.RegisterRequest) { q.WorldSize = 3 }, codes.FailedPrecondition, "world_size 3 differs from 2"},
		{"lanes", func(q *jobpb.RegisterRequest) {
			q.Lanes, q.LaneAddresses = 2, append(q.LaneAddresses, "127.0.1.9:1")
		}, codes.FailedPrecondition, "lanes 2 differs"},
		{"window", func(q *jobpb.RegisterRequest) { q.Window = 8 }, codes.FailedPrecondition, "window 8 differs"},
		{"elements", func(q *jobpb.RegisterRequest) { q.Elements = 128 }, codes.FailedPrecondition, "elements 128"},
		{"format", func(q *jobpb.RegisterRequest) { q.Format = jobpb.Format_FORMAT_EXTENDED }, codes.FailedPrecondition, "format"},
		{"token", func(q *jobpb.RegisterRequest) { q.Token = "" }, codes.PermissionDenied, "another owner"},
		{"address held", func(q *jobpb.RegisterRequest) {
			q.Job, q.Rank, q.WorldSize, q.LaneAddresses = "other", 0, 1, regReq("j", 0, 2, 1, 4, 1).LaneAddresses
		}, codes.AlreadyExists, `rank 0 of job "j"`},
		{"rank outside", func(q *jobpb.RegisterRequest) { q.Rank = 2 }, codes.InvalidArgument, "rank 2 outside"},
		{"packet size", func(q *jobpb.RegisterRequest) { q.Elements = 100 }, codes.InvalidArgument, "compatible header"},
		{"sparse", func(q *jobpb.RegisterRequest) {
			q.Sparse, q.Format = true, jobpb.Format_FORMAT_EXTENDED
		}, codes.FailedPrecondition, "sparse true differs from false"},
		{"sparse compat", func(q *jobpb.RegisterRequest) { q.Sparse = true }, codes.InvalidArgument, "sparse mode needs the extended header"},
		{"sparse crossover", func(q *jobpb.RegisterRequest) { q.SparseCrossover = 0.5 }, codes.FailedPrecondition, "sparse_crossover 0.5 differs from 0"},
		{"wire bits", func(q *jobpb.RegisterRequest) { q.WireBits = 16 }, codes.FailedPrecondition, "wire_bits 16 differs from 0"},
		{"wire bits unknown", func(q *jobpb.RegisterRequest) { q.WireBits = 8 }, codes.InvalidArgument, "wire_bits 8: want 0"},
		{"wire bits sparse", func(q *jobpb.RegisterRequest) {
			q.WireBits, q.Sparse, q.Format = 16, true, jobpb.Format_FORMAT_EXTENDED
		}, codes.InvalidArgument, "wire_bits 16 with the sparse mode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 64)
			w0 := r.mustRegister(tokened(regReq("j", 0, 2, 1, 4, 1)))[0]
			q := tokened(regReq("j", 1, 2, 1, 4, 1))
			c.change(q)
			_, err := r.register(q)
			wantRefusal(t, err, c.code, c.text)
			if c.code == codes.FailedPrecondition || c.code == codes.InvalidArgument {
				// Waiting cannot mend it: the gathering job ends, and
				// rank 0 learns why at once.
				wantRefusal(t, r.answer(w0).err, codes.FailedPrecondition, fmt.Sprintf("cannot form: rank %d was refused", q.GetRank()))
				return
			}
			// A stranger's Refusal, or one that may pass, leaves the
			// gathering job untouched: its last rank completes it.
			r.mustRegister(tokened(regReq("j", 1, 2, 1, 4, 1)))
			r.takeInstall()
			r.pending(w0)
		})
	}
}

func tokened(req *jobpb.RegisterRequest) *jobpb.RegisterRequest {
	req.Token = "t"
	return req
}

// TestCorePoolExhaustionAndFreeing: jobs get disjoint partitions; a job
// that does not fit is refused; retired jobs' slots come free once their
// entries are gone, and a job waiting for them is placed then.
func TestCorePoolExhaustionAndFreeing(t *testing.T) {
	r := newRig(t, 32)
	var resps []*jobpb.RegisterResponse
	for i := range 3 {
		resps = append(resps, r.run(fmt.Sprintf("job%d", i), 2, byte(i))) // 4 slots each
	}
	for i, resp := range resps {
		if resp.GetPoolBase() != uint32(4*i) || resp.GetJobId() != uint32(i+1) {
			t.Fatalf("job%d got base %d id %d, want base %d id %d", i, resp.GetPoolBase(), resp.GetJobId(), 4*i, i+1)
		}
	}
	// 12 of 32 slots used: a job needing 24 does not fit.
	big := r.mustRegister(regReq("big", 0, 1, 2, 12, 9))[0]
	wantRefusal(t, r.answer(big).err, codes.ResourceExhausted, "largest free range has 20 of 32")
	if r.c.jobs["big"] != nil {
		t.Fatal("the refused job stays in the table")
	}
	// job0 and job1 leave: their entries go; the big job waits for them.
	for i := range 2 {
		for rank := range uint32(2) {
			if err := r.c.Leave(&jobpb.LeaveRequest{Job: fmt.Sprintf("job%d", i), Rank: rank, SessionId: resps[i].GetSessionId(), RankSecret: r.sec(fmt.Sprintf("job%d", i), rank)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.collect()
	if len(r.removals) != 2 || r.c.Draining() != 2 {
		t.Fatalf("%d removals, %d draining, want 2 and 2", len(r.removals), r.c.Draining())
	}
	gone := r.removals
	r.removals = nil
	big = r.mustRegister(regReq("big", 0, 1, 2, 4, 9))[0]
	if len(r.installs) != 0 || r.c.jobs["big"].state != jobQueued {
		t.Fatalf("job placed while entries drain (%v)", r.c.jobs["big"].state)
	}
	r.c.Removed(gone[0].Gen, r.now)
	r.collect()
	if len(r.installs) != 0 {
		t.Fatal("job placed while one retired job's entries are still on the switch")
	}
	r.c.Removed(gone[1].Gen, r.now)
	r.collect()
	in := r.takeInstall()
	if in.Place.PoolBase != 0 || in.Place.PoolSize != 8 {
		t.Fatalf("big job placed at [%d, +%d), want the freed [0, +8)", in.Place.PoolBase, in.Place.PoolSize)
	}
	r.pending(big)
}

// TestCoreQueuedJobIsPlacedAfterTheDrainWait: removals that do not finish
// hold their slots, and a waiting job is placed beside them in time.
func TestCoreQueuedJobIsPlacedAfterTheDrainWait(t *testing.T) {
	r := newRig(t, 32)
	r.retiredOne()
	r.mustRegister(regReq("new", 0, 1, 1, 4, 2))
	if len(r.installs) != 0 {
		t.Fatal("placed at once")
	}
	if d, ok := r.c.Deadline(); !ok || !d.Equal(r.now.Add(rigDrainWait)) {
		t.Fatalf("deadline %v, %v; want the drain wait's end", d, ok)
	}
	r.c.Tick(r.now.Add(rigDrainWait - time.Second))
	r.collect()
	if len(r.installs) != 0 {
		t.Fatal("placed before the drain wait ended")
	}
	r.c.Tick(r.now.Add(rigDrainWait))
	r.collect()
	if in := r.takeInstall(); in.Place.PoolBase != 4 {
		t.Fatalf("placed at %d, want beside the draining job's [0, 4)", in.Place.PoolBase)
	}
	if _, ok := r.c.Deadline(); ok {
		t.Fatal("a deadline is left with nothing to wait for")
	}
}

// TestCoreJobEnds: the ways an active job ends; its leases and waiting
// calls hear why, and its entries go unless the switch went with them.
func TestCoreJobEnds(t *testing.T) {
	for _, c := range []struct {
		name    string
		end     func(r *rig, resp *jobpb.RegisterResponse, leases []Waiter)
		why     string
		removed bool
	}{
		{"abort by a rank", func(r *rig, resp *jobpb.RegisterResponse, _ []Waiter) {
			long := strings.Repeat("x", 1000)
			if err := r.abort(&jobpb.AbortRequest{Job: "j", Rank: 1, SessionId: resp.GetSessionId(), Reason: "NaN " + long, RankSecret: r.sec("j", 1)}); err != nil {
				r.t.Fatal(err)
			}
		}, "aborted by rank 1: NaN", true},
		{"lease lost", func(r *rig, _ *jobpb.RegisterResponse, leases []Waiter) {
			r.c.EndLease(leases[1], true)
		}, "rank 1 lost its connection", true},
		{"every rank left", func(r *rig, resp *jobpb.RegisterResponse, _ []Waiter) {
			for rank := range uint32(2) {
				if err := r.c.Leave(&jobpb.LeaveRequest{Job: "j", Rank: rank, SessionId: resp.GetSessionId(), RankSecret: r.sec("j", rank)}); err != nil {
					r.t.Fatal(err)
				}
			}
		}, "finished: every rank left", true},
		{"restarted", func(r *rig, _ *jobpb.RegisterResponse, _ []Waiter) {
			r.mustRegister(withToken(regReq("j", 0, 2, 1, 4, 1), "t"))
		}, "restarted: rank 0 registered again", true},
		{"switch lost", func(r *rig, _ *jobpb.RegisterResponse, _ []Waiter) {
			r.c.SwitchLost("aborted: the switch went away")
		}, "the switch went away", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 64)
			resp := r.runWith("j", 2, 1, "t")
			leases := []Waiter{
				r.watch(&jobpb.WatchRequest{Job: "j", Rank: 0, SessionId: resp.GetSessionId()}),
				r.watch(&jobpb.WatchRequest{Job: "j", Rank: 1, SessionId: resp.GetSessionId()}),
			}
			waiting, err := r.barrier("j", 0, resp.GetSessionId(), "b", 1)
			if err != nil {
				t.Fatal(err)
			}
			c.end(r, resp, leases)
			r.collect()
			if a := r.answer(leases[0]); !strings.Contains(a.ended, c.why) {
				t.Errorf("lease heard %q, want %q", a.ended, c.why)
			}
			if a := r.answer(waiting).err; CodeOf(a) != codes.Aborted || !strings.Contains(a.Error(), c.why) {
				t.Errorf("waiting barrier got %v, want Aborted naming %q", a, c.why)
			}
			if c.removed != (len(r.removals) == 1) {
				t.Errorf("removals %v, want removed=%v", r.removals, c.removed)
			}
			if c.removed && r.removals[0].Place.JobID != resp.GetJobId() {
				t.Errorf("removal of %+v, want the job's entries", r.removals[0])
			}
			_, err = r.barrier("j", 0, resp.GetSessionId(), "b", 2)
			wantRefusal(t, err, codes.Aborted, c.why)
			if len(r.c.ActiveJobs()) != 0 {
				t.Errorf("active jobs %v after the end", r.c.ActiveJobs())
			}
		})
	}
}

// TestCoreLeaseOfALeftRankIsQuiet: a rank that left and then drops its
// lease does not end the job.
func TestCoreLeaseOfALeftRankIsQuiet(t *testing.T) {
	r := newRig(t, 64)
	resp := r.run("j", 2, 1)
	lease := r.watch(&jobpb.WatchRequest{Job: "j", Rank: 1, SessionId: resp.GetSessionId()})
	if err := r.c.Leave(&jobpb.LeaveRequest{Job: "j", Rank: 1, SessionId: resp.GetSessionId(), RankSecret: r.sec("j", 1)}); err != nil {
		t.Fatal(err)
	}
	r.c.EndLease(lease, true)
	r.collect()
	if r.c.ActiveJobs()["j"] == nil || len(r.removals) != 0 {
		t.Fatal("the job ended when a rank that had left dropped its lease")
	}
	// Leave and Abort of a session that is over are no error.
	for _, id := range []uint64{resp.GetSessionId() + 2, 12345} {
		if err := r.abort(&jobpb.AbortRequest{Job: "j", SessionId: id, RankSecret: r.sec("j", 0)}); err != nil {
			t.Errorf("abort of session %d: %v", id, err)
		}
	}
}

// TestCoreGiveUpNamesMissingRanks: registrations that time out name the
// ranks that never came, and a job nobody waits for is forgotten.
func TestCoreGiveUpNamesMissingRanks(t *testing.T) {
	r := newRig(t, 64)
	ws := r.mustRegister(regReq("late", 0, 4, 1, 4, 1), regReq("late", 2, 4, 1, 4, 1))
	wantRefusal(t, r.c.GiveUp(ws[0], codes.DeadlineExceeded), codes.DeadlineExceeded, "ranks 1 and 3 of 4 never registered before rank 0's deadline")
	if r.c.jobs["late"] == nil {
		t.Fatal("the job was forgotten while rank 2 still waits")
	}
	wantRefusal(t, r.c.GiveUp(ws[1], codes.Canceled), codes.Canceled, "ranks 1 and 3 of 4")
	if r.c.jobs["late"] != nil {
		t.Fatal("a job whose every rank gave up is kept")
	}
}

// TestCoreQueuedJobLosingARankGathersAgain: a rank that gives up while its
// job waits for room takes the job back to gathering.
func TestCoreQueuedJobLosingARankGathersAgain(t *testing.T) {
	r := newRig(t, 64)
	rm := r.retiredOne()
	ws := r.mustRegister(regReq("q", 0, 2, 1, 4, 2), regReq("q", 1, 2, 1, 4, 2))
	if r.c.jobs["q"].state != jobQueued {
		t.Fatalf("state %v, want queued", r.c.jobs["q"].state)
	}
	r.c.GiveUp(ws[1], codes.DeadlineExceeded)
	r.c.Removed(rm.Gen, r.now)
	r.collect()
	if len(r.installs) != 0 || r.c.jobs["q"].state != jobGathering {
		t.Fatalf("installs %v, state %v; want none and gathering", r.installs, r.c.jobs["q"].state)
	}
	r.mustRegister(regReq("q", 1, 2, 1, 4, 2))
	r.takeInstall()
	r.pending(ws[0])
}

// TestCoreRetiredWhileInstalling: a job replaced while the switch is being
// programmed for it has its entries removed only once programming ended,
// and its successor waits for that.
func TestCoreRetiredWhileInstalling(t *testing.T) {
	r := newRig(t, 64)
	first := r.mustRegister(withToken(regReq("j", 0, 1, 1, 4, 1), "t"))[0]
	in := r.takeInstall()
	second := r.mustRegister(withToken(regReq("j", 0, 1, 1, 4, 1), "t"))[0]
	wantRefusal(t, r.answer(first).err, codes.Aborted, "restarted: rank 0 registered again")
	if len(r.removals) != 0 || len(r.installs) != 0 || r.c.Draining() != 1 {
		t.Fatalf("removals %v, installs %v, draining %d; want the install to finish first", r.removals, r.installs, r.c.Draining())
	}
	r.c.Installed(in.Gen, nil, r.now)
	r.collect()
	rm := r.takeRemoval()
	if rm.Gen != in.Gen || len(r.installs) != 0 {
		t.Fatalf("removal %+v, installs %v", rm, r.installs)
	}
	r.c.Removed(rm.Gen, r.now)
	r.collect()
	in2 := r.takeInstall()
	r.c.Installed(in2.Gen, nil, r.now)
	r.collect()
	if r.answer(second).resp.GetJobId() != 2 {
		t.Fatalf("second run answered %+v", r.answer(second))
	}
}

// TestCoreSwitchLost: every job ends with the cause, nothing is removed,
// draining jobs' room comes free, and late reports of the lost switch
// change nothing.
func TestCoreSwitchLost(t *testing.T) {
	r := newRig(t, 64)
	rm := r.retiredOne()
	gathering := r.mustRegister(regReq("g", 0, 2, 1, 4, 2))[0]
	installing := r.mustRegister(regReq("i", 0, 1, 1, 4, 3))[0]
	// "i" waits for old's entries; let it through on the drain wait.
	r.c.Tick(r.now.Add(rigDrainWait))
	r.collect()
	in := r.takeInstall()
	r.c.SwitchLost("aborted: the switch went away")
	r.collect()
	if r.c.Offline() == "" || r.c.Draining() != 0 || len(r.removals) != 0 || len(r.c.jobs) != 0 {
		t.Fatalf("offline %q, draining %d, removals %v, jobs %v", r.c.Offline(), r.c.Draining(), r.removals, r.c.jobs)
	}
	for _, w := range []Waiter{gathering, installing} {
		wantRefusal(t, r.answer(w).err, codes.Aborted, "the switch went away")
	}
	r.c.Installed(in.Gen, nil, r.now)
	r.c.Removed(rm.Gen, r.now)
	r.collect()
	if len(r.installs)+len(r.removals) != 0 || len(r.c.ActiveJobs()) != 0 {
		t.Fatal("late reports from the lost switch brought work or jobs back")
	}
	r.c.SwitchBack()
	if r.c.Offline() != "" {
		t.Fatal("still offline")
	}
}

// adoptedJob is a 2-rank job as a switch keeps it.
func adoptedJob(id uint32, base uint32, host byte) switchjob.Placement {
	p := switchjob.Placement{JobID: id, PoolBase: base, PoolSize: 4, Group: uint16(id), World: 2}
	for rank := range uint16(2) {
		a := netip.MustParseAddrPort(fmt.Sprintf("127.0.%d.%d:30000", host, rank+1))
		p.Workers = append(p.Workers, switchjob.Lane{Rank: rank, Addr: a})
		p.Replies = append(p.Replies, switchjob.Lane{Rank: rank, Addr: a})
	}
	return p
}

// claimFor is the claim an earlier controller kept for the job placed at
// p, named job, with session and token, whose ranks hold adoptedSecret.
func claimFor(p switchjob.Placement, job string, session uint64, token string) Claim {
	cl := Claim{JobID: p.JobID, Job: job, Session: session, Owner: sha256.Sum256([]byte(token)), Client: "127.0.0.1",
		PoolBase: p.PoolBase, PoolSize: p.PoolSize, World: p.World}
	for r := range p.World {
		cl.Ranks = append(cl.Ranks, sha256.Sum256(adoptedSecret(uint32(r))))
	}
	return cl
}

// TestCoreAdoption: jobs found on the switch keep their room; those with a
// fitting claim run on under its name and session, and their ranks take
// them back by proving themselves; at the end of the grace, jobs without a
// claim and unclaimed ones are removed, half-claimed ones aborted naming
// the missing rank, and claims of jobs that ended are forgotten.
func TestCoreAdoption(t *testing.T) {
	r := newRig(t, 64)
	var found []switchjob.Placement
	for i, id := range []uint32{7, 9, 11, 13, 15} {
		found = append(found, adoptedJob(id, uint32(4*i), byte(i+1)))
	}
	found[0].Replicas = []switchjob.Replica{{EgressPort: 0, Instance: 0}, {EgressPort: 1, Instance: 1}}
	misfit := claimFor(found[4], "misfit", 55, "")
	misfit.PoolBase++ // a claim for another partition proves nothing here
	claims := []Claim{claimFor(found[0], "kept", 77, ""), claimFor(found[1], "half", 99, ""), claimFor(found[3], "idle", 33, ""),
		misfit, claimFor(adoptedJob(21, 40, 9), "gone", 21, "")}
	const grace = 10 * time.Second
	r.c.Adopt(found, claims, r.now, grace)
	r.collect()
	if !slices.Equal(r.forgets, []uint32{21}) {
		t.Fatalf("forgotten claims %v, want the one whose job is not on the switch (21)", r.forgets)
	}
	r.forgets = nil

	// A claimed job is there under its name at once; its ranks prove
	// themselves with their secrets and the job's token, never by naming
	// its switch job id.
	_, err := r.barrier("kept", 0, 77, "b", 1)
	if err != nil {
		t.Fatalf("barrier of a claimed job: %v", err)
	}
	for _, req := range []*jobpb.WatchRequest{
		{Job: "kept", Rank: 0, SessionId: 77, JobId: 7, RankSecret: adoptedSecret(1)},
		{Job: "kept", Rank: 0, SessionId: 77, JobId: 7, RankSecret: nil},
		{Job: "kept", Rank: 0, SessionId: 77, JobId: 7, RankSecret: adoptedSecret(0), Token: "guess"},
	} {
		wantRefusal(t, r.c.Watch(r.waiter(), req), codes.PermissionDenied, "does not match")
	}
	for _, req := range []*jobpb.WatchRequest{
		{Job: "attacker", Rank: 0, SessionId: 5, JobId: 11, RankSecret: adoptedSecret(0)},
		{Job: "attacker", Rank: 0, SessionId: 5, JobId: 15, RankSecret: adoptedSecret(0)},
		{Job: "misfit", Rank: 0, SessionId: 55, JobId: 15, RankSecret: adoptedSecret(0)},
	} {
		if err := r.c.Watch(r.waiter(), req); err == nil {
			t.Fatalf("watch %v took a job found on the switch without a claim", req)
		}
	}
	r.watch(&jobpb.WatchRequest{Job: "kept", Rank: 0, SessionId: 77, JobId: 7})
	r.watch(&jobpb.WatchRequest{Job: "kept", Rank: 1, SessionId: 77, JobId: 7})
	half := r.watch(&jobpb.WatchRequest{Job: "half", Rank: 0, SessionId: 99, JobId: 9})
	if got := r.c.ActiveJobs()["kept"]; got.GetPoolBase() != 0 || got.GetJobId() != 7 || got.GetSessionId() != 77 {
		t.Fatalf("claimed job %v", got)
	}
	if got := r.c.ActiveJobs()["attacker"]; got != nil {
		t.Fatalf("an unclaimed job went to a caller: %v", got)
	}

	// A new job gets room and an id beside the adopted ones.
	resp := r.run("new", 1, 9)
	if resp.GetPoolBase() != 20 || resp.GetJobId() != 16 {
		t.Fatalf("new job at base %d with id %d, want 20 and 16", resp.GetPoolBase(), resp.GetJobId())
	}
	r.forgets = nil

	if d, ok := r.c.Deadline(); !ok || !d.Equal(r.now.Add(grace)) {
		t.Fatalf("deadline %v, %v; want the grace's end", d, ok)
	}
	r.c.Tick(r.now.Add(grace - time.Millisecond))
	r.collect()
	r.pending(half)
	r.c.Tick(r.now.Add(grace))
	r.collect()
	if why := r.answer(half).ended; !strings.Contains(why, "rank 1 did not come back") {
		t.Fatalf("half-claimed job ended with %q", why)
	}
	var removed []uint32
	for _, rm := range r.removals {
		removed = append(removed, rm.Place.JobID)
	}
	if !slices.Equal(removed, []uint32{9, 11, 13, 15}) {
		t.Fatalf("removals of jobs %v, want 9, 11, 13 and 15", removed)
	}
	if !slices.Equal(slices.Sorted(slices.Values(r.forgets)), []uint32{9, 11, 13, 15}) {
		t.Fatalf("forgotten claims %v, want those of the removed jobs", r.forgets)
	}
	if r.c.ActiveJobs()["kept"] == nil {
		t.Fatal("the fully claimed job ended")
	}
}

// TestCoreBarrierRounds: a barrier releases when every rank arrived, uses
// of one name are counted apart, a rank that gives up is taken out, and
// counts release a rank only on a job taken over from the switch.
func TestCoreBarrierRounds(t *testing.T) {
	r := newRig(t, 64)
	s := r.run("j", 3, 1).GetSessionId()
	b := func(rank uint32, name string, seq uint64) Waiter {
		t.Helper()
		w, err := r.barrier("j", rank, s, name, seq)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	first0 := b(0, "b", 1)
	second0 := b(0, "b", 2) // a fast rank's next use of the name
	first1 := b(1, "b", 1)
	r.pending(first0, second0, first1)
	first2 := b(2, "b", 1)
	for _, w := range []Waiter{first0, first1, first2} {
		if a := r.answer(w); a.err != nil {
			t.Fatalf("first round: %v", a.err)
		}
	}
	r.pending(second0)
	second1 := b(1, "b", 2)
	wantRefusal(t, r.c.GiveUp(second1, codes.DeadlineExceeded), codes.DeadlineExceeded, "rank 2 did not come before rank 1's deadline (2 of 3 ranks arrived, 0 of them gave up waiting)")
	second1 = b(1, "b", 2)
	b(2, "b", 2)
	for _, w := range []Waiter{second0, second1} {
		if a := r.answer(w); a.err != nil {
			t.Fatalf("second round: %v", a.err)
		}
	}
	// Counts alone release nothing on a job this controller ran.
	w := b(0, "x", 10)
	b(1, "y", 11)
	b(2, "y", 11)
	r.pending(w)

	// Taken over: rank 1 passed barrier 7 before the restart and waits at
	// 8; rank 0 re-sends 7 and is released by the count.
	r.c.Adopt([]switchjob.Placement{adoptedJob(5, 32, 7)}, []Claim{claimFor(adoptedJob(5, 32, 7), "t", 55, "")}, r.now, time.Hour)
	for rank := range uint32(2) {
		r.watch(&jobpb.WatchRequest{Job: "t", Rank: rank, SessionId: 55, JobId: 5})
	}
	waiting, _ := r.barrier("t", 1, 55, "iter-4", 8)
	resent, _ := r.barrier("t", 0, 55, "done-3", 7)
	if a := r.answer(resent); a.err != nil {
		t.Fatalf("re-sent barrier: %v", a.err)
	}
	r.pending(waiting)
	r.barrier("t", 0, 55, "iter-4", 8)
	if a := r.answer(waiting); a.err != nil {
		t.Fatalf("next barrier: %v", a.err)
	}
}

func TestCoreBroadcast(t *testing.T) {
	r := newRig(t, 64)
	s := r.run("j", 3, 1).GetSessionId()
	bc := func(rank, root uint32, data string) (Waiter, error) {
		w := r.waiter()
		err := r.c.Broadcast(w, &jobpb.BroadcastRequest{Job: "j", Rank: rank, SessionId: s, Root: root, Data: []byte(data), RankSecret: r.sec("j", rank)})
		r.collect()
		return w, err
	}
	early, _ := bc(0, 1, "")
	_, err := bc(2, 0, "")
	wantRefusal(t, err, codes.FailedPrecondition, "rank 2 names root 0, others named 1")
	_, err = bc(2, 3, "")
	wantRefusal(t, err, codes.InvalidArgument, "root 3 outside 0..2")
	r.pending(early)
	root, _ := bc(1, 1, "hello")
	late, _ := bc(2, 1, "")
	for _, w := range []Waiter{early, root, late} {
		if a := r.answer(w); a.err != nil || string(a.data) != "hello" {
			t.Fatalf("broadcast answer %+v", a)
		}
	}
	// Every rank fetched: the name is forgotten, and its data too.
	if rs := r.c.jobs["j"].rounds["broadcast/"]; rs != nil || r.c.jobs["j"].held != 0 {
		t.Fatalf("finished round kept: %v, %d bytes held", rs, r.c.jobs["j"].held)
	}
}

func TestCoreLimits(t *testing.T) {
	r := newRig(t, 64)
	for i := range maxJobs {
		req := regReq(fmt.Sprintf("j%d", i), 0, 2, 1, 4, 0)
		req.LaneAddresses[0] = fmt.Sprintf("10.1.%d.%d:1", i/256, i%256)
		if _, err := r.register(req); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	_, err := r.register(regReq("one-more", 0, 2, 1, 4, 0))
	wantRefusal(t, err, codes.ResourceExhausted, "holds 4096 jobs")

	// Names in use at once are bounded; names whose rounds are over are
	// forgotten, so that a name per iteration never runs out.
	r = newRig(t, 64)
	s := r.run("names", 2, 1).GetSessionId()
	for i := range MaxRoundsPerJob {
		if _, err := r.barrier("names", 0, s, fmt.Sprint(i), 0); err != nil {
			t.Fatalf("barrier %d: %v", i, err)
		}
	}
	_, err = r.barrier("names", 0, s, "one-more", 0)
	wantRefusal(t, err, codes.ResourceExhausted, "barrier and broadcast names")
	if _, err := r.barrier("names", 0, s, "0", 0); err != nil {
		t.Fatalf("a known name again: %v", err)
	}
	for i := range MaxRoundsPerJob {
		if _, err := r.barrier("names", 1, s, fmt.Sprint(i), 0); err != nil {
			t.Fatalf("rank 1 barrier %d: %v", i, err)
		}
	}
	if n := len(r.c.jobs["names"].rounds); n != 1 {
		t.Fatalf("%d names held once every round but one is over, want 1 (rank 0's second use of \"0\")", n)
	}
	for i := range 3 * MaxRoundsPerJob {
		name := fmt.Sprintf("iter-%d", i)
		w0, err0 := r.barrier("names", 0, s, name, 0)
		w1, err1 := r.barrier("names", 1, s, name, 0)
		if err0 != nil || err1 != nil || r.answer(w0).err != nil || r.answer(w1).err != nil {
			t.Fatalf("barrier %s: %v, %v", name, err0, err1)
		}
	}
}
