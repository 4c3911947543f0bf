package jobcore

import (
	"strings"
	"testing"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc/codes"
)

// TestCoreLeaveStrandsNoBarrier: a rank that leaves while its peers wait
// for it in a barrier ends the job at once, naming it and the barrier; a
// barrier entered after a rank left ends it too; a barrier the leaver
// had already joined, and ranks leaving one by one after the last
// barrier, end nothing early.
func TestCoreLeaveStrandsNoBarrier(t *testing.T) {
	r := newRig(t, 64)
	leave := func(job string, rank uint32, session uint64) {
		t.Helper()
		if err := r.c.Leave(&jobpb.LeaveRequest{Job: job, Rank: rank, SessionId: session, RankSecret: r.sec(job, rank)}); err != nil {
			t.Fatal(err)
		}
		r.collect()
	}

	// Peers wait in "b" for rank 0, which leaves instead.
	a := r.run("a", 3, 10)
	w1, _ := r.barrier("a", 1, a.GetSessionId(), "b", 1)
	w2, _ := r.barrier("a", 2, a.GetSessionId(), "b", 1)
	r.pending(w1, w2)
	leave("a", 0, a.GetSessionId())
	for _, w := range []Waiter{w1, w2} {
		if err := r.answer(w).err; CodeOf(err) != codes.Aborted || !strings.Contains(err.Error(), `rank 0 closed its session (left) while rank 1 waited for it in barrier "b"`) {
			t.Errorf("Waiter %d: %v, want Aborted naming rank 0 and the barrier", w, err)
		}
	}

	drained := func() {
		t.Helper()
		rm := r.takeRemoval()
		r.c.Removed(rm.Gen, r.now)
		r.collect()
	}
	drained()

	// Rank 0 leaves first; rank 1's next barrier ends the job at once.
	b := r.run("b", 2, 20)
	leave("b", 0, b.GetSessionId())
	w, err := r.barrier("b", 1, b.GetSessionId(), "late", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.answer(w).err; CodeOf(err) != codes.Aborted || !strings.Contains(err.Error(), "rank 0 closed its session") {
		t.Errorf("a barrier after rank 0 left: %v, want Aborted naming rank 0", err)
	}
	drained()

	// A normal end: every rank passes the last barrier, then they leave
	// one by one; nothing is aborted, and the job finishes.
	c := r.run("c", 3, 30)
	var ws []Waiter
	for rank := range uint32(3) {
		w, _ := r.barrier("c", rank, c.GetSessionId(), "done", 1)
		ws = append(ws, w)
	}
	for _, w := range ws {
		if err := r.answer(w).err; err != nil {
			t.Fatalf("the last barrier: %v", err)
		}
	}
	ended := r.c.endings
	leave("c", 2, c.GetSessionId())
	leave("c", 0, c.GetSessionId())
	if r.c.endings != ended {
		t.Fatalf("ranks leaving after the last barrier ended the job early: %v", r.c.endings)
	}
	leave("c", 1, c.GetSessionId())
	if r.c.endings[EndFinished] != ended[EndFinished]+1 {
		t.Errorf("the job did not finish when every rank left: %v", r.c.endings)
	}
}

// TestCoreJobThatCannotForm: a registration refused in a way waiting
// cannot mend (another world size, a malformed lane address) ends the
// gathering job it was for, and the ranks already waiting learn why,
// naming the rank; a stranger's refused registration (another token), or
// one refused for a reason that may pass, ends nothing.
func TestCoreJobThatCannotForm(t *testing.T) {
	r := newRig(t, 64)
	for _, c := range []struct {
		name string
		bad  func(*jobpb.RegisterRequest)
		want string
	}{
		{"another world size", func(q *jobpb.RegisterRequest) { q.WorldSize = 4 }, "world_size 4 differs from 3"},
		{"a malformed lane address", func(q *jobpb.RegisterRequest) { q.LaneAddresses = []string{"nowhere"} }, "lane 0 address"},
	} {
		host := byte(40 + 10*len(c.name)%200)
		job := "form-" + strings.ReplaceAll(c.name, " ", "-")
		ws := r.mustRegister(regReq(job, 0, 3, 1, 4, host), regReq(job, 1, 3, 1, 4, host))
		r.pending(ws...)

		// A stranger with another token, and a rank whose address another
		// live job holds, end nothing.
		stranger := regReq(job, 2, 4, 1, 4, host)
		stranger.Token = "not-the-owner"
		if _, err := r.register(stranger); CodeOf(err) != codes.PermissionDenied {
			t.Fatalf("%s: a stranger's registration: %v", c.name, err)
		}
		r.pending(ws...)

		bad := regReq(job, 2, 3, 1, 4, host)
		c.bad(bad)
		if _, err := r.register(bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: the bad registration: %v, want a Refusal containing %q", c.name, err, c.want)
		}
		for _, w := range ws {
			err := r.answer(w).err
			if CodeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cannot form: rank 2 was refused") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: waiting rank: %v, want the job ended naming rank 2 and why", c.name, err)
			}
		}
		if r.c.jobs[job] != nil {
			t.Errorf("%s: the job is still in the table", c.name)
		}

		// A late rank of that run, with the right settings, is told why
		// at once instead of gathering alone; after unformedFor, or once
		// a rank that was in it registers again (a new run), the name
		// gathers as usual.
		late := regReq(job, 2, 3, 1, 4, host)
		if _, err := r.register(late); CodeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cannot form: rank 2 was refused") {
			t.Errorf("%s: a late rank: %v, want the cause", c.name, err)
		}
		again := r.mustRegister(regReq(job, 0, 3, 1, 4, host), regReq(job, 2, 3, 1, 4, host))
		r.pending(again...)
		for _, w := range again {
			r.c.GiveUp(w, codes.Canceled)
		}
	}
	ws := r.mustRegister(regReq("late", 0, 3, 1, 4, 120))
	if _, err := r.register(regReq("late", 2, 4, 1, 4, 120)); err == nil {
		t.Fatal("a rank of another world size was taken")
	}
	r.answer(ws[0])
	r.now = r.now.Add(unformedFor)
	r.pending(r.mustRegister(regReq("late", 1, 3, 1, 4, 120))...)
}

