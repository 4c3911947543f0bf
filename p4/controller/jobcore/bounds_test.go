package jobcore

import (
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
)

// admitAll takes every registration, as a switch that serves any world
// size would.
func admitAll(*jobpb.RegisterRequest, []netip.AddrPort) error { return nil }

// TestCoreGiveUpCostsTheSameAtAnyWorldSize: a registration of a job of
// 65,535 ranks that gives up allocates a bounded amount and answers with
// a bounded message, however many ranks are missing.
func TestCoreGiveUpCostsTheSameAtAnyWorldSize(t *testing.T) {
	const world, registered = 65535, 100
	r := newRig(t, 1<<16)
	r.c.cfg.Admit = admitAll
	var ws []Waiter
	for rank := uint32(0); rank < registered; rank++ {
		ws = append(ws, r.mustRegister(regReq("huge", rank, world, 1, 1, 1))...)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := r.c.GiveUp(ws[0], codes.DeadlineExceeded)
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<10 {
		t.Errorf("one registration giving up allocated %d bytes in a job of %d ranks, want a bound independent of the world size", n, world)
	}
	wantRefusal(t, err, codes.DeadlineExceeded, "job \"huge\": ranks 100, 101, 102 and 65432 others of 65535 never registered before rank 0's deadline")
	for i, w := range ws[1:] {
		err := r.c.GiveUp(w, codes.Canceled)
		if len(err.Error()) > 512 {
			t.Fatalf("give-up %d answered with %d bytes", i+1, len(err.Error()))
		}
	}
	if r.c.jobs["huge"] != nil {
		t.Fatal("a job whose every rank gave up is kept")
	}
	// Few ranks: each missing one is named.
	r = newRig(t, 64)
	ws = r.mustRegister(regReq("small", 1, 3, 1, 1, 1))
	wantRefusal(t, r.c.GiveUp(ws[0], codes.Canceled), codes.Canceled, "ranks 0 and 2 of 3 never registered")
}

// TestCoreByteBudgetCountsRegistrations: the registrations a client
// identity makes, waiting for their job, count against its byte budget;
// the refusal names the budget and its flag; other identities are not
// held back, and a registration that gives up frees its bytes.
func TestCoreByteBudgetCountsRegistrations(t *testing.T) {
	r := newRig(t, 1<<16)
	r.c.cfg.Admit = admitAll
	big := func(rank uint32) *jobpb.RegisterRequest {
		req := regReq("fat", rank, 1000, 256, 1, 1)
		req.Token = strings.Repeat("t", maxTokenLen)
		return req
	}
	cost := RegistrationCost(big(0))
	r.c.cfg.MaxBytesPerClient = 3*cost + cost/2
	reg := func(client string, req *jobpb.RegisterRequest) (Waiter, error) {
		w := r.waiter()
		err := r.c.admit(w, req, client, r.now)
		r.collect()
		return w, err
	}
	var ws []Waiter
	for rank := uint32(0); rank < 3; rank++ {
		w, err := reg("addr:10.0.0.1", big(rank))
		if err != nil {
			t.Fatalf("rank %d within the budget: %v", rank, err)
		}
		ws = append(ws, w)
	}
	_, err := reg("addr:10.0.0.1", big(3))
	wantRefusal(t, err, codes.ResourceExhausted, "client addr:10.0.0.1 holds")
	if !strings.Contains(err.Error(), "over its budget") || !strings.Contains(err.Error(), "MaxBytesPerClient") || strings.Contains(err.Error(), "ttttt") {
		t.Fatalf("refusal %q: want it to name the budget and its flag, and not the token", err)
	}
	// Another identity registers into the same job.
	if _, err := reg("addr:10.0.0.2", big(3)); err != nil {
		t.Fatalf("another client: %v", err)
	}
	// Registering a rank again replaces its bytes rather than adding, and
	// the call it replaces is answered rather than left holding them.
	if _, err := reg("addr:10.0.0.1", big(2)); err != nil {
		t.Fatalf("rank 2 registering again: %v", err)
	}
	wantRefusal(t, r.answer(ws[2]).err, codes.Aborted, "job \"fat\" rank 2 registered again")
	// A registration that gives up frees its bytes.
	r.c.GiveUp(ws[1], codes.Canceled)
	if _, err := reg("addr:10.0.0.1", big(4)); err != nil {
		t.Fatalf("after a registration gave up: %v", err)
	}
}

// TestCoreSlotQuotaAndTheRing: a job over its client's slot quota is
// refused, naming the flag, unless it may run over the ring, where it
// goes; a job larger than the whole pool is told there is no room.
func TestCoreSlotQuotaAndTheRing(t *testing.T) {
	r := newRig(t, 64)
	r.c.cfg.MaxSlotsPerClient = 32
	_, err := r.register(regReq("half-and-more", 0, 1, 2, 24, 1))
	wantRefusal(t, err, codes.ResourceExhausted, "over the limit of 32 per client (the controller's MaxSlotsPerClient)")
	ring := regReq("ring", 0, 1, 2, 24, 2)
	ring.FallbackAddress = "127.0.0.1:7000"
	w, err := r.register(ring)
	if err != nil {
		t.Fatalf("a registration that may run over the ring: %v", err)
	}
	if a := r.answer(w); !strings.Contains(a.resp.GetFallback(), "MaxSlotsPerClient") {
		t.Fatalf("answer %+v: want the ring, for the quota", a)
	}
	w, err = r.register(regReq("whole-and-more", 0, 1, 2, 64, 3))
	if err != nil {
		t.Fatalf("a job larger than the pool: %v", err)
	}
	wantRefusal(t, r.answer(w).err, codes.ResourceExhausted, "switch has no room")
}

// TestCoreRoundGiveUpCostsTheSameAtAnyWorldSize: a rank that gives up
// waiting in a barrier of a job of 65,535 ranks is answered with a bounded
// message naming a few of the ranks that did not come, and their count.
func TestCoreRoundGiveUpCostsTheSameAtAnyWorldSize(t *testing.T) {
	const world = 65535
	r := newRig(t, 64)
	p := switchjob.Placement{JobID: 3, PoolBase: 0, PoolSize: 4, Group: 3, World: world}
	r.c.Adopt([]switchjob.Placement{p}, []Claim{claimFor(p, "huge", 9, "")}, r.now, time.Hour)
	r.collect()
	var ws []Waiter
	for _, rank := range []uint32{0, 2, 5} {
		w, err := r.barrier("huge", rank, 9, "b", 1)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	wantRefusal(t, r.c.GiveUp(ws[1], codes.DeadlineExceeded), codes.DeadlineExceeded,
		"job \"huge\" barrier \"b\": ranks 1, 3, 4 and 65529 others did not come before rank 2's deadline (3 of 65535 ranks arrived, 0 of them gave up waiting)")
	err := r.c.GiveUp(ws[0], codes.DeadlineExceeded)
	wantRefusal(t, err, codes.DeadlineExceeded, "ranks 1, 3, 4 and 65529 others did not come before rank 0's deadline (3 of 65535 ranks arrived, 1 of them gave up waiting)")
	if len(err.Error()) > 512 {
		t.Fatalf("give-up answered with %d bytes", len(err.Error()))
	}
}
