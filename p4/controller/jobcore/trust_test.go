package jobcore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// logged makes the rig's core log into a buffer.
func (r *rig) logged() *bytes.Buffer {
	var buf bytes.Buffer
	r.c.log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return &buf
}

// wantNoSecret fails if text holds the session id or a secret.
func wantNoSecret(t *testing.T, what, text string, session uint64, secrets ...[]byte) {
	t.Helper()
	if strings.Contains(text, strconv.FormatUint(session, 10)) || strings.Contains(text, strconv.FormatUint(session, 16)) {
		t.Errorf("%s names the session id %d: %s", what, session, text)
	}
	for _, s := range secrets {
		if len(s) > 0 && (strings.Contains(text, string(s)) || strings.Contains(text, hex.EncodeToString(s)) || strings.Contains(text, fmt.Sprintf("%q", s))) {
			t.Errorf("%s holds a rank secret: %s", what, text)
		}
	}
}

// TestCoreRankSecrets: every call within a session must carry its rank's
// secret; a call with the session id but without the secret is refused
// and changes nothing, and no Refusal or log line names the session id.
func TestCoreRankSecrets(t *testing.T) {
	r := newRig(t, 64)
	logs := r.logged()
	resp := r.run("j", 2, 1)
	id := resp.GetSessionId()
	s0, s1 := r.sec("j", 0), r.sec("j", 1)
	if len(s0) != RankSecretLen || bytes.Equal(s0, s1) {
		t.Fatalf("secrets %x and %x: want %d bytes each, different per rank", s0, s1, RankSecretLen)
	}
	var errs []error
	for _, bad := range [][]byte{nil, {}, s1, append(append([]byte(nil), s0...), 0), s0[:RankSecretLen-1]} {
		steps := []struct {
			name string
			call func() error
		}{
			{"barrier", func() error {
				return r.c.Barrier(r.waiter(), &jobpb.BarrierRequest{Job: "j", Rank: 0, SessionId: id, Name: "b", RankSecret: bad})
			}},
			{"broadcast", func() error {
				return r.c.Broadcast(r.waiter(), &jobpb.BroadcastRequest{Job: "j", Rank: 0, Root: 0, SessionId: id, Name: "b", Data: []byte("x"), RankSecret: bad})
			}},
			{"leave", func() error {
				return r.c.Leave(&jobpb.LeaveRequest{Job: "j", Rank: 0, SessionId: id, RankSecret: bad})
			}},
			{"abort", func() error {
				return r.abort(&jobpb.AbortRequest{Job: "j", Rank: 0, SessionId: id, Reason: "attacker's words", RankSecret: bad})
			}},
			{"watch", func() error {
				return r.c.Watch(r.waiter(), &jobpb.WatchRequest{Job: "j", Rank: 0, SessionId: id, RankSecret: bad})
			}},
		}
		for _, step := range steps {
			err := step.call()
			r.collect()
			wantRefusal(t, err, codes.PermissionDenied, "rank 0's secret does not match")
			errs = append(errs, err)
		}
	}
	j := r.c.jobs["j"]
	if j == nil || j.state != jobActive || len(j.rounds) != 0 || len(j.leased) != 0 || len(j.left) != 0 || len(j.waits) != 0 || len(r.removals) != 0 {
		t.Fatalf("refused calls changed the job: %+v, removals %v", j, r.removals)
	}
	// The right secret goes through.
	r.watch(&jobpb.WatchRequest{Job: "j", Rank: 0, SessionId: id})
	if !j.leased[0] {
		t.Fatal("rank 0's lease with its secret was not taken")
	}
	// A stale or guessed session id is told nothing of the current one.
	for _, other := range []uint64{1, id + 2} {
		_, err := r.barrier("j", 0, other, "b", 0)
		wantRefusal(t, err, codes.FailedPrecondition, "the session this call names is not job \"j\"'s current one")
		errs = append(errs, err)
	}
	// An ended session tells its cause to its ranks only.
	if err := r.abort(&jobpb.AbortRequest{Job: "j", Rank: 1, SessionId: id, Reason: "lane 0 gave up", RankSecret: s1}); err != nil {
		t.Fatal(err)
	}
	r.collect()
	_, err := r.barrier("j", 0, id, "b", 0)
	wantRefusal(t, err, codes.Aborted, "the session this call names is over: job \"j\" aborted by rank 1: lane 0 gave up")
	errs = append(errs, err)
	err = r.c.Barrier(r.waiter(), &jobpb.BarrierRequest{Job: "j", Rank: 0, SessionId: id, Name: "b"})
	wantRefusal(t, err, codes.PermissionDenied, "secret does not match")
	for _, err := range append(errs, err) {
		wantNoSecret(t, "Refusal", err.Error(), id, s0, s1)
	}
	if !strings.Contains(logs.String(), "job ready") {
		t.Fatalf("no log of the job: %s", logs)
	}
	wantNoSecret(t, "log", logs.String(), id, s0, s1)
}