// abort hands the core a rank's abort, with nothing learned from the
// switch.
func (r *rig) abort(req *jobpb.AbortRequest) error {
	_, _, err := r.c.Abort(req, Stall{})
	return err
}

// TestCoreStalledRankIsNotASwitchLoss: a rank gives up on the switch; when
// the switch answered and the job's slots wait for rank 2, the job ends
// naming rank 2 as stopped (rank_failed), not as a switch loss; when the
// switch did not answer (or was not asked), it is a switch loss as before.
func TestCoreStalledRankIsNotASwitchLoss(t *testing.T) {
	for _, c := range []struct {
		name      string
		v         Stall
		cause     EndCause
		wantWhy   string
		wantCause string
	}{
		{"rank 2 stopped", Stall{Asked: true, Answered: true, Missing: map[int]int{2: 8}}, EndRankFailed,
			"rank 2 stopped sending: the switch answers and holds 8 of the job's slots waiting for it (rank 0 gave up waiting: no answer)", "rank_failed"},
		{"two ranks stopped", Stall{Asked: true, Answered: true, Missing: map[int]int{2: 3, 1: 5}}, EndRankFailed,
			"ranks 1, 2 stopped sending", "rank_failed"},
		{"no slot waits", Stall{Asked: true, Answered: true, Missing: map[int]int{}}, EndSwitchLost, "aborted by rank 0: no answer", "switch_lost"},
		{"switch silent", Stall{Asked: true}, EndSwitchLost, "aborted by rank 0: no answer", "switch_lost"},
		{"not asked", Stall{}, EndSwitchLost, "aborted by rank 0: no answer", "switch_lost"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 64)
			resp := r.run("j", 3, 10)
			lease := r.watch(&jobpb.WatchRequest{Job: "j", Rank: 1, SessionId: resp.GetSessionId()})
			cause, why, err := r.c.Abort(&jobpb.AbortRequest{Job: "j", Rank: 0, SessionId: resp.GetSessionId(), Reason: "no answer",
				SwitchUnreachable: true, RankSecret: r.sec("j", 0)}, c.v)
			r.collect()
			if err != nil || cause != c.wantCause || !strings.Contains(why, c.wantWhy) {
				t.Fatalf("abort: %q, %q, %v; want %q containing %q", cause, why, err, c.wantCause, c.wantWhy)
			}
			if a := r.answer(lease); a.cause != c.cause || !strings.Contains(a.ended, c.wantWhy) {
				t.Errorf("rank 1's lease ended %v %q, want %v containing %q", a.cause, a.ended, c.cause, c.wantWhy)
			}
			if r.c.endings[c.cause] != 1 {
				t.Errorf("endings %v, want one %v", r.c.endings, c.cause)
			}
		})
	}
}
