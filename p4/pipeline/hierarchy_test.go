package pipeline

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

var (
	parentAddr = netip.MustParseAddrPort("10.200.0.1:48864")
	otherAddr  = netip.MustParseAddrPort("10.200.0.2:48864")
)

// leafWithUplink is a leaf switch with job 7's 3 workers on slots [4, 12),
// whose partial sums go to parentAddr's slots [100, 108).
func leafWithUplink(t *testing.T) *Pipeline {
	t.Helper()
	p := newPipe(t, 16, 64, 32)
	setupJob(t, p, 7, 0, 3, 1, 4, 8)
	if err := p.InsertUplink(7, switchjob.Uplink{Parent: parentAddr, ParentBase: 100, PoolBase: 4, PoolSize: 8, MulticastGroup: 1}); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHierarchLeafSendsPartialSumsUpAndResultDown(t *testing.T) {
	p := leafWithUplink(t)
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 9, PacketID: 42, Set: 1, Slot: 5, Elements: 4}
	for r := 0; r < 3; r++ {
		h.Exp0 = int8(r - 1)
		p.Process(addr(r), mkpkt(t, h, []int32{1, 2, 3, int32(r)}), &out)
	}
	if len(out.Dests) != 1 || out.Dests[0] != parentAddr {
		t.Fatalf("completed use went to %v, want the parent %v only", out.Dests, parentAddr)
	}
	uh, uv := decode(t, out.Packet)
	if uh.Slot != 101 || uh.Set != 1 || uh.Seq != 9 || uh.PacketID != 42 || uh.Exp0 != 1 || uh.Result {
		t.Fatalf("upstream header %+v, want slot 101 set 1 seq 9 packet 42 exponent 1, a contribution (no result mark)", uh)
	}
	if want := []int32{3, 6, 9, 3}; !slices.Equal(uv, want) {
		t.Fatalf("partial sums %v, want %v", uv, want)
	}

	// A worker retransmitting before the parent answered makes the leaf
	// ask the parent again, never answer with partial sums.
	p.Process(addr(1), mkpkt(t, h, []int32{1, 2, 3, 1}), &out)
	if len(out.Dests) != 1 || out.Dests[0] != parentAddr {
		t.Fatalf("retransmission while waiting went to %v, want the parent", out.Dests)
	}
	if _, v := decode(t, out.Packet); !slices.Equal(v, []int32{3, 6, 9, 3}) {
		t.Fatalf("resent partial sums %v changed", v)
	}
	// The other workers' retransmissions of the same round stay here: one
	// copy per round goes up, not one per worker.
	p.Process(addr(0), mkpkt(t, h, []int32{1, 2, 3, 0}), &out)
	p.Process(addr(2), mkpkt(t, h, []int32{1, 2, 3, 2}), &out)
	if len(out.Dests) != 0 {
		t.Fatalf("a second retransmission of the round went to %v, want none", out.Dests)
	}
	p.Process(addr(1), mkpkt(t, h, []int32{1, 2, 3, 1}), &out)
	if len(out.Dests) != 1 || out.Dests[0] != parentAddr {
		t.Fatalf("the next round's first retransmission went to %v, want the parent", out.Dests)
	}

	// The parent's result: slot in the parent's numbering, the job-wide
	// exponent maximum and sums.
	res := uh
	res.Exp0 = 5
	res.Result = true
	p.Process(parentAddr, mkpkt(t, res, []int32{30, 60, 90, 12}), &out)
	if len(out.Dests) != 3 {
		t.Fatalf("parent's result multicast to %v, want the 3 workers", out.Dests)
	}
	dh, dv := decode(t, out.Packet)
	if dh.Slot != 5 || dh.Exp0 != 5 || !dh.Result || !slices.Equal(dv, []int32{30, 60, 90, 12}) {
		t.Fatalf("result to workers %+v %v, want slot 5 exponent 5 and the parent's sums", dh, dv)
	}

	// A worker that lost the multicast gets the final sums, not the
	// partial ones.
	p.Process(addr(2), mkpkt(t, h, []int32{1, 2, 3, 2}), &out)
	if len(out.Dests) != 1 || out.Dests[0] != replyAddr(2) {
		t.Fatalf("retransmission after the result went to %v, want rank 2", out.Dests)
	}
	if rh, v := decode(t, out.Packet); rh.Exp0 != 5 || !slices.Equal(v, []int32{30, 60, 90, 12}) {
		t.Fatalf("answer to a retransmission %+v %v, want the final sums", rh, v)
	}

	// The parent's duplicate is stale now.
	p.Process(parentAddr, mkpkt(t, res, []int32{30, 60, 90, 12}), &out)
	if len(out.Dests) != 0 || out.Reason != switchjob.StatDropStale {
		t.Fatalf("duplicate result: dests %v reason %v, want dropped as stale", out.Dests, out.Reason)
	}
	c := p.Counters()
	if c[switchjob.StatUpstream] != 1 || c[switchjob.StatUpstreamResend] != 2 || c[switchjob.StatFromParent] != 1 {
		t.Fatalf("counters upstream %d, resend %d, from parent %d; want 1, 2, 1", c[switchjob.StatUpstream], c[switchjob.StatUpstreamResend], c[switchjob.StatFromParent])
	}
}