// TestCoreAdoptedRanksProveThemselves: a rank taking a job back after a
// controller restart proves itself with its secret, checked against the
// hash its claim kept, and with the job's token; the claim the core hands
// its driver for a job it places holds hashes, never the secrets.
func TestCoreAdoptedRanksProveThemselves(t *testing.T) {
	r := newRig(t, 64)
	p := adoptedJob(7, 0, 1)
	r.c.Adopt([]switchjob.Placement{p}, []Claim{claimFor(p, "kept", 77, "t")}, r.now, time.Hour)
	r.collect()
	r.watch(&jobpb.WatchRequest{Job: "kept", Rank: 0, SessionId: 77, JobId: 7, Token: "t"})
	for _, token := range []string{"", "guess"} {
		err := r.c.Watch(r.waiter(), &jobpb.WatchRequest{Job: "kept", Rank: 1, SessionId: 77, JobId: 7, Token: token, RankSecret: adoptedSecret(1)})
		wantRefusal(t, err, codes.PermissionDenied, "rank 1's token does not match job \"kept\"'s")
	}
	for _, secret := range [][]byte{[]byte("short"), adoptedSecret(0), nil} {
		err := r.c.Watch(r.waiter(), &jobpb.WatchRequest{Job: "kept", Rank: 1, SessionId: 77, JobId: 7, Token: "t", RankSecret: secret})
		wantRefusal(t, err, codes.PermissionDenied, "rank 1's secret does not match")
	}
	err := r.c.Barrier(r.waiter(), &jobpb.BarrierRequest{Job: "kept", Rank: 1, SessionId: 77, Name: "b", RankSecret: adoptedSecret(0)})
	wantRefusal(t, err, codes.PermissionDenied, "rank 1's secret does not match")
	r.watch(&jobpb.WatchRequest{Job: "kept", Rank: 1, SessionId: 77, JobId: 7, Token: "t"})
	w0, _ := r.barrier("kept", 0, 77, "b", 1)
	w1, _ := r.barrier("kept", 1, 77, "b", 1)
	if r.answer(w0).err != nil || r.answer(w1).err != nil {
		t.Fatalf("barrier of the taken-over job: %v, %v", r.answer(w0).err, r.answer(w1).err)
	}

	// A job the core places comes with its claim: the hashes of the
	// secrets its ranks are answered with, and of its token.
	ws := r.mustRegister(regReq("placed", 0, 2, 1, 4, 3), regReq("placed", 1, 2, 1, 4, 3))
	in := r.takeInstall()
	r.c.Installed(in.Gen, nil, r.now)
	r.collect()
	cl := in.Claim
	if cl.Job != "placed" || cl.JobID != in.Place.JobID || cl.World != 2 || len(cl.Ranks) != 2 || cl.PoolBase != in.Place.PoolBase || cl.PoolSize != in.Place.PoolSize {
		t.Fatalf("claim %+v of placement %+v", cl, in.Place)
	}
	for rank, w := range ws {
		resp := r.answer(w).resp
		if cl.Session != resp.GetSessionId() {
			t.Fatalf("claim of session %d, ranks answered with %d", cl.Session, resp.GetSessionId())
		}
		if sha256.Sum256(resp.GetRankSecret()) != cl.Ranks[rank] {
			t.Fatalf("rank %d's hash in the claim is not that of its secret", rank)
		}
		if bytes.Contains(fmt.Appendf(nil, "%+v", cl), resp.GetRankSecret()) {
			t.Fatalf("the claim holds rank %d's secret", rank)
		}
	}
}

