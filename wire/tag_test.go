package wire

import (
	"bytes"
	"fmt"
	"testing"
)

func testKey(seed byte) []byte {
	k := make([]byte, KeyLen)
	for i := range k {
		k[i] = seed + byte(i)
	}
	return k
}

func newTagger(t testing.TB, key []byte) *Tagger {
	t.Helper()
	tg, err := NewTagger(key)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// sealed returns a tagged request of elements values from rank's lane.
func sealed(t testing.TB, tg *Tagger, elements int, rank uint16, lane uint8) []byte {
	t.Helper()
	h := Header{Format: FormatExtended, Seq: 9, PacketID: 77, Slot: 5, Set: 1, Exp0: -3, Elements: elements, Tagged: true}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4*elements; i++ {
		b = append(b, byte(i*13+1))
	}
	return tg.SealRequest(b, rank, lane)
}

func TestTagRoundTrip(t *testing.T) {
	tg := newTagger(t, testKey(1))
	for _, k := range []int{0, 1, 64, 2048} {
		pkt := sealed(t, tg, k, 3, 2)
		h, payload, err := Parse(pkt)
		if err != nil {
			t.Fatalf("%d elements: Parse: %v", k, err)
		}
		if !h.Tagged || len(payload) != 4*k || len(pkt) != h.PacketLen() {
			t.Fatalf("%d elements: parsed %+v, payload %d bytes, packet %d", k, h, len(payload), len(pkt))
		}
		if !tg.VerifyRequest(pkt, 3, 2) {
			t.Fatalf("%d elements: the sender's own tag does not verify", k)
		}
		// Another Tagger with the same key (the switch's) agrees.
		if !newTagger(t, testKey(1)).VerifyRequest(pkt, 3, 2) {
			t.Fatalf("%d elements: a second Tagger with the key rejects the tag", k)
		}
	}
	res := tg.SealResult(sealed(t, tg, 4, 0, 0)[:ExtendedLen+16], 1)
	if !tg.VerifyResult(res, 1) {
		t.Fatal("result tag does not verify")
	}
}

// TestTagBindings: the tag fails under another key, rank, lane or direction.
func TestTagBindings(t *testing.T) {
	tg := newTagger(t, testKey(1))
	pkt := sealed(t, tg, 64, 3, 2)
	for name, ok := range map[string]bool{
		"other key":        newTagger(t, testKey(2)).VerifyRequest(pkt, 3, 2),
		"other rank":       tg.VerifyRequest(pkt, 0, 2),
		"other lane":       tg.VerifyRequest(pkt, 3, 0),
		"as a result":      tg.VerifyResult(pkt, 2),
		"shorter than tag": tg.VerifyRequest(pkt[:TagLen-1], 3, 2),
		"tag cut off":      tg.VerifyRequest(pkt[:len(pkt)-TagLen], 3, 2),
	} {
		if ok {
			t.Errorf("%s: tag accepted", name)
		}
	}
	res := tg.SealResult(pkt[:len(pkt)-TagLen], 2)
	if tg.VerifyRequest(res, AllRanks, 2) {
		t.Error("a result passes as a request")
	}
}

// TestTagFlippedBit flips every bit of a tagged packet in turn (header,
// payload and tag): none of them verifies.
func TestTagFlippedBit(t *testing.T) {
	tg := newTagger(t, testKey(7))
	pkt := sealed(t, tg, 32, 1, 0)
	for i := range 8 * len(pkt) {
		c := bytes.Clone(pkt)
		c[i/8] ^= 1 << (i % 8)
		if tg.VerifyRequest(c, 1, 0) {
			t.Fatalf("bit %d of byte %d flipped: tag still verifies", i%8, i/8)
		}
	}
}

func TestTaggerKeyLength(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := NewTagger(make([]byte, n)); err != ErrKeyLen {
			t.Errorf("%d-byte key: err = %v, want ErrKeyLen", n, err)
		}
	}
}

func TestTagNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	tg := newTagger(t, testKey(1))
	pkt := sealed(t, tg, 256, 1, 0)
	buf := make([]byte, 0, MaxPacket)
	body := pkt[:len(pkt)-TagLen]
	allocs := testing.AllocsPerRun(100, func() {
		b := tg.SealRequest(append(buf[:0], body...), 1, 0)
		if !tg.VerifyRequest(b, 1, 0) {
			panic("tag does not verify")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per seal and verify", allocs)
	}
}

// FuzzTag: any packet sealed verifies, and changing any byte of it (or the
// rank) makes it fail.
func FuzzTag(f *testing.F) {
	f.Add([]byte{0x21, 1, 2, 3}, uint16(0), uint8(0), 0, byte(1))
	f.Add(make([]byte, 1024), uint16(5), uint8(3), 100, byte(0x80))
	f.Fuzz(func(t *testing.T, body []byte, rank uint16, lane uint8, at int, flip byte) {
		tg := newTagger(t, testKey(3))
		pkt := tg.SealRequest(bytes.Clone(body), rank, lane)
		if !tg.VerifyRequest(pkt, rank, lane) {
			t.Fatal("sealed packet does not verify")
		}
		if tg.VerifyRequest(pkt, rank+1, lane) {
			t.Fatal("tag verifies for another rank")
		}
		if flip == 0 || len(pkt) == 0 {
			return
		}
		if at < 0 {
			at = -(at + 1)
		}
		pkt[at%len(pkt)] ^= flip
		if tg.VerifyRequest(pkt, rank, lane) {
			t.Fatalf("byte %d changed by %#x: tag still verifies", at%len(pkt), flip)
		}
	})
}

func benchmarkTag(b *testing.B, elements int, verify bool) {
	tg := newTagger(b, testKey(1))
	pkt := sealed(b, tg, elements, 1, 0)
	body := pkt[:len(pkt)-TagLen]
	buf := make([]byte, 0, MaxPacket)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		if verify {
			if !tg.VerifyRequest(pkt, 1, 0) {
				b.Fatal("tag does not verify")
			}
		} else {
			_ = tg.SealRequest(append(buf[:0], body...), 1, 0)
		}
	}
}

// The per-packet cost of tags, to set beside the cost of building and
// adding a packet (BenchmarkPutPayload, BenchmarkAddPayload).
func BenchmarkSeal256(b *testing.B)    { benchmarkTag(b, 256, false) }
func BenchmarkVerify256(b *testing.B)  { benchmarkTag(b, 256, true) }
func BenchmarkSeal2048(b *testing.B)   { benchmarkTag(b, 2048, false) }
func BenchmarkVerify2048(b *testing.B) { benchmarkTag(b, 2048, true) }

// BenchmarkPacket sets a worker's per-packet work on the wire format with
// tags beside the same without: write the header and payload and read a
// result's, plus, with auth, tag the packet and check the result's tag.
func BenchmarkPacket(b *testing.B) {
	for _, elements := range []int{256, 2048} {
		for _, auth := range []bool{false, true} {
			b.Run(fmt.Sprintf("elements=%d/auth=%v", elements, auth), func(b *testing.B) {
				tg := newTagger(b, testKey(1))
				vals := make([]int32, elements)
				for i := range vals {
					vals[i] = int32(i * 3)
				}
				h := Header{Format: FormatExtended, Seq: 1, Slot: 3, Elements: elements, Tagged: auth}
				res, _ := h.Append(nil)
				res = AppendPayload(res, vals)
				if auth {
					res = tg.SealResult(res, 0)
				}
				buf := make([]byte, 0, MaxPacket)
				sums := make([]int32, elements)
				b.SetBytes(int64(h.PacketLen()))
				b.ReportAllocs()
				for b.Loop() {
					pkt, _ := h.Append(buf[:0])
					pkt = AppendPayload(pkt, vals)
					if auth {
						pkt = tg.SealRequest(pkt, 1, 0)
					}
					_, payload, err := Parse(res)
					if err != nil || auth && !tg.VerifyResult(res, 0) {
						b.Fatal("result rejected")
					}
					ReadPayload(sums, payload)
					buf = pkt[:0]
				}
			})
		}
	}
}
