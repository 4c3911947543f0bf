package engine

import (
	"bytes"
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/wire"
)

// TestTaggedLane: a lane with a key tags every packet for its rank and
// lane, and takes only results carrying the switch's tag for the lane.
func TestTaggedLane(t *testing.T) {
	key := bytes.Repeat([]byte{7}, wire.KeyLen)
	l, err := NewLane(Config{Rank: 2, NumWorkers: 3, Format: wire.FormatExtended, Elements: 4, Window: 1, Key: key, Lane: 1, Timeout: time.Hour, GiveUp: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sw, _ := wire.NewTagger(key)
	data := []int32{1, 2, 3, 4}
	if err := l.Start(Op{DType: dtype.Int32, Data: dtype.Bytes(data), Seq: 5}, 0); err != nil {
		t.Fatal(err)
	}
	pkt, ok := l.AppendPacket(make([]byte, 0, wire.MaxPacket))
	if !ok {
		t.Fatal("no packet")
	}
	h, _, err := wire.Parse(pkt)
	if err != nil || !h.Tagged {
		t.Fatalf("packet %+v, %v: want tagged", h, err)
	}
	if !sw.VerifyRequest(pkt, 2, 1) {
		t.Fatal("the packet's tag does not verify for rank 2, lane 1")
	}
	if sw.VerifyRequest(pkt, 0, 1) {
		t.Fatal("the packet's tag verifies for rank 0")
	}
	// The switch's answer: the same header and the sums, tagged for lane 1.
	result := func(tg *wire.Tagger, lane uint8, vals []int32) []byte {
		rh := h
		rh.Tagged = tg != nil
		b, _ := rh.Append(nil)
		b = wire.AppendPayload(b, vals)
		if tg != nil {
			b = tg.SealResult(b, lane)
		}
		return b
	}
	other, _ := wire.NewTagger(bytes.Repeat([]byte{8}, wire.KeyLen))
	for name, forged := range map[string][]byte{
		"untagged":   result(nil, 1, []int32{9, 9, 9, 9}),
		"other key":  result(other, 1, []int32{9, 9, 9, 9}),
		"other lane": result(sw, 0, []int32{9, 9, 9, 9}),
		"request":    pkt,
	} {
		l.Receive(forged, 0)
		if l.Done() {
			t.Fatalf("%s: the lane took a forged result", name)
		}
	}
	if got := l.Stats().BadTags; got != 4 {
		t.Fatalf("BadTags = %d, want 4", got)
	}
	l.Receive(result(sw, 1, []int32{10, 20, 30, 40}), 0)
	if !l.Done() || l.Err() != nil {
		t.Fatalf("genuine result: done %v, err %v", l.Done(), l.Err())
	}
	if data[0] != 10 || data[3] != 40 {
		t.Fatalf("sums %v, want the genuine result's", data)
	}
}

func TestTaggedLaneNeedsExtended(t *testing.T) {
	_, err := NewLane(Config{NumWorkers: 1, Format: wire.FormatCompat, Elements: 64, Window: 1, Key: make([]byte, wire.KeyLen)})
	if err == nil {
		t.Fatal("a key with the compatible format was accepted")
	}
}
