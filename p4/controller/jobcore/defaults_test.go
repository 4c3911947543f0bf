package jobcore

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// admitAs registers req as client at the rig's time.
func (r *rig) admitAs(client string, req *jobpb.RegisterRequest) (Waiter, error) {
	r.t.Helper()
	w := r.waiter()
	r.regs[w] = req
	err := r.c.admit(w, req, client, r.now)
	r.collect()
	return w, err
}

// TestCoreOpenJobRankTaken: a registration for a rank of a job without a
// token that is running, or that a gathering job already holds, is
// refused as taken, and the job goes on; a job with a token restarts for
// its token only.
func TestCoreOpenJobRankTaken(t *testing.T) {
	r := newRig(t, 64)
	resp := r.run("open", 2, 1)
	gen := r.c.jobs["open"].gen
	for _, rank := range []uint32{0, 1} {
		_, err := r.admitAs("addr:10.9.9.9", regReq("open", rank, 2, 1, 4, 9))
		wantRefusal(t, err, codes.PermissionDenied, "rank "+string('0'+rune(rank))+" is taken")
	}
	if j := r.c.jobs["open"]; j == nil || j.gen != gen || j.state != jobActive || len(r.removals) != 0 {
		t.Fatalf("the running job did not go on: %+v, removals %v", j, r.removals)
	}
	r.watch(&jobpb.WatchRequest{Job: "open", Rank: 0, SessionId: resp.GetSessionId()})

	// Gathering: the rank's registration is held, not replaced.
	w0, err := r.register(regReq("gather", 0, 3, 1, 4, 2))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.admitAs("addr:10.9.9.9", regReq("gather", 0, 3, 1, 4, 9))
	wantRefusal(t, err, codes.PermissionDenied, "job \"gather\" rank 0 is taken")
	if !strings.Contains(err.Error(), "Config.Token") {
		t.Errorf("refusal %q does not say how to give a token", err)
	}
	r.pending(w0)
	if j := r.c.jobs["gather"]; j == nil || j.state != jobGathering || j.ranks[0].by != w0 {
		t.Fatalf("the gathering job lost rank 0: %+v", j)
	}

	// With a token: a stranger is refused, the token's holder restarts it.
	r.runWith("owned", 1, 3, "t")
	_, err = r.admitAs("addr:10.9.9.9", withToken(regReq("owned", 0, 1, 1, 4, 3), "guess"))
	wantRefusal(t, err, codes.PermissionDenied, "belongs to another owner")
	_, err = r.admitAs("addr:10.9.9.9", regReq("owned", 0, 1, 1, 4, 3))
	wantRefusal(t, err, codes.PermissionDenied, "belongs to another owner")
	if _, err := r.admitAs(rigClient, withToken(regReq("owned", 0, 1, 1, 4, 3), "t")); err != nil {
		t.Fatalf("the token's holder restarting its job: %v", err)
	}
}

