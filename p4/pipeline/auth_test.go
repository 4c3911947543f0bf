package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

func jobKeyBytes(seed byte) []byte {
	k := make([]byte, wire.KeyLen)
	for i := range k {
		k[i] = seed ^ byte(i*29)
	}
	return k
}

// sealedPkt is a tagged request of rank (lane 0) under key.
func sealedPkt(t *testing.T, key []byte, rank uint16, h wire.Header, vals []int32) []byte {
	t.Helper()
	tg, err := wire.NewTagger(key)
	if err != nil {
		t.Fatal(err)
	}
	h.Tagged = true
	return tg.SealRequest(mkpkt(t, h, vals), rank, 0)
}

func newAuthPipe(t *testing.T) *Pipeline {
	t.Helper()
	p, err := New(Config{Slots: 16, MaxElements: 64, MaxWorkers: 32, Auth: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBadTagDropped: with a job key, packets with a wrong or missing tag
// (or rank 1's tagged packet sent from rank 0's address) are dropped and
// counted before they touch a register; the sum of the genuine packets is
// exact and the result carries the key's tag.
func TestBadTagDropped(t *testing.T) {
	p := newAuthPipe(t)
	setupJob(t, p, 7, 0, 2, 1, 4, 8)
	key := jobKeyBytes(1)
	if err := p.InsertKey(7, key); err != nil {
		t.Fatal(err)
	}
	h := wire.Header{Format: wire.FormatExtended, Seq: 9, PacketID: 42, Slot: 5, Elements: 4}
	var out Output
	good0 := sealedPkt(t, key, 0, h, []int32{1, 2, 3, 4})
	forged := map[string][]byte{
		"untagged":       mkpkt(t, h, []int32{1000, 1000, 1000, 1000}),
		"random tag":     append(mkpkt(t, wire.Header{Format: h.Format, Seq: h.Seq, PacketID: h.PacketID, Slot: h.Slot, Elements: 4, Tagged: true}, []int32{1000, 0, 0, 0}), bytes.Repeat([]byte{0x5a}, wire.TagLen)...),
		"other key":      sealedPkt(t, jobKeyBytes(2), 0, h, []int32{1000, 0, 0, 0}),
		"rank 1's tag":   sealedPkt(t, key, 1, h, []int32{1000, 0, 0, 0}),
		"payload change": func() []byte { b := bytes.Clone(good0); b[wire.ExtendedLen+3] ^= 1; return b }(),
	}
	for name, pkt := range forged {
		p.Process(addr(0), pkt, &out)
		if len(out.Dests) != 0 || out.Reason != switchjob.StatDropBadTag {
			t.Fatalf("%s: dests %v reason %v, want drop_bad_tag", name, out.Dests, out.Reason)
		}
	}
	if got := p.Counter(switchjob.StatDropBadTag); got != uint64(len(forged)) {
		t.Fatalf("drop_bad_tag = %d, want %d", got, len(forged))
	}
	if p.Counter(switchjob.StatAggregated) != 0 {
		t.Fatal("a forged packet was aggregated")
	}
	bm, _ := p.ReadRegister(RegPoolBitmap, 5)
	if bm[0] != 0 {
		t.Fatalf("bitmap %#x after forged packets, want untouched", bm[0])
	}
	p.Process(addr(0), good0, &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("rank 0's genuine packet: reason %v, want absorbed", out.Reason)
	}
	// A forgery between the genuine contributions changes nothing either.
	p.Process(addr(0), forged["rank 1's tag"], &out)
	p.Process(addr(1), sealedPkt(t, key, 1, h, []int32{10, 20, 30, 40}), &out)
	if len(out.Dests) != 2 {
		t.Fatalf("multicast to %v, want 2 ranks", out.Dests)
	}
	rh, payload, err := wire.Parse(out.Packet)
	if err != nil || !rh.Tagged {
		t.Fatalf("result %+v, %v: want a tagged packet", rh, err)
	}
	tg, _ := wire.NewTagger(key)
	if !tg.VerifyResult(out.Packet, 0) {
		t.Fatal("the result's tag does not verify under the job key")
	}
	vals := make([]int32, rh.Elements)
	wire.ReadPayload(vals, payload)
	if want := []int32{11, 22, 33, 44}; !slicesEqual(vals, want) {
		t.Fatalf("sum %v, want %v", vals, want)
	}
	// Rank 0 lost the result and sends again: the answer is tagged too,
	// and a forged retransmission gets none.
	p.Process(addr(0), forged["rank 1's tag"], &out)
	if len(out.Dests) != 0 || out.Reason != switchjob.StatDropBadTag {
		t.Fatalf("forged retransmission: %d destinations, reason %v", len(out.Dests), out.Reason)
	}
	p.Process(addr(0), good0, &out)
	if len(out.Dests) != 1 || out.Dests[0] != replyAddr(0) || !tg.VerifyResult(out.Packet, 0) {
		t.Fatalf("retransmission: answered to %v, tag verifies %v", out.Dests, tg.VerifyResult(out.Packet, 0))
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAuthNeedsKey: on a switch that checks tags, a job without a key gets
// nothing through; a switch that does not check tags refuses keys and
// drops tagged packets it cannot check.
func TestAuthNeedsKey(t *testing.T) {
	p := newAuthPipe(t)
	setupJob(t, p, 7, 0, 1, 1, 4, 8)
	h := wire.Header{Format: wire.FormatExtended, Seq: 1, Slot: 5, Elements: 4}
	var out Output
	p.Process(addr(0), mkpkt(t, h, nil), &out)
	if out.Reason != switchjob.StatDropBadTag {
		t.Fatalf("job without a key: reason %v, want drop_bad_tag", out.Reason)
	}
	if err := p.InsertKey(7, make([]byte, 16)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("16-byte key: %v, want ErrInvalid", err)
	}
	if err := p.InsertKey(7, jobKeyBytes(1)); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertKey(7, jobKeyBytes(1)); !errors.Is(err, ErrExists) {
		t.Fatalf("second key: %v, want ErrExists", err)
	}
	p.Process(addr(0), sealedPkt(t, jobKeyBytes(1), 0, h, nil), &out)
	if len(out.Dests) != 1 {
		t.Fatalf("keyed one-rank job: reason %v, want a result", out.Reason)
	}
	if err := p.DeleteKey(7); err != nil {
		t.Fatal(err)
	}
	h.PacketID++
	p.Process(addr(0), sealedPkt(t, jobKeyBytes(1), 0, h, nil), &out)
	if out.Reason != switchjob.StatDropBadTag {
		t.Fatalf("after the key went: reason %v, want drop_bad_tag", out.Reason)
	}

	plain := newPipe(t, 16, 64, 32)
	setupJob(t, plain, 7, 0, 1, 1, 4, 8)
	if err := plain.InsertKey(7, jobKeyBytes(1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("key on a switch without Auth: %v, want ErrInvalid", err)
	}
	plain.Process(addr(0), sealedPkt(t, jobKeyBytes(1), 0, h, nil), &out)
	if out.Reason != switchjob.StatDropBadTag {
		t.Fatalf("tagged packet on a switch without Auth: reason %v, want drop_bad_tag", out.Reason)
	}
	plain.Process(addr(0), mkpkt(t, h, nil), &out)
	if len(out.Dests) != 1 {
		t.Fatalf("untagged packet on a switch without Auth: reason %v, want a result", out.Reason)
	}
}

// TestAuthShards: every shard checks with its own Tagger, also a shard made
// after the key came.
func TestAuthShards(t *testing.T) {
	p := newAuthPipe(t)
	setupJob(t, p, 7, 0, 1, 1, 0, 16)
	key := jobKeyBytes(3)
	a := p.NewShard()
	if err := p.InsertKey(7, key); err != nil {
		t.Fatal(err)
	}
	b := p.NewShard()
	var out Output
	for i, sh := range []*Shard{a, b} {
		h := wire.Header{Format: wire.FormatExtended, Seq: 1, Slot: uint32(i), Elements: 4}
		sh.Process(addr(0), sealedPkt(t, key, 0, h, nil), &out)
		if len(out.Dests) != 1 {
			t.Fatalf("shard %d: reason %v, want a result", i+1, out.Reason)
		}
		sh.Process(addr(0), mkpkt(t, h, nil), &out)
		if out.Reason != switchjob.StatDropBadTag {
			t.Fatalf("shard %d, untagged: reason %v, want drop_bad_tag", i+1, out.Reason)
		}
	}
}

// FuzzProcessAuth feeds sealed and forged packets to a switch that checks
// tags: a packet not sealed with the job's key never changes a register,
// and every result carries the key's tag.
func FuzzProcessAuth(f *testing.F) {
	f.Add([]byte{0x01, 5, 7, 0x02, 5, 7, 0x80, 3, 1, 2, 3})
	f.Add([]byte{0x41, 5, 7, 0x01, 5, 7, 0x42, 5, 7, 0x02, 5, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := newAuthPipe(t)
		setupJob(t, p, 1, 0, 2, 1, 0, 4)
		key := jobKeyBytes(9)
		if err := p.InsertKey(1, key); err != nil {
			t.Fatal(err)
		}
		tg, _ := wire.NewTagger(key)
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			c := data[0]
			data = data[1:]
			return c
		}
		var out Output
		for len(data) > 0 {
			c := next()
			rank := uint16(c & 1)
			var pkt []byte
			genuine := false
			if c&0x80 != 0 {
				n := min(int(next())%64, len(data))
				pkt, data = data[:n], data[n:]
			} else {
				a, b := next(), next()
				h := wire.Header{Format: wire.FormatExtended, Seq: uint32(a & 3), PacketID: uint32(b >> 4),
					Slot: uint32(a>>2) & 3, Set: (a >> 5) & 1, Elements: int(b & 7), Tagged: true}
				pkt = mkpkt(t, h, []int32{int32(a), int32(b)})
				switch {
				case c&0x40 != 0: // forged: rank 1's tag from rank 0's address, or the reverse
					pkt = tg.SealRequest(pkt, 1-rank, 0)
				case c&0x20 != 0: // forged: a tag of zeros
					pkt = append(pkt, make([]byte, wire.TagLen)...)
				default:
					pkt = tg.SealRequest(pkt, rank, 0)
					genuine = true
				}
			}
			before := slicesClone(p)
			p.Process(addr(int(rank)), pkt, &out)
			if !genuine {
				if out.Reason != switchjob.StatDropBadTag && out.Reason != switchjob.StatDropMalformed || len(out.Dests) != 0 {
					t.Fatalf("forged packet: reason %v, %d destinations", out.Reason, len(out.Dests))
				}
				if !registersEqual(before, p) {
					t.Fatal("a forged packet changed the registers")
				}
			}
			if len(out.Dests) > 0 && !tg.VerifyResult(out.Packet, 0) {
				t.Fatal("a result without the key's tag")
			}
		}
	})
}

type regs struct {
	bitmap []uint64
	count  []uint16
	values []int32
	exp    []int8
}

func slicesClone(p *Pipeline) regs {
	return regs{append([]uint64(nil), p.bitmap...), append([]uint16(nil), p.count...), append([]int32(nil), p.values...), append([]int8(nil), p.exponent...)}
}

func registersEqual(r regs, p *Pipeline) bool {
	return slices.Equal(r.bitmap, p.bitmap) && slices.Equal(r.count, p.count) && slices.Equal(r.values, p.values) && slices.Equal(r.exp, p.exponent)
}

// BenchmarkProcessAuth sets the switch's per-packet cost with tags beside
// the same packets without: every request's tag checked, every result
// tagged (one in n packets completes a slot). The pool is reset when the
// packets come round again, so every packet is aggregated.
func BenchmarkProcessAuth(b *testing.B) {
	const n, slots = 8, 64
	for _, elems := range []int{256, 2048} {
		for _, auth := range []bool{false, true} {
			b.Run(fmt.Sprintf("n=%d/elements=%d/auth=%v", n, elems, auth), func(b *testing.B) {
				p, err := New(Config{Slots: slots, MaxElements: elems, MaxWorkers: n, Auth: auth})
				if err != nil {
					b.Fatal(err)
				}
				setupJob(b, p, 1, 0, n, 1, 0, slots)
				key := jobKeyBytes(1)
				var tg *wire.Tagger
				if auth {
					if err := p.InsertKey(1, key); err != nil {
						b.Fatal(err)
					}
					tg, _ = wire.NewTagger(key)
				}
				vals := make([]int32, elems)
				for i := range vals {
					vals[i] = int32(i)
				}
				var pkts []benchPkt
				for use := 0; use < 2*slots; use++ {
					h := wire.Header{Format: wire.FormatExtended, PacketID: uint32(use), Slot: uint32(use % slots), Set: uint8(use / slots % 2), Elements: elems, Tagged: auth}
					for r := 0; r < n; r++ {
						pkt := mkpkt(b, h, vals)
						if auth {
							pkt = tg.SealRequest(pkt, uint16(r), 0)
						}
						pkts = append(pkts, benchPkt{addr(r), pkt})
					}
				}
				out := Output{Packet: make([]byte, 0, wire.MaxPacket), Dests: make([]netip.AddrPort, 0, n)}
				b.SetBytes(int64(len(pkts[0].b)))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					bp := &pkts[i]
					p.Process(bp.src, bp.b, &out)
					if i++; i == len(pkts) {
						i = 0
						_ = p.ResetPool(0, slots)
					}
				}
				if p.Counter(switchjob.StatDropBadTag) != 0 || p.Counter(switchjob.StatDropStale) != 0 {
					b.Fatalf("packets dropped: %v", p.Counters())
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
			})
		}
	}
}
