package jobcore

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/switchml/switchml-go/jobpb"
)

// ringReq is regReq with a ring address: the rank may run over the ring.
func ringReq(job string, rank, world, lanes, window uint32, host byte) *jobpb.RegisterRequest {
	req := regReq(job, rank, world, lanes, window, host)
	req.FallbackAddress = fmt.Sprintf("127.0.2.%d:%d", rank+1, 40000+rank)
	return req
}

func ringAddrs(world uint32) []string {
	var addrs []string
	for rank := range world {
		addrs = append(addrs, fmt.Sprintf("127.0.2.%d:%d", rank+1, 40000+rank))
	}
	return addrs
}

// wantFallback checks that every Waiter got the ring with the same reason
// and every rank's address, and returns the reason.
func (r *rig) wantFallback(world uint32, ws ...Waiter) string {
	r.t.Helper()
	why := ""
	for _, w := range ws {
		a := r.answer(w)
		if a.err != nil || a.resp == nil || a.resp.GetFallback() == "" {
			r.t.Fatalf("Waiter %d answered %+v, want the ring", w, a)
		}
		if a.resp.GetSessionId() != 0 || a.resp.GetPoolSize() != 0 {
			r.t.Fatalf("ring answer %+v holds a session or a partition", a.resp)
		}
		if !slices.Equal(a.resp.GetFallbackAddresses(), ringAddrs(world)) {
			r.t.Fatalf("ring addresses %v, want %v", a.resp.GetFallbackAddresses(), ringAddrs(world))
		}
		if why != "" && a.resp.GetFallback() != why {
			r.t.Fatalf("ranks got different reasons: %q and %q", why, a.resp.GetFallback())
		}
		why = a.resp.GetFallback()
	}
	return why
}

// TestCoreFallbackFullPool: a job that finds no room goes to the ring,
// every rank with the same answer, when every rank gave a ring address;
// without them it fails as before; and a job that fits gets the ranks'
// ring addresses with its partition.
func TestCoreFallbackFullPool(t *testing.T) {
	r := newRig(t, 8)
	fits := r.mustRegister(ringReq("fits", 0, 2, 1, 4, 1), ringReq("fits", 1, 2, 1, 4, 1))
	r.c.Installed(r.takeInstall().Gen, nil, r.now)
	r.collect()
	if got := r.answer(fits[0]).resp.GetFallbackAddresses(); !slices.Equal(got, ringAddrs(2)) {
		t.Fatalf("a placed job's ring addresses %v, want %v", got, ringAddrs(2))
	}
	ws := r.mustRegister(ringReq("big", 0, 3, 1, 8, 2), ringReq("big", 1, 3, 1, 8, 2), ringReq("big", 2, 3, 1, 8, 2))
	if len(r.installs) != 0 {
		t.Fatalf("installs %v for a job that does not fit", r.installs)
	}
	why := r.wantFallback(3, ws...)
	if want := "switch has no room"; !strings.Contains(why, want) {
		t.Fatalf("reason %q, want it to say %q", why, want)
	}
	if r.c.jobs["big"] != nil || r.c.endings[EndFallback] != 1 {
		t.Fatalf("job table %v, fallbacks %d after the fallback, want the job gone and one counted", r.c.jobs, r.c.endings[EndFallback])
	}
	// One rank without a ring address: every rank fails as before.
	ws = r.mustRegister(ringReq("mixed", 0, 2, 1, 8, 3), regReq("mixed", 1, 2, 1, 8, 3))
	for _, w := range ws {
		wantRefusal(t, r.answer(w).err, codes.ResourceExhausted, "no room")
	}
}

// TestCoreFallbackTooManyWorkers: a job larger than the switch serves is
// let in when its ranks may run over the ring, and goes there once all are
// in; without a ring address it is refused at once.
func TestCoreFallbackTooManyWorkers(t *testing.T) {
	r := newRig(t, 64)
	world := uint32(rigMaxWorkers + 1)
	_, err := r.register(regReq("big", 0, world, 1, 1, 1))
	wantRefusal(t, err, codes.InvalidArgument, "at most")
	var ws []Waiter
	for rank := range world {
		ws = append(ws, r.mustRegister(ringReq("big", rank, world, 1, 1, 1))...)
		if rank+1 < world {
			r.pending(ws...)
		}
	}
	if why := r.wantFallback(world, ws...); !strings.Contains(why, "workers per job") {
		t.Fatalf("reason %q, want the switch's limit", why)
	}
}

// TestCoreFallbackSwitchOffline: a job whose ranks may run over the ring
// and that gathers while the switch is away goes to the ring, and keeps
// gathering through the loss of the switch; and a failed install sends it
// there too.
func TestCoreFallbackSwitchOffline(t *testing.T) {
	r := newRig(t, 64)
	w0 := r.mustRegister(ringReq("a", 0, 2, 1, 4, 1))
	r.c.SwitchLost("the switch's P4Runtime stream broke")
	r.collect()
	r.pending(w0...)
	w1 := r.mustRegister(ringReq("a", 1, 2, 1, 4, 1))
	if why := r.wantFallback(2, append(w0, w1...)...); !strings.Contains(why, "offline") {
		t.Fatalf("reason %q, want it to say the switch is offline", why)
	}
	r.c.SwitchBack()
	ws := r.mustRegister(ringReq("b", 0, 2, 1, 4, 1), ringReq("b", 1, 2, 1, 4, 1))
	in := r.takeInstall()
	r.c.Installed(in.Gen, Refuse(codes.Unavailable, "programming the switch failed: connection refused"), r.now)
	r.collect()
	r.wantFallback(2, ws...)
	// Its room is free again.
	r.run("c", 2, 2)
}

// TestCoreFallbackAbortBySwitch: a rank's report that the switch stopped
// answering ends the session as a lost switch, which the leases say.
func TestCoreFallbackAbortBySwitch(t *testing.T) {
	r := newRig(t, 64)
	resp := r.run("a", 2, 1)
	lease := r.watch(&jobpb.WatchRequest{Job: "a", Rank: 1, SessionId: resp.GetSessionId()})
	if err := r.abort(&jobpb.AbortRequest{Job: "a", Rank: 0, SessionId: resp.GetSessionId(), Reason: "no answer", SwitchUnreachable: true, RankSecret: r.sec("a", 0)}); err != nil {
		t.Fatal(err)
	}
	r.collect()
	if a := r.answer(lease); a.cause != EndSwitchLost || !strings.Contains(a.ended, "no answer") {
		t.Fatalf("lease answered %+v, want the switch lost", a)
	}
}

func TestCoreFallbackAddressChecked(t *testing.T) {
	r := newRig(t, 64)
	for _, bad := range []string{"nohost", ":80", "h:0", "h:99999", "h:x"} {
		req := regReq("a", 0, 1, 1, 4, 1)
		req.FallbackAddress = bad
		_, err := r.register(req)
		wantRefusal(t, err, codes.InvalidArgument, "fallback_address")
	}
}
