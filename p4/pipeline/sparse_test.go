package pipeline

import (
	"slices"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

// TestSparseUse: a block some worker lacks is summed from the others,
// the lacking worker's header-only packet counts for it, the result
// carries the smallest Next key, and a header-only retransmission is
// answered with the whole result.
func TestSparseUse(t *testing.T) {
	p := newPipe(t, 16, 64, 32)
	setupJob(t, p, 7, 0, 3, 1, 0, 8)
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 3, PacketID: 11, Slot: 2, Sparse: true, Block: 9}
	// Rank 0 has no values for block 9 and arrives first.
	h0 := h
	h0.Next = wire.NextKey(17, 2)
	p.Process(addr(0), mkpkt(t, h0, nil), &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("rank 0: reason %v, want absorbed", out.Reason)
	}
	h1 := h
	h1.Elements, h1.Next = 4, wire.NextKey(13, -1)
	p.Process(addr(1), mkpkt(t, h1, []int32{1, 2, 3, 4}), &out)
	h2 := h
	h2.Elements, h2.Next = 4, wire.NextKey(13, 5)
	p.Process(addr(2), mkpkt(t, h2, []int32{10, 20, 30, 40}), &out)
	if len(out.Dests) != 3 {
		t.Fatalf("complete use: dests %v, reason %v; want a multicast to 3", out.Dests, out.Reason)
	}
	rh, rv := decode(t, out.Packet)
	if !rh.Sparse || rh.Block != 9 || rh.Next != wire.NextKey(13, 5) || rh.Elements != 4 {
		t.Fatalf("result header %+v: want sparse, block 9, 4 elements, next (13, 5)", rh)
	}
	if !slices.Equal(rv, []int32{11, 22, 33, 44}) {
		t.Fatalf("result %v, want [11 22 33 44]", rv)
	}
	// Rank 0 lost the multicast: its header-only retransmission gets the
	// values.
	p.Process(addr(0), mkpkt(t, h0, nil), &out)
	if len(out.Dests) != 1 || out.Dests[0] != replyAddr(0) {
		t.Fatalf("retransmission: dests %v, reason %v", out.Dests, out.Reason)
	}
	if rh, rv = decode(t, out.Packet); rh.Elements != 4 || !slices.Equal(rv, []int32{11, 22, 33, 44}) || rh.Next != wire.NextKey(13, 5) {
		t.Fatalf("retransmission answered with %+v %v", rh, rv)
	}
}

// TestSparseDirectory: a directory's keys are combined by element-wise
// minimum, not summed.
func TestSparseDirectory(t *testing.T) {
	p := newPipe(t, 16, 64, 32)
	setupJob(t, p, 7, 0, 2, 1, 0, 8)
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 1, PacketID: 5, Slot: 0, Sparse: true, Block: wire.DirectoryBlock, Next: wire.NoNext, Elements: 3}
	a := []uint32{wire.NextKey(0, 1), wire.NoNext, wire.NextKey(5, 0)}
	b := []uint32{wire.NextKey(0, 4), wire.NextKey(7, 0), wire.NoNext}
	p.Process(addr(0), mkpkt(t, h, keys(a)), &out)
	p.Process(addr(1), mkpkt(t, h, keys(b)), &out)
	if len(out.Dests) != 2 {
		t.Fatalf("dests %v, reason %v", out.Dests, out.Reason)
	}
	_, rv := decode(t, out.Packet)
	want := []uint32{wire.NextKey(0, 4), wire.NextKey(7, 0), wire.NextKey(5, 0)}
	if !slices.Equal(keysOf(rv), want) {
		t.Fatalf("directory %x, want %x", keysOf(rv), want)
	}
}

// TestSparseMismatch: contributions that disagree on the block, on
// sparseness or on the element count are not added.
func TestSparseMismatch(t *testing.T) {
	p := newPipe(t, 16, 64, 32)
	setupJob(t, p, 7, 0, 3, 1, 0, 8)
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 3, PacketID: 11, Slot: 2, Sparse: true, Block: 9, Elements: 4, Next: wire.NoNext}
	p.Process(addr(0), mkpkt(t, h, []int32{1, 1, 1, 1}), &out)
	for name, m := range map[string]func(*wire.Header){
		"other block": func(h *wire.Header) { h.Block = 10 },
		"dense":       func(h *wire.Header) { h.Sparse = false },
		"other count": func(h *wire.Header) { h.Elements = 3 },
	} {
		bad := h
		m(&bad)
		p.Process(addr(1), mkpkt(t, bad, []int32{5, 5, 5, 5}), &out)
		if out.Reason != switchjob.StatDropMismatch {
			t.Errorf("%s: reason %v, want %v", name, out.Reason, switchjob.StatDropMismatch)
		}
	}
	for r := 1; r < 3; r++ {
		p.Process(addr(r), mkpkt(t, h, []int32{1, 1, 1, 1}), &out)
	}
	if _, rv := decode(t, out.Packet); !slices.Equal(rv, []int32{3, 3, 3, 3}) {
		t.Fatalf("sum %v after refused contributions, want [3 3 3 3]", rv)
	}
}

func keys(k []uint32) []int32 {
	v := make([]int32, len(k))
	for i, x := range k {
		v[i] = int32(x)
	}
	return v
}

func keysOf(v []int32) []uint32 {
	k := make([]uint32, len(v))
	for i, x := range v {
		k[i] = uint32(x)
	}
	return k
}
