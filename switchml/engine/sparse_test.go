package engine

import (
	"encoding/binary"
	"maps"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/wire"
)

// result builds a switch result for request req with header changes and
// the given payload values.
func sparseResult(t *testing.T, req []byte, change func(*wire.Header), vals []uint32) []byte {
	t.Helper()
	h, _, err := wire.Parse(req)
	if err != nil {
		t.Fatal(err)
	}
	h.Elements = len(vals)
	change(&h)
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vals {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// TestSparseRefusesImpossibleResults: results no switch could have
// computed from this worker's packets (a key above the worker's own, a
// block of another stripe, a chain going backwards, a wrong count) are
// counted as malformed and change nothing; the right ones finish the op.
func TestSparseRefusesImpossibleResults(t *testing.T) {
	l, err := NewLane(Config{NumWorkers: 1, Format: wire.FormatExtended, Elements: 4, Window: 2, Sparse: true})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]int32, 16) // blocks 0..3 of 4 values; 1 and 2 hold values
	x[5], x[9] = 7, 9
	if err := l.Start(Op{Seq: 1, DType: dtype.Int32, Data: dtype.Bytes(x)}, 0); err != nil {
		t.Fatal(err)
	}
	dir, ok := l.AppendPacket(nil)
	h, payload, err := wire.Parse(dir)
	if !ok || err != nil || h.Block != wire.DirectoryBlock || h.Elements != 2 {
		t.Fatalf("first packet %+v, %v: want a directory of 2 slots", h, err)
	}
	keys := []uint32{binary.BigEndian.Uint32(payload), binary.BigEndian.Uint32(payload[4:])}
	if b, _, _ := wire.SplitKey(keys[0]); b != 2 {
		t.Fatalf("slot 0's first block %d, want 2", b)
	}
	if b, _, _ := wire.SplitKey(keys[1]); b != 1 {
		t.Fatalf("slot 1's first block %d, want 1", b)
	}
	same := func(*wire.Header) {}
	bad := map[string][]byte{
		"another stripe":    sparseResult(t, dir, same, []uint32{wire.NextKey(1, 0), keys[1]}),
		"above its own key": sparseResult(t, dir, same, []uint32{keys[0], wire.NoNext}),
		"one slot short":    sparseResult(t, dir, same, []uint32{keys[0]}),
	}
	for name, pkt := range bad {
		before := l.Stats()
		l.Receive(pkt, 0)
		if st := l.Stats(); st.Malformed != before.Malformed+1 || st.Results != before.Results {
			t.Fatalf("%s: stats %+v, want one more malformed and no result", name, st)
		}
	}
	l.Receive(sparseResult(t, dir, same, keys), 0)
	if l.Stats().Results != 1 {
		t.Fatalf("the directory's result was not taken: %+v", l.Stats())
	}
	steps := map[uint32][]byte{}
	for {
		b, ok := l.AppendPacket(nil)
		if !ok {
			break
		}
		h, _, _ := wire.Parse(b)
		steps[h.Block] = b
	}
	if len(steps) != 2 || steps[1] == nil || steps[2] == nil {
		t.Fatalf("steps for blocks %v, want 1 and 2", slices.Sorted(maps.Keys(steps)))
	}
	sum := []uint32{0, 70, 0, 0}
	for name, pkt := range map[string][]byte{
		"backwards":    sparseResult(t, steps[2], func(h *wire.Header) { h.Next = wire.NextKey(0, 0) }, sum),
		"wrong count":  sparseResult(t, steps[2], func(h *wire.Header) { h.Next = wire.NoNext }, sum[:3]),
		"other block":  sparseResult(t, steps[2], func(h *wire.Header) { h.Block, h.Next = 0, wire.NoNext }, sum),
		"past the end": sparseResult(t, steps[2], func(h *wire.Header) { h.Next = wire.NextKey(4, 0) }, sum),
	} {
		before := l.Stats()
		l.Receive(pkt, 0)
		if st := l.Stats(); st.Malformed != before.Malformed+1 || st.Results != before.Results {
			t.Fatalf("%s: stats %+v, want one more malformed and no result", name, st)
		}
	}
	l.Receive(sparseResult(t, steps[2], func(h *wire.Header) { h.Next = wire.NoNext }, sum), 0)
	l.Receive(sparseResult(t, steps[1], func(h *wire.Header) { h.Next = wire.NoNext }, []uint32{0, 5, 0, 0}), 0)
	if !l.Done() || l.Err() != nil {
		t.Fatalf("op not done: done %v, err %v", l.Done(), l.Err())
	}
	want := make([]int32, 16)
	want[5], want[9] = 5, 70
	if !slices.Equal(x, want) {
		t.Fatalf("result %v, want %v", x, want)
	}
}