// TestCoreLeaseGrace: a rank of an active job that has not taken its
// lease within the grace ends the job, naming the rank, and the job's
// slots come free; ranks that took theirs, or left, keep it alive.
func TestCoreLeaseGrace(t *testing.T) {
	r := newRig(t, 8)
	start := r.now
	resp := r.run("j", 3, 1)
	lease := r.watch(&jobpb.WatchRequest{Job: "j", Rank: 0, SessionId: resp.GetSessionId()})
	if err := r.c.Leave(&jobpb.LeaveRequest{Job: "j", Rank: 2, SessionId: resp.GetSessionId(), RankSecret: r.sec("j", 2)}); err != nil {
		t.Fatal(err)
	}
	if d, ok := r.c.Deadline(); !ok || !d.Equal(start.Add(rigLeaseGrace)) {
		t.Fatalf("deadline %v, %v; want the grace's end %v", d, ok, start.Add(rigLeaseGrace))
	}
	r.c.Tick(start.Add(rigLeaseGrace - time.Millisecond))
	r.collect()
	r.pending(lease)
	r.c.Tick(start.Add(rigLeaseGrace))
	r.collect()
	want := fmt.Sprintf("rank 1 never took its lease (Watch) within %v", rigLeaseGrace)
	if a := r.answer(lease); !strings.Contains(a.ended, want) || a.cause != EndRankLost {
		t.Fatalf("lease heard %q (%v), want %q", a.ended, a.cause, want)
	}
	rm := r.takeRemoval()
	r.c.Removed(rm.Gen, r.now)
	r.collect()
	// The whole pool is free again.
	r.now = start.Add(rigLeaseGrace)
	big := r.mustRegister(regReq("big", 0, 1, 2, 4, 2))[0]
	r.c.Installed(r.takeInstall().Gen, nil, r.now)
	r.collect()
	if a := r.answer(big); a.err != nil {
		t.Fatalf("a job of the whole pool after the lapse: %v", a.err)
	}
	// Every rank leased: no deadline is left for the job.
	r.watch(&jobpb.WatchRequest{Job: "big", Rank: 0, SessionId: r.answer(big).resp.GetSessionId()})
	if d, ok := r.c.Deadline(); ok {
		t.Fatalf("deadline %v with every rank's lease taken", d)
	}
}

// TestCoreJoinTimeout: a job whose ranks do not all come within the join
// timeout is released, and every waiting rank hears which never came.
func TestCoreJoinTimeout(t *testing.T) {
	r := newRig(t, 64)
	start := r.now
	ws := r.mustRegister(regReq("late", 0, 4, 1, 4, 1))
	r.now = start.Add(time.Minute)
	ws = append(ws, r.mustRegister(regReq("late", 2, 4, 1, 4, 1))...)
	if d, ok := r.c.Deadline(); !ok || !d.Equal(start.Add(rigJoinTimeout)) {
		t.Fatalf("deadline %v, %v; want the join timeout from the first registration", d, ok)
	}
	r.c.Tick(start.Add(rigJoinTimeout - time.Millisecond))
	r.collect()
	r.pending(ws...)
	r.c.Tick(start.Add(rigJoinTimeout))
	r.collect()
	for _, w := range ws {
		wantRefusal(t, r.answer(w).err, codes.DeadlineExceeded, fmt.Sprintf("ranks [1 3] of 4 never registered within the controller's join timeout (%v)", rigJoinTimeout))
	}
	if r.c.jobs["late"] != nil || r.c.endings[EndAbandoned] != 1 {
		t.Fatalf("job table %v, abandoned %d; want the job released", r.c.jobs, r.c.endings[EndAbandoned])
	}
	if _, ok := r.c.Deadline(); ok {
		t.Fatal("a deadline is left with nothing to wait for")
	}
}