func TestHierarchLeafRefusesResultsOfOtherUses(t *testing.T) {
	p := leafWithUplink(t)
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 3, PacketID: 8, Set: 0, Slot: 6, Elements: 2}
	res := h
	res.Slot = 102
	// Before the leaf's use completed: the parent cannot have a result
	// for it, so this is a stray copy.
	p.Process(addr(0), mkpkt(t, h, []int32{1, 1}), &out)
	p.Process(parentAddr, mkpkt(t, res, []int32{9, 9}), &out)
	if out.Reason != switchjob.StatDropStale || len(out.Dests) != 0 {
		t.Fatalf("result before completion: dests %v reason %v, want dropped as stale", out.Dests, out.Reason)
	}
	p.Process(addr(1), mkpkt(t, h, []int32{1, 1}), &out)
	p.Process(addr(2), mkpkt(t, h, []int32{1, 1}), &out)
	if len(out.Dests) != 1 {
		t.Fatalf("completion went to %v, want the parent", out.Dests)
	}
	// A result of an earlier use of the same (slot, set).
	old := res
	old.Seq, old.PacketID = 2, 4
	p.Process(parentAddr, mkpkt(t, old, []int32{7, 7}), &out)
	if out.Reason != switchjob.StatDropStale {
		t.Fatalf("result of an older use: reason %v, want dropped as stale", out.Reason)
	}
	// A slot outside the job's partition at the parent.
	out2 := res
	out2.Slot = 140
	p.Process(parentAddr, mkpkt(t, out2, []int32{7, 7}), &out)
	if out.Reason != switchjob.StatDropOutOfPartition {
		t.Fatalf("result outside the partition: reason %v, want out of partition", out.Reason)
	}
	// Another source is no parent and no worker.
	p.Process(otherAddr, mkpkt(t, res, []int32{7, 7}), &out)
	if out.Reason != switchjob.StatDropNotWorker {
		t.Fatalf("result from a stranger: reason %v, want not a worker", out.Reason)
	}
	p.Process(parentAddr, mkpkt(t, res, []int32{9, 9}), &out)
	if len(out.Dests) != 3 {
		t.Fatalf("the right result went to %v, want the 3 workers", out.Dests)
	}
}