// TestCoreOutsiderCannotEndGatheringJob: a registration of another world
// size is refused; it ends the gathering job only when it carries the
// job's token or, for a job without one, comes from the identity that
// started it.
func TestCoreOutsiderCannotEndGatheringJob(t *testing.T) {
	r := newRig(t, 64)
	w0, err := r.register(regReq("open", 0, 3, 1, 4, 1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.admitAs("addr:10.9.9.9", regReq("open", 1, 2, 1, 4, 9))
	wantRefusal(t, err, codes.FailedPrecondition, "world_size 2 differs from 3")
	r.pending(w0)
	if j := r.c.jobs["open"]; j == nil || j.state != jobGathering {
		t.Fatalf("an outsider's registration ended the job: %+v", j)
	}
	// Its starter's own mistake still ends it at once.
	_, err = r.register(regReq("open", 1, 2, 1, 4, 1))
	wantRefusal(t, err, codes.FailedPrecondition, "world_size 2 differs from 3")
	wantRefusal(t, r.answer(w0).err, codes.FailedPrecondition, "cannot form: rank 1 was refused")

	// A job with a token: without it, nothing ends; with it, from any
	// identity, the job cannot form.
	w0, err = r.register(withToken(regReq("owned", 0, 3, 1, 4, 2), "t"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.admitAs("addr:10.9.9.9", regReq("owned", 1, 2, 1, 4, 9))
	wantRefusal(t, err, codes.PermissionDenied, "belongs to another owner")
	_, err = r.admitAs("addr:10.9.9.9", withToken(regReq("owned", 1, 2, 1, 4, 9), "guess"))
	wantRefusal(t, err, codes.PermissionDenied, "belongs to another owner")
	r.pending(w0)
	_, err = r.admitAs("addr:10.0.0.2", withToken(regReq("owned", 1, 2, 1, 4, 2), "t"))
	wantRefusal(t, err, codes.FailedPrecondition, "world_size 2 differs from 3")
	wantRefusal(t, r.answer(w0).err, codes.FailedPrecondition, "cannot form: rank 1 was refused")
}

// TestCoreRefuseOpen: with RefuseOpen a registration without a token is
// refused, saying how to give one; without it, the job is accepted and
// logged as open once.
func TestCoreRefuseOpen(t *testing.T) {
	r := newRig(t, 64)
	r.c.cfg.RefuseOpen = true
	_, err := r.register(regReq("j", 0, 2, 1, 4, 1))
	wantRefusal(t, err, codes.PermissionDenied, "job \"j\" has no token")
	for _, want := range []string{"Config.Token", "AllowOpenJobs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %s", err, want)
		}
	}
	if r.c.jobs["j"] != nil {
		t.Fatal("a refused registration made a job")
	}
	r.runWith("j", 2, 1, "t")

	r = newRig(t, 64)
	logs := r.logged()
	r.run("open", 2, 1)
	r.runWith("owned", 1, 2, "the-token")
	if n := strings.Count(logs.String(), "controller: open job"); n != 1 || !strings.Contains(logs.String(), "job=open") {
		t.Errorf("%d log lines of an open job, want 1 naming it:\n%s", n, logs)
	}
	if strings.Contains(logs.String(), "the-token") {
		t.Errorf("the log holds a token:\n%s", logs)
	}
}

// TestCoreEndedJobKeepsItsOwner: for ownerKept after a job with a token
// ended, its name is refused to other tokens and to none; its own token
// takes it again, and after ownerKept anyone may. The memory is bounded.
func TestCoreEndedJobKeepsItsOwner(t *testing.T) {
	r := newRig(t, 64)
	resp := r.runWith("j", 1, 1, "t")
	if err := r.c.Leave(&jobpb.LeaveRequest{Job: "j", SessionId: resp.GetSessionId(), RankSecret: r.sec("j", 0)}); err != nil {
		t.Fatal(err)
	}
	r.collect()
	r.c.Removed(r.takeRemoval().Gen, r.now)
	for _, token := range []string{"guess", ""} {
		_, err := r.register(withToken(regReq("j", 0, 1, 1, 4, 2), token))
		wantRefusal(t, err, codes.PermissionDenied, "job \"j\" ended less than")
		if r.c.jobs["j"] != nil {
			t.Fatalf("token %q took the ended job's name", token)
		}
	}
	r.now = r.now.Add(ownerKept - 1)
	_, err := r.register(regReq("j", 0, 1, 1, 4, 2))
	wantRefusal(t, err, codes.PermissionDenied, "belongs to another owner")
	r.now = r.now.Add(1)
	if _, err := r.register(withToken(regReq("j", 0, 1, 1, 4, 2), "other")); err != nil {
		t.Fatalf("after ownerKept: %v", err)
	}

	r = newRig(t, 64)
	r.runWith("k", 1, 1, "t")
	r.c.SwitchLost("the switch went away")
	r.collect()
	if _, err := r.register(withToken(regReq("k", 0, 1, 1, 4, 1), "t")); err != nil {
		t.Fatalf("the owner again: %v", err)
	}

	for i := range maxOwnersKept + 10 {
		r.c.keepOwner(&job{name: "n" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), owner: [32]byte{1}, registeredAt: r.now})
	}
	r.c.Tick(r.now)
	if len(r.c.owners) > maxOwnersKept || len(r.c.unstamped) != 0 {
		t.Fatalf("%d owners kept, %d undated; want at most %d, all dated", len(r.c.owners), len(r.c.unstamped), maxOwnersKept)
	}
}

// TestCoreAdoptedJobKeepsItsOwner: a job taken back from the switch by its
// claim keeps its name for its owner when it ends, as a job registered on
// this controller does: for ownerKept another token cannot start a job
// under it, and the owner's token can. A job found without a claim has
// no name, and keeps nothing.
func TestCoreAdoptedJobKeepsItsOwner(t *testing.T) {
	r := newRig(t, 64)
	kept, orphan := adoptedJob(5, 0, 7), adoptedJob(6, 4, 8)
	r.c.Adopt([]switchjob.Placement{kept, orphan}, []Claim{claimFor(kept, "adopted", 55, "t")}, r.now, time.Hour)
	r.collect()
	for rank := range uint32(2) {
		r.watch(&jobpb.WatchRequest{Job: "adopted", Rank: rank, SessionId: 55, JobId: 5, Token: "t"})
	}
	for rank := range uint32(2) {
		if err := r.c.Leave(&jobpb.LeaveRequest{Job: "adopted", Rank: rank, SessionId: 55, RankSecret: r.sec("adopted", rank)}); err != nil {
			t.Fatal(err)
		}
	}
	r.collect()
	if r.c.jobs["adopted"] != nil {
		t.Fatal("the adopted job did not end when its ranks left")
	}
	r.now = r.now.Add(ownerKept / 2)
	r.c.Tick(r.now) // the orphan's grace runs on: an hour
	for _, token := range []string{"squatter", ""} {
		_, err := r.register(withToken(regReq("adopted", 0, 1, 1, 4, 2), token))
		wantRefusal(t, err, codes.PermissionDenied, "job \"adopted\" ended less than")
	}
	if _, ok := r.c.owners[""]; ok {
		t.Fatal("a job found without a claim kept an owner under the empty name")
	}
	if _, err := r.register(withToken(regReq("adopted", 0, 1, 1, 4, 2), "t")); err != nil {
		t.Fatalf("the owner's token: %v", err)
	}
}

// TestCoreStatusShowsStrangersNothing: a redacted view lists only the
// jobs its identity started or registered a rank of.
func TestCoreStatusShowsStrangersNothing(t *testing.T) {
	r := newRig(t, 64)
	if _, err := r.admitAs("cert:alice", regReq("alice-job", 0, 2, 1, 4, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.admitAs("cert:bob", regReq("bob-job", 0, 2, 1, 4, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.admitAs("cert:carol", regReq("bob-job", 1, 2, 1, 4, 3)); err != nil {
		t.Fatal(err)
	}
	r.c.Installed(r.takeInstall().Gen, nil, r.now)
	r.collect()
	names := func(v StatusView) []string {
		jobs, _ := r.c.StatusJobs(r.now, 0, 10, v)
		var out []string
		for _, j := range jobs {
			out = append(out, j.GetName())
		}
		return out
	}
	for _, c := range []struct {
		view StatusView
		want string
	}{
		{StatusView{RankBytes: 1 << 20}, "bob-job alice-job"},
		{StatusView{Redact: true, Client: "cert:alice", RankBytes: 1 << 20}, "alice-job"},
		{StatusView{Redact: true, Client: "cert:bob", RankBytes: 1 << 20}, "bob-job"},
		{StatusView{Redact: true, Client: "cert:carol", RankBytes: 1 << 20}, "bob-job"},
		{StatusView{Redact: true, Client: "cert:mallory", RankBytes: 1 << 20}, ""},
		{StatusView{Redact: true, RankBytes: 1 << 20}, ""},
	} {
		if got := strings.Join(names(c.view), " "); got != c.want {
			t.Errorf("view %+v lists %q, want %q", c.view, got, c.want)
		}
	}
}