// TestCoreQuotaPerClient: a client identity holds at most its share of
// jobs and slots; refusals name the limit and its flag, not the other
// jobs; other identities, and jobs ending, are not held back.
func TestCoreQuotaPerClient(t *testing.T) {
	r := newRig(t, 64)
	r.c.cfg.MaxJobsPerClient = 2
	reg := func(client, job string, rank, world, window uint32, host byte) (Waiter, error) {
		w := r.waiter()
		r.regs[w] = withToken(regReq(job, rank, world, 1, window, host), "t")
		err := r.c.admit(w, r.regs[w], client, r.now)
		r.collect()
		return w, err
	}
	a1, err1 := reg("addr:10.0.0.1", "secret-name-1", 0, 2, 4, 1)
	_, err2 := reg("addr:10.0.0.1", "secret-name-2", 0, 2, 4, 2)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	_, err := reg("addr:10.0.0.1", "third", 0, 2, 4, 3)
	wantRefusal(t, err, codes.ResourceExhausted, "client addr:10.0.0.1 holds 2 jobs, the limit per client (the controller's MaxJobsPerClient)")
	if strings.Contains(err.Error(), "secret-name") || r.c.jobs["third"] != nil {
		t.Fatalf("Refusal %q names another job, or the job was kept", err)
	}
	// Another identity joins the first client's job and starts its own.
	if _, err := reg("addr:10.0.0.2", "secret-name-1", 1, 2, 4, 1); err != nil {
		t.Fatalf("rank 1 of another client's job: %v", err)
	}
	r.c.Installed(r.takeInstall().Gen, nil, r.now)
	r.collect()
	if _, err := reg("addr:10.0.0.2", "theirs", 0, 2, 4, 4); err != nil {
		t.Fatalf("another client: %v", err)
	}
	// At the limit, a client may still restart its own job.
	if _, err := reg("addr:10.0.0.1", "secret-name-1", 0, 2, 4, 1); err != nil {
		t.Fatalf("restarting one's own job at the limit: %v", err)
	}
	// A job that ends frees its place.
	r.c.GiveUp(a1, codes.DeadlineExceeded)
	if err := r.c.GiveUp(r.last, codes.DeadlineExceeded); err == nil {
		t.Fatal("no Refusal for a registration that gave up")
	}
	r.collect()
	if _, err := reg("addr:10.0.0.1", "third", 0, 2, 4, 3); err != nil {
		t.Fatalf("after a job ended: %v", err)
	}

	r = newRig(t, 64)
	r.c.cfg.MaxSlotsPerClient = 12
	if _, err := reg("cert:alice", "a", 0, 2, 8, 1); err != nil {
		t.Fatal(err)
	}
	_, err = reg("cert:alice", "b", 0, 2, 8, 2)
	wantRefusal(t, err, codes.ResourceExhausted, "client cert:alice would hold 16 slots with this job's lanes*window = 8, over the limit of 12 per client (the controller's MaxSlotsPerClient)")
	if _, err := reg("cert:alice", "b", 0, 2, 4, 2); err != nil {
		t.Fatalf("a job within the slots left: %v", err)
	}
}