// TestHierarchTwoLevelsSum runs two leaves and a spine as pipelines, packet
// by packet: 2 workers per leaf, the spine sees each leaf as one worker.
func TestHierarchTwoLevelsSum(t *testing.T) {
	spine := newPipe(t, 8, 64, 32)
	leafAddr := []netip.AddrPort{netip.MustParseAddrPort("10.201.0.1:48864"), netip.MustParseAddrPort("10.201.0.2:48864")}
	var reps []switchjob.Replica
	for l, a := range leafAddr {
		if err := spine.InsertWorker(WorkerKey{a}, switchjob.Worker{JobID: 3, Rank: uint16(l), NumWorkers: 2, MulticastGroup: 5, PoolBase: 0, PoolSize: 8}); err != nil {
			t.Fatal(err)
		}
		if err := spine.InsertReply(ReplyKey{JobID: 3, Rank: uint16(l)}, Reply{Addr: a}); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, switchjob.Replica{EgressPort: uint32(l), Instance: uint16(l)})
	}
	if err := spine.InsertMulticastGroup(5, reps); err != nil {
		t.Fatal(err)
	}
	leaves := make([]*Pipeline, 2)
	for l := range leaves {
		leaves[l] = newPipe(t, 8, 64, 32)
		setupJob(t, leaves[l], 1, 10*l, 2, 1, 0, 8)
		if err := leaves[l].InsertUplink(1, switchjob.Uplink{Parent: parentAddr, ParentBase: 0, PoolBase: 0, PoolSize: 8, MulticastGroup: 1}); err != nil {
			t.Fatal(err)
		}
	}
	h := wire.Header{Format: wire.FormatExtended, Seq: 1, PacketID: 1, Slot: 2, Elements: 3, Exp0: 0}
	var toSpine [][]byte
	var from []netip.AddrPort
	for l, leaf := range leaves {
		for r := 0; r < 2; r++ {
			var out Output
			h.Exp0 = int8(l*2 + r)
			leaf.Process(addr(10*l+r), mkpkt(t, h, []int32{int32(l*2 + r + 1), -1, 1 << 30}), &out)
			if len(out.Dests) == 1 {
				toSpine = append(toSpine, append([]byte(nil), out.Packet...))
				from = append(from, leafAddr[l])
			}
		}
	}
	if len(toSpine) != 2 {
		t.Fatalf("%d partial sums reached the spine, want 2", len(toSpine))
	}
	var sout Output
	for i, pkt := range toSpine {
		spine.Process(from[i], pkt, &sout)
	}
	if len(sout.Dests) != 2 {
		t.Fatalf("spine multicast to %v, want both leaves", sout.Dests)
	}
	for l, leaf := range leaves {
		var out Output
		leaf.Process(parentAddr, sout.Packet, &out)
		if len(out.Dests) != 2 {
			t.Fatalf("leaf %d sent the result to %v, want its 2 workers", l, out.Dests)
		}
		rh, v := decode(t, out.Packet)
		// 1+2+3+4 = 10; 4 * 2^30 wraps to 0 in int32.
		if rh.Exp0 != 3 || !slices.Equal(v, []int32{10, -4, 0}) {
			t.Fatalf("leaf %d result %+v %v, want exponent 3 and [10 -4 0]", l, rh, v)
		}
	}
}

func TestHierarchUplinkTable(t *testing.T) {
	p := newPipe(t, 16, 64, 32)
	u := switchjob.Uplink{Parent: parentAddr, PoolBase: 4, PoolSize: 8, MulticastGroup: 1}
	if err := p.InsertUplink(1, u); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertUplink(1, u); !errors.Is(err, ErrExists) {
		t.Fatalf("second insert: %v, want ErrExists", err)
	}
	bad := u
	bad.PoolSize = 13
	if err := p.ModifyUplink(1, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("partition beyond the pool: %v, want ErrInvalid", err)
	}
	bad = u
	bad.Parent = netip.AddrPort{}
	if err := p.InsertUplink(2, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no parent address: %v, want ErrInvalid", err)
	}
	var n int
	p.Uplinks(func(id uint32, got switchjob.Uplink) bool { n++; return got == u && id == 1 })
	if n != 1 {
		t.Fatalf("Uplinks listed %d entries, want 1", n)
	}
	if err := p.DeleteUplink(1); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteUplink(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

// TestHierarchParentFollowsWorkers: with a parent set, each job's workers
// entries make its uplink, at the same partition, and the last entry's
// removal takes it away.
func TestHierarchParentFollowsWorkers(t *testing.T) {
	p := newPipe(t, 16, 64, 32)
	p.SetParent(parentAddr)
	setupJob(t, p, 7, 0, 2, 1, 4, 8)
	var got []switchjob.Uplink
	p.Uplinks(func(id uint32, u switchjob.Uplink) bool { got = append(got, u); return true })
	want := switchjob.Uplink{Parent: parentAddr, ParentBase: 4, PoolBase: 4, PoolSize: 8, MulticastGroup: 1}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("uplinks %+v, want [%+v]", got, want)
	}
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 1, PacketID: 1, Slot: 4, Elements: 1}
	p.Process(addr(0), mkpkt(t, h, []int32{1}), &out)
	p.Process(addr(1), mkpkt(t, h, []int32{2}), &out)
	if len(out.Dests) != 1 || out.Dests[0] != parentAddr {
		t.Fatalf("completion went to %v, want the parent", out.Dests)
	}
	if err := p.DeleteWorker(WorkerKey{addr(0)}); err != nil {
		t.Fatal(err)
	}
	n := 0
	p.Uplinks(func(uint32, switchjob.Uplink) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d uplinks after one of two workers left, want 1", n)
	}
	if err := p.DeleteWorker(WorkerKey{addr(1)}); err != nil {
		t.Fatal(err)
	}
	n = 0
	p.Uplinks(func(uint32, switchjob.Uplink) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d uplinks after the job's workers left, want 0", n)
	}
}