// TestCoreBounds: names, tokens, addresses and broadcast data are bounded,
// and refused before anything is kept or logged, with short refusals.
func TestCoreBounds(t *testing.T) {
	r := newRig(t, 64)
	logs := r.logged()
	huge := strings.Repeat("n", 1<<20)
	long := strings.Repeat("n", maxNameLen+1)
	for _, c := range []struct {
		name   string
		change func(q *jobpb.RegisterRequest)
		text   string
	}{
		{"1 MB job name", func(q *jobpb.RegisterRequest) { q.Job = huge }, "job name of 1048576 bytes, want at most 256"},
		{"long job name", func(q *jobpb.RegisterRequest) { q.Job = long }, "want at most 256"},
		{"long token", func(q *jobpb.RegisterRequest) { q.Token = strings.Repeat("t", maxTokenLen+1) }, "token of 1025 bytes, want at most 1024"},
		{"long lane address", func(q *jobpb.RegisterRequest) { q.LaneAddresses[0] = huge }, "lane 0 address of 1048576 bytes"},
	} {
		q := regReq("j", 0, 1, 1, 4, 1)
		c.change(q)
		_, err := r.register(q)
		wantRefusal(t, err, codes.InvalidArgument, c.text)
		if len(err.Error()) > 200 {
			t.Errorf("%s: Refusal of %d bytes", c.name, len(err.Error()))
		}
	}
	if len(r.c.jobs) != 0 || logs.Len() != 0 {
		t.Fatalf("refused registrations left jobs %v, logs %q", r.c.jobs, logs.String()[:min(logs.Len(), 200)])
	}
	okName := strings.Repeat("n", maxNameLen)
	resp := r.run(okName, 1, 1)
	id := resp.GetSessionId()
	sec := r.sec(okName, 0)
	for _, c := range []struct {
		name string
		err  error
		text string
	}{
		{"barrier name", r.c.Barrier(r.waiter(), &jobpb.BarrierRequest{Job: okName, SessionId: id, Name: huge, RankSecret: sec}), "barrier name of 1048576 bytes"},
		{"broadcast name", r.c.Broadcast(r.waiter(), &jobpb.BroadcastRequest{Job: okName, SessionId: id, Name: long, RankSecret: sec}), "broadcast name of 257 bytes"},
		{"broadcast data", r.c.Broadcast(r.waiter(), &jobpb.BroadcastRequest{Job: okName, SessionId: id, Data: make([]byte, maxBroadcastData+1), RankSecret: sec}), "broadcast data of 1048577 bytes"},
		{"job name of a barrier", r.c.Barrier(r.waiter(), &jobpb.BarrierRequest{Job: huge, SessionId: id, RankSecret: sec}), "job name of 1048576 bytes"},
		{"job name of a watch", r.c.Watch(r.waiter(), &jobpb.WatchRequest{Job: huge, SessionId: id, RankSecret: sec}), "job name of 1048576 bytes"},
		{"token of a watch", r.c.Watch(r.waiter(), &jobpb.WatchRequest{Job: okName, SessionId: id, Token: huge, RankSecret: sec}), "token of 1048576 bytes"},
		{"job name of an abort", r.abort(&jobpb.AbortRequest{Job: huge, SessionId: id, RankSecret: sec}), "job name of 1048576 bytes"},
	} {
		wantRefusal(t, c.err, codes.InvalidArgument, c.text)
		if len(c.err.Error()) > 200 {
			t.Errorf("%s: Refusal of %d bytes", c.name, len(c.err.Error()))
		}
	}
	if j := r.c.jobs[okName]; len(j.rounds) != 0 || len(j.leased) != 0 || j.state != jobActive {
		t.Fatalf("refused calls changed the job: rounds %v, leased %v, %v", j.rounds, j.leased, j.state)
	}
	// An abort's reason is kept to its bound.
	if err := r.abort(&jobpb.AbortRequest{Job: okName, SessionId: id, Reason: huge, RankSecret: sec}); err != nil {
		t.Fatal(err)
	}
	if j := r.c.ended[id]; len(j.why) > maxNameLen+maxReasonLen+100 {
		t.Fatalf("an abort kept %d bytes of reason", len(j.why))
	}
}

// TestCoreBroadcastsHeldAreBounded: a job cannot make the controller hold
// more broadcast data than its bound, and data every rank fetched no
// longer counts.
func TestCoreBroadcastsHeldAreBounded(t *testing.T) {
	r := newRig(t, 64)
	id := r.run("j", 2, 1).GetSessionId()
	send := func(name string) error {
		err := r.c.Broadcast(r.waiter(), &jobpb.BroadcastRequest{Job: "j", Rank: 0, Root: 0, SessionId: id, Name: name,
			Data: make([]byte, maxBroadcastData), RankSecret: r.sec("j", 0)})
		r.collect()
		return err
	}
	n := maxBroadcastHeld / maxBroadcastData
	for i := range n {
		if err := send(fmt.Sprint(i)); err != nil {
			t.Fatalf("broadcast %d: %v", i, err)
		}
	}
	wantRefusal(t, send("one-more"), codes.ResourceExhausted, "bytes of broadcasts not every rank fetched")
	if r.c.jobs["j"].rounds["broadcast/one-more"] != nil {
		t.Fatal("the refused broadcast holds a name")
	}
	w := r.waiter()
	if err := r.c.Broadcast(w, &jobpb.BroadcastRequest{Job: "j", Rank: 1, Root: 0, SessionId: id, Name: "0", RankSecret: r.sec("j", 1)}); err != nil {
		t.Fatal(err)
	}
	r.collect()
	if a := r.answer(w); a.err != nil || len(a.data) != maxBroadcastData {
		t.Fatalf("rank 1 fetched %d bytes, %v", len(a.data), a.err)
	}
	if err := send("one-more"); err != nil {
		t.Fatalf("after a broadcast was fetched: %v", err)
	}
}
