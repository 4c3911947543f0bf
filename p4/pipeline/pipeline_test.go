package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

func addr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), 5000)
}

func replyAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), 6000)
}

// setupJob registers n workers of job (one lane) on pool [base, base+size),
// with addresses addr(first..first+n-1).
func setupJob(t testing.TB, p *Pipeline, job uint32, first, n int, mgid uint16, base, size uint32) {
	t.Helper()
	var reps []switchjob.Replica
	for r := 0; r < n; r++ {
		w := switchjob.Worker{JobID: job, Rank: uint16(r), NumWorkers: uint16(n), MulticastGroup: mgid, PoolBase: base, PoolSize: size}
		if err := p.InsertWorker(WorkerKey{addr(first + r)}, w); err != nil {
			t.Fatal(err)
		}
		if err := p.InsertReply(ReplyKey{JobID: job, Rank: uint16(r)}, Reply{Addr: replyAddr(first + r)}); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, switchjob.Replica{EgressPort: uint32(r), Instance: uint16(r)})
	}
	if err := p.InsertMulticastGroup(mgid, reps); err != nil {
		t.Fatal(err)
	}
}

func mkpkt(t testing.TB, h wire.Header, vals []int32) []byte {
	t.Helper()
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < h.Elements; i++ {
		var v int32
		if i < len(vals) {
			v = vals[i]
		}
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func decode(t *testing.T, b []byte) (wire.Header, []int32) {
	t.Helper()
	h, pl, err := wire.Parse(b)
	if err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	v := make([]int32, h.Elements)
	for i := range v {
		v[i] = int32(binary.BigEndian.Uint32(pl[4*i:]))
	}
	return h, v
}

func newPipe(t testing.TB, slots, elems, workers int) *Pipeline {
	t.Helper()
	p, err := New(Config{Slots: slots, MaxElements: elems, MaxWorkers: workers})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAggregateMulticast(t *testing.T) {
	p := newPipe(t, 16, 64, 32)
	setupJob(t, p, 7, 0, 3, 1, 4, 8)
	var out Output
	h := wire.Header{Format: wire.FormatCompat, Seq: 9, PacketID: 42, Set: 1, Slot: 5, Elements: 32}
	exps := []int8{-3, 4, 1}
	for r := 0; r < 3; r++ {
		h.Exp0 = exps[r]
		vals := make([]int32, 32)
		for i := range vals {
			vals[i] = int32(i*10 + r)
		}
		vals[0] = 1<<31 - 1 // wraps on the second add
		p.Process(addr(r), mkpkt(t, h, vals), &out)
		if r < 2 {
			if len(out.Dests) != 0 || out.Reason != switchjob.StatAbsorbed {
				t.Fatalf("rank %d: dests %v reason %v, want absorbed", r, out.Dests, out.Reason)
			}
			continue
		}
		if len(out.Dests) != 3 {
			t.Fatalf("multicast to %v, want 3 ranks", out.Dests)
		}
		for i, d := range out.Dests {
			if d != replyAddr(i) {
				t.Fatalf("dest %d = %v, want %v", i, d, replyAddr(i))
			}
		}
		rh, rv := decode(t, out.Packet)
		want := h
		want.Exp0 = 4
		want.Result = true
		if rh != want {
			t.Fatalf("reply header %+v, want %+v", rh, want)
		}
		if rv[0] != 2147483645 { // 3*(2^31-1) mod 2^32, as int32
			t.Fatalf("wrapping sum = %d", rv[0])
		}
		for i := 1; i < 32; i++ {
			if rv[i] != int32(30*i+3) {
				t.Fatalf("sum[%d] = %d, want %d", i, rv[i], 30*i+3)
			}
		}
	}
	c := p.Counters()
	if c[switchjob.StatReceived] != 3 || c[switchjob.StatAggregated] != 3 || c[switchjob.StatMulticast] != 1 || c[switchjob.StatReplicas] != 3 || c[switchjob.StatAbsorbed] != 2 {
		t.Fatalf("counters %v", c)
	}
}

func TestRetransmissions(t *testing.T) {
	p := newPipe(t, 8, 32, 4)
	setupJob(t, p, 1, 0, 2, 3, 0, 8)
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 1 << 20, PacketID: 3, Slot: 2, Exp0: 1, Elements: 3}
	pkt := mkpkt(t, h, []int32{1, 2, 3})
	p.Process(addr(0), pkt, &out)
	p.Process(addr(0), pkt, &out) // retransmission before completion
	if out.Reason != switchjob.StatDropIncompleteRetransmit || len(out.Dests) != 0 {
		t.Fatalf("early retransmission: %v %v", out.Reason, out.Dests)
	}
	p.Process(addr(1), pkt, &out)
	if len(out.Dests) != 2 {
		t.Fatalf("completion sent to %v", out.Dests)
	}
	// Rank 1 lost the multicast and retransmits: only it gets the result.
	p.Process(addr(1), pkt, &out)
	if len(out.Dests) != 1 || out.Dests[0] != replyAddr(1) {
		t.Fatalf("retransmission reply to %v", out.Dests)
	}
	rh, rv := decode(t, out.Packet)
	if rh.Format != wire.FormatExtended || rh.Seq != 1<<20 || rv[2] != 6 {
		t.Fatalf("reply %+v %v", rh, rv)
	}
	// Rank 0 moves on to the other set: a late duplicate of its old packet
	// must not touch the completed use (rank 1 may still need it).
	next := h
	next.Set, next.PacketID = 1, 4
	p.Process(addr(0), mkpkt(t, next, []int32{5, 5, 5}), &out)
	p.Process(addr(0), pkt, &out)
	if out.Reason != switchjob.StatDropStale {
		t.Fatalf("late duplicate after moving on: %v", out.Reason)
	}
	p.Process(addr(1), pkt, &out)
	if _, rv := decode(t, out.Packet); len(out.Dests) != 1 || rv[0] != 2 {
		t.Fatalf("result changed after stale duplicate: %v %v", out.Dests, rv)
	}
	// Rank 1 moves on too: set 0 of slot 2 is now idle, and the next use
	// overwrites it without any reset.
	p.Process(addr(1), mkpkt(t, next, []int32{1, 1, 1}), &out)
	if _, rv := decode(t, out.Packet); len(out.Dests) != 2 || rv[0] != 6 {
		t.Fatalf("set 1: %v %v", out.Dests, rv)
	}
	third := h
	third.PacketID = 5
	p.Process(addr(1), mkpkt(t, third, []int32{100, 0, 0}), &out)
	p.Process(addr(0), mkpkt(t, third, []int32{1, 0, 0}), &out)
	if _, rv := decode(t, out.Packet); len(out.Dests) != 2 || rv[0] != 101 {
		t.Fatalf("reused set 0: %v %v", out.Dests, rv)
	}
	checkInvariants(t, p)
}

func TestDrops(t *testing.T) {
	p := newPipe(t, 16, 64, 4)
	setupJob(t, p, 1, 0, 2, 1, 0, 4)
	setupJob(t, p, 2, 10, 2, 2, 4, 4)
	var out Output
	good := wire.Header{Format: wire.FormatCompat, Slot: 1, Elements: 32}
	for name, c := range map[string]struct {
		src  netip.AddrPort
		pkt  []byte
		want switchjob.Stat
	}{
		"unknown source":  {addr(99), mkpkt(t, good, nil), switchjob.StatDropNotWorker},
		"garbage":         {addr(0), []byte{0xff, 1, 2}, switchjob.StatDropMalformed},
		"truncated":       {addr(0), mkpkt(t, good, nil)[:20], switchjob.StatDropMalformed},
		"too many values": {addr(0), mkpkt(t, wire.Header{Format: wire.FormatExtended, Slot: 1, Elements: 65}, nil), switchjob.StatDropMalformed},
		"other partition": {addr(0), mkpkt(t, wire.Header{Format: wire.FormatCompat, Slot: 5, Elements: 32}, nil), switchjob.StatDropOutOfPartition},
		"beyond switch":   {addr(10), mkpkt(t, wire.Header{Format: wire.FormatCompat, Slot: 9000, Elements: 32}, nil), switchjob.StatDropOutOfPartition},
	} {
		p.Process(c.src, c.pkt, &out)
		if out.Reason != c.want || len(out.Dests) != 0 {
			t.Errorf("%s: drop %v dests %v, want %v", name, out.Reason, out.Dests, c.want)
		}
	}
	// A contribution with another size than the use in progress.
	p.Process(addr(0), mkpkt(t, good, nil), &out)
	bad := good
	bad.Elements = 64
	p.Process(addr(1), mkpkt(t, bad, nil), &out)
	if out.Reason != switchjob.StatDropMismatch {
		t.Fatalf("size mismatch: %v", out.Reason)
	}
	bad = good
	bad.PacketID = 77
	p.Process(addr(1), mkpkt(t, bad, nil), &out)
	if out.Reason != switchjob.StatDropMismatch {
		t.Fatalf("packet id mismatch: %v", out.Reason)
	}
	// An IPv4-mapped source matches the IPv4 entry.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(addr(1).Addr().As16()), addr(1).Port())
	p.Process(mapped, mkpkt(t, good, nil), &out)
	if len(out.Dests) != 2 {
		t.Fatalf("mapped source: %v %v", out.Reason, out.Dests)
	}
	checkInvariants(t, p)
}

func TestManyWorkers(t *testing.T) {
	const n = 70
	p := newPipe(t, 4, 8, 128)
	setupJob(t, p, 1, 0, n, 1, 0, 4)
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Slot: 3, Elements: 2}
	for r := 0; r < n; r++ {
		p.Process(addr(r), mkpkt(t, h, []int32{int32(r), 1}), &out)
		if r == 40 {
			checkInvariants(t, p)
		}
	}
	if len(out.Dests) != n {
		t.Fatalf("multicast to %d ranks", len(out.Dests))
	}
	if _, rv := decode(t, out.Packet); rv[0] != n*(n-1)/2 || rv[1] != n {
		t.Fatalf("sums %v", rv)
	}
	bm, err := p.ReadRegister("SwitchMLIngress.pool_bitmap", 3)
	if err != nil || len(bm) != 2 || bm[0] != -1 || bm[1] != 1<<6-1 {
		t.Fatalf("bitmap %x %v", bm, err)
	}
}

func TestMissingReplyAndGroup(t *testing.T) {
	p := newPipe(t, 4, 32, 4)
	setupJob(t, p, 1, 0, 2, 1, 0, 4)
	if err := p.DeleteReply(ReplyKey{JobID: 1, Rank: 1}); err != nil {
		t.Fatal(err)
	}
	var out Output
	h := wire.Header{Format: wire.FormatCompat, Elements: 32}
	p.Process(addr(0), mkpkt(t, h, nil), &out)
	p.Process(addr(1), mkpkt(t, h, nil), &out)
	if len(out.Dests) != 1 || p.Counter(switchjob.StatDropNoReply) != 1 {
		t.Fatalf("dests %v no-reply %d", out.Dests, p.Counter(switchjob.StatDropNoReply))
	}
	if err := p.DeleteMulticastGroup(1); err != nil {
		t.Fatal(err)
	}
	h.Slot = 1
	p.Process(addr(0), mkpkt(t, h, nil), &out)
	p.Process(addr(1), mkpkt(t, h, nil), &out)
	if out.Reason != switchjob.StatDropNoGroup {
		t.Fatalf("drop %v", out.Reason)
	}
	checkInvariants(t, p)
}

func TestControlPlane(t *testing.T) {
	if _, err := New(Config{Slots: 0, MaxElements: 64, MaxWorkers: 4}); err == nil {
		t.Fatal("zero slots accepted")
	}
	if _, err := New(Config{Slots: 8, MaxElements: 4096, MaxWorkers: 4}); err == nil {
		t.Fatal("4096 elements accepted")
	}
	p := newPipe(t, 8, 4, 4)
	checkWorkersTable(t, p)
	checkMulticastTable(t, p)
	// Registers: shape, bounds, round trip.
	checkRegisterAccess(t, p)
	if err := p.ResetPool(0, 8); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.ReadRegister("pool_bitmap", 1); v[0] != 0 {
		t.Fatal("ResetPool left a bitmap")
	}
	if p.ResetPool(4, 5) == nil {
		t.Fatal("ResetPool beyond the pool accepted")
	}
	if err := p.SetCounter(switchjob.StatReceived, 5); err != nil || p.Counter(switchjob.StatReceived) != 5 {
		t.Fatal("SetCounter")
	}
}

// checkWorkersTable checks the workers table of a pipeline of 8 slots and
// 4 workers: invalid entries refused, insert, modify, list and delete.
func checkWorkersTable(t *testing.T, p *Pipeline) {
	t.Helper()
	k := WorkerKey{addr(1)}
	for _, w := range []switchjob.Worker{
		{NumWorkers: 0, PoolSize: 1},
		{NumWorkers: 5, PoolSize: 1},
		{Rank: 2, NumWorkers: 2, PoolSize: 1},
		{NumWorkers: 2, PoolBase: 4, PoolSize: 5},
		{NumWorkers: 2, PoolSize: 0},
	} {
		if err := p.InsertWorker(k, w); !errors.Is(err, ErrInvalid) {
			t.Errorf("InsertWorker(%+v) = %v", w, err)
		}
	}
	w := switchjob.Worker{NumWorkers: 2, PoolSize: 8}
	if err := p.InsertWorker(k, w); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertWorker(k, w); !errors.Is(err, ErrExists) {
		t.Fatal(err)
	}
	if err := p.ModifyWorker(WorkerKey{addr(2)}, w); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	w.Rank = 1
	if err := p.ModifyWorker(k, w); err != nil {
		t.Fatal(err)
	}
	var got []switchjob.Worker
	p.Workers(func(_ WorkerKey, w switchjob.Worker) bool { got = append(got, w); return true })
	if len(got) != 1 || got[0].Rank != 1 {
		t.Fatalf("workers %v", got)
	}
	if err := p.DeleteWorker(k); err != nil || p.DeleteWorker(k) == nil {
		t.Fatal("delete")
	}
}

// checkMulticastTable checks a multicast group's insert, duplicate insert,
// modify and listing.
func checkMulticastTable(t *testing.T, p *Pipeline) {
	t.Helper()
	if err := p.InsertMulticastGroup(3, []switchjob.Replica{{EgressPort: 1, Instance: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertMulticastGroup(3, nil); !errors.Is(err, ErrExists) {
		t.Fatal(err)
	}
	if err := p.ModifyMulticastGroup(3, []switchjob.Replica{{EgressPort: 1, Instance: 0}, {EgressPort: 2, Instance: 1}}); err != nil {
		t.Fatal(err)
	}
	p.MulticastGroups(func(id uint16, r []switchjob.Replica) bool {
		if id != 3 || len(r) != 2 {
			t.Fatalf("group %d %v", id, r)
		}
		return true
	})
}

// checkRegisterAccess checks the registers of a pipeline of 8 slots, 4
// elements and 4 workers: their size, out-of-range indices, unknown names
// and values, and a write read back from each.
func checkRegisterAccess(t *testing.T, p *Pipeline) {
	t.Helper()
	if n, _ := p.RegisterSize(RegPoolValues); n != 2*8*4 {
		t.Fatalf("pool_values size %d", n)
	}
	if _, err := p.ReadRegister("pool_count", 16); err == nil {
		t.Fatal("index 16 of 16 accepted")
	}
	if _, err := p.ReadRegister("nope", 0); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := p.WriteRegister("pool_bitmap", 1, []int64{1 << 5}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bit of rank 5 with MaxWorkers 4: %v", err)
	}
	for _, c := range []struct {
		name string
		idx  int
		v    int64
	}{{"pool_exponent", 3, -7}, {"pool_count", 2, 3}, {"pool_values", 17, -9}, {"pool_bitmap", 1, 5}} {
		if err := p.WriteRegister(c.name, c.idx, []int64{c.v}); err != nil {
			t.Fatal(err)
		}
		if v, err := p.ReadRegister(c.name, c.idx); err != nil || v[0] != c.v {
			t.Fatalf("%s[%d] = %v %v", c.name, c.idx, v, err)
		}
	}
}

func TestProcessNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	p := newPipe(t, 64, 256, 8)
	setupJob(t, p, 1, 0, 8, 1, 0, 64)
	pkts := benchPackets(t, 8, 64, 64, wire.FormatCompat)
	out := Output{Packet: make([]byte, 0, wire.MaxPacket), Dests: make([]netip.AddrPort, 0, 8)}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		bp := &pkts[i%len(pkts)]
		p.Process(bp.src, bp.b, &out)
		i++
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per Process", allocs)
	}
	if p.Counter(switchjob.StatMulticast) == 0 {
		t.Fatal("no slot completed")
	}
	checkInvariants(t, p)
}

type benchPkt struct {
	src netip.AddrPort
	b   []byte
}

// benchPackets returns the packets of n workers streaming over slots
// slots, in the order they would reach the switch: every worker's packet
// for one slot use, then the next use. Sets alternate per slot and packet
// ids grow, so the sequence can be replayed in a loop forever.
func benchPackets(t testing.TB, n, slots, elems int, f wire.Format) []benchPkt {
	var out []benchPkt
	vals := make([]int32, elems)
	for i := range vals {
		vals[i] = int32(i)
	}
	for use := 0; use < 2*slots; use++ {
		h := wire.Header{Format: f, PacketID: uint32(use), Slot: uint32(use % slots), Set: uint8(use / slots % 2), Elements: elems}
		for r := 0; r < n; r++ {
			out = append(out, benchPkt{addr(r), mkpkt(t, h, vals)})
		}
	}
	return out
}

func BenchmarkProcess(b *testing.B) {
	for _, elems := range []int{64, 256} {
		b.Run(fmt.Sprintf("n=8/elements=%d", elems), func(b *testing.B) {
			p := newPipe(b, 64, 256, 8)
			setupJob(b, p, 1, 0, 8, 1, 0, 64)
			pkts := benchPackets(b, 8, 64, elems, wire.FormatCompat)
			out := Output{Packet: make([]byte, 0, wire.MaxPacket), Dests: make([]netip.AddrPort, 0, 8)}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bp := &pkts[i]
				p.Process(bp.src, bp.b, &out)
				if i++; i == len(pkts) {
					i = 0
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns, "ns/packet")
			b.ReportMetric(float64(elems)*1e9/ns, "elements/s")
		})
	}
}

// checkInvariants verifies properties that must hold after any packet
// sequence: outcome counters add up, bitmaps only hold ranks of the job
// owning the slot, countdowns are below the job size.
func checkInvariants(t testing.TB, p *Pipeline) {
	t.Helper()
	checkCounters(t, p)
	checkRegisters(t, p, jobSizes(p))
}

// checkCounters checks that every packet had exactly one outcome.
func checkCounters(t testing.TB, p *Pipeline) {
	t.Helper()
	c := p.Counters()
	outcomes := c[switchjob.StatDropNotWorker] + c[switchjob.StatDropMalformed] + c[switchjob.StatDropOutOfPartition] + c[switchjob.StatDropMismatch] +
		c[switchjob.StatDropStale] + c[switchjob.StatDropIncompleteRetransmit] + c[switchjob.StatAbsorbed] + c[switchjob.StatMulticast] + c[switchjob.StatRetransmitReply] +
		c[switchjob.StatDropWrongShard] + c[switchjob.StatDropBadTag] + c[switchjob.StatDropResult]
	if c[switchjob.StatReceived] != outcomes {
		t.Fatalf("received %d != sum of outcomes %d (%v)", c[switchjob.StatReceived], outcomes, c)
	}
	if c[switchjob.StatAggregated] != c[switchjob.StatAbsorbed]+c[switchjob.StatMulticast] {
		t.Fatalf("aggregated %d != absorbed %d + multicast %d", c[switchjob.StatAggregated], c[switchjob.StatAbsorbed], c[switchjob.StatMulticast])
	}
}

// jobSizes returns the job size owning each slot, from the workers table.
func jobSizes(p *Pipeline) []int {
	size := make([]int, p.cfg.Slots)
	p.Workers(func(_ WorkerKey, w switchjob.Worker) bool {
		for s := w.PoolBase; s < w.PoolBase+w.PoolSize; s++ {
			size[s] = int(w.NumWorkers)
		}
		return true
	})
	return size
}

// checkRegisters checks bitmaps and countdowns against the job sizes.
func checkRegisters(t testing.TB, p *Pipeline, size []int) {
	t.Helper()
	for idx := 0; idx < 2*p.cfg.Slots; idx++ {
		checkSlot(t, p, size, idx)
	}
}

func checkSlot(t testing.TB, p *Pipeline, size []int, idx int) {
	t.Helper()
	n := size[idx%p.cfg.Slots]
	bm := p.bitmap[idx*p.words : (idx+1)*p.words]
	for r := 0; r < 64*p.words; r++ {
		if bm[r/64]&(1<<(r%64)) != 0 && r >= n {
			t.Fatalf("idx %d: bitmap has rank %d, job size %d", idx, r, n)
		}
	}
	if n > 0 && int(p.count[idx]) >= n || n == 0 && p.count[idx] != 0 {
		t.Fatalf("idx %d: countdown %d, job size %d", idx, p.count[idx], n)
	}
}

// FuzzProcess feeds arbitrary packet sequences from known and unknown
// sources: Process must never panic, replies must parse in the request's
// format and the invariants must hold after every packet.
func FuzzProcess(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 5, 1, 1, 0, 0, 5, 2, 1, 0, 0, 5})
	f.Add([]byte{0x80, 12, 0x11, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2})
	f.Add([]byte{3, 2, 1, 0x81, 9, 4, 2, 1, 0x81, 9, 5})
	f.Add([]byte{0, 0xc1, 0x13, 0x21, 1, 0xc1, 0x13, 0x25, 2, 0xc1, 0x13, 0x40})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := newPipe(t, 8, 8, 70)
		setupJob(t, p, 1, 0, 3, 1, 0, 4)    // 3 workers, slots 0..3
		setupJob(t, p, 2, 100, 66, 2, 4, 4) // 66 workers, slots 4..7
		srcs := []netip.AddrPort{addr(0), addr(1), addr(2), addr(100), addr(165), addr(130), addr(999)}
		size := jobSizes(p)
		var out Output
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			c := data[0]
			data = data[1:]
			return c
		}
		for len(data) > 0 {
			c := next()
			src := srcs[int(c&0x7f)%len(srcs)]
			var pkt []byte
			if c&0x80 != 0 {
				// Raw bytes.
				n := int(next()) % 48
				n = min(n, len(data))
				pkt, data = data[:n], data[n:]
			} else {
				// A well-formed packet with fuzzed fields, to reach deep states.
				a, b2, e := next(), next(), next()
				h := wire.Header{
					Format:   wire.Format(a >> 7),
					Seq:      uint32(a & 3),
					PacketID: uint32(b2 >> 4),
					Slot:     uint32(a>>2) & 7,
					Set:      (a >> 5) & 1,
					Exp0:     int8(e),
					Elements: 32,
					// A quarter of them marked as a switch's result.
					Result: e&0x60 == 0x60,
				}
				if h.Format == wire.FormatExtended {
					h.Elements = int(b2 & 15)
					// Bit 6: a sparse packet, about block e&3 (3: a
					// directory), with a key from e, with or without
					// values.
					if a&0x40 != 0 {
						h.Sparse, h.Block, h.Next = true, uint32(e&3), uint32(e)<<6
						if h.Block == 3 {
							h.Block = wire.DirectoryBlock
						}
						if e&4 != 0 && h.Block != wire.DirectoryBlock {
							h.Elements = 0
						}
					}
				}
				pkt = mkpkt(t, h, []int32{int32(e) << 24, int32(b2)})
			}
			p.Process(src, pkt, &out)
			if len(out.Dests) > 0 {
				rh, _, err := wire.Parse(out.Packet)
				qh, _, _ := wire.Parse(pkt)
				if err != nil || rh.Format != qh.Format || rh.Slot != qh.Slot || rh.Set != qh.Set || rh.PacketID != qh.PacketID || !rh.Result || qh.Result {
					t.Fatalf("reply %+v (%v) to request %+v", rh, err, qh)
				}
			} else if out.Reason == switchjob.StatReceived {
				t.Fatal("no destination and no drop reason")
			}
			checkCounters(t, p)
			// Only the slot this packet could touch can have changed.
			if qh, _, err := wire.Parse(pkt); err == nil && int(qh.Slot) < p.cfg.Slots {
				checkSlot(t, p, size, int(qh.Set)*p.cfg.Slots+int(qh.Slot))
			}
		}
		checkInvariants(t, p)
	})
}

// TestExtendedRejectsDelayedRequest replays an old request after every
// worker moved on: in the extended format it must not start a new use.
func TestExtendedRejectsDelayedRequest(t *testing.T) {
	p := newPipe(t, 4, 8, 4)
	setupJob(t, p, 1, 0, 2, 1, 0, 4)
	var out Output
	use := func(set uint8, seq, id uint32) []byte {
		return mkpkt(t, wire.Header{Format: wire.FormatExtended, Seq: seq, PacketID: id, Set: set, Slot: 1, Elements: 2}, []int32{1, 1})
	}
	old := use(0, 7, 10)
	p.Process(addr(0), old, &out)
	p.Process(addr(1), old, &out)
	for r := 0; r < 2; r++ {
		p.Process(addr(r), use(1, 7, 12), &out)
	}
	// Set 0 is idle now; the delayed copy of the old request arrives.
	p.Process(addr(1), old, &out)
	if out.Reason != switchjob.StatDropStale {
		t.Fatalf("delayed request: %v", out.Reason)
	}
	// The next genuine use (a later op, lower packet id) proceeds.
	for r := 0; r < 2; r++ {
		p.Process(addr(r), use(0, 8, 0), &out)
	}
	if _, rv := decode(t, out.Packet); len(out.Dests) != 2 || rv[0] != 2 {
		t.Fatalf("next use: %v %v", out.Dests, rv)
	}
	// After a pool reset any sequence number starts a use again.
	if err := p.ResetPool(0, 4); err != nil {
		t.Fatal(err)
	}
	p.Process(addr(0), use(1, 1, 0), &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("after reset: %v", out.Reason)
	}
	// The same through the registers, as a controller resets a partition
	// over P4Runtime: zero bitmaps and counts make the slot's next use
	// free to start at any sequence number.
	for r := 0; r < 2; r++ {
		p.Process(addr(r), use(0, 50, 100), &out)
	}
	for _, idx := range []int{1, 4 + 1} { // slot 1, both sets
		if err := p.WriteRegister(RegPoolBitmap, idx, []int64{0}); err != nil {
			t.Fatal(err)
		}
		if err := p.WriteRegister(RegPoolCount, idx, []int64{0}); err != nil {
			t.Fatal(err)
		}
	}
	p.Process(addr(0), use(0, 3, 0), &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("after a register reset, a lower sequence number was refused as %v", out.Reason)
	}
	checkInvariants(t, p)
}

// TestCompatRejectsOvertakenRetransmission: a retransmission overtaken by
// its sender's next packet reaches an idle set; being identical to the last
// use, it must not start a new one.
func TestCompatRejectsOvertakenRetransmission(t *testing.T) {
	p := newPipe(t, 4, 32, 4)
	setupJob(t, p, 1, 0, 2, 1, 0, 4)
	var out Output
	use := func(set uint8, id uint32) []byte {
		return mkpkt(t, wire.Header{Format: wire.FormatCompat, Seq: 3, PacketID: id, Set: set, Slot: 2, Elements: 32}, []int32{1})
	}
	p.Process(addr(0), use(0, 10), &out)
	p.Process(addr(1), use(0, 10), &out)
	p.Process(addr(0), use(1, 12), &out)
	p.Process(addr(1), use(1, 12), &out)
	p.Process(addr(1), use(0, 10), &out)
	if out.Reason != switchjob.StatDropStale {
		t.Fatalf("overtaken retransmission: %v", out.Reason)
	}
	p.Process(addr(0), use(0, 14), &out)
	p.Process(addr(1), use(0, 14), &out)
	if _, rv := decode(t, out.Packet); len(out.Dests) != 2 || rv[0] != 2 {
		t.Fatalf("next use: %v %v", out.Dests, rv)
	}
}

func TestClearRegisters(t *testing.T) {
	p, err := New(Config{Slots: 4, MaxElements: 8, MaxWorkers: 40})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{RegPoolBitmap, RegPoolCount, RegPoolExponent, RegPoolValues}
	size := func(name string) int {
		n, err := p.RegisterSize(name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, name := range names {
		if err := p.WriteRegister(name, size(name)-1, []int64{1}); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		if v, _ := p.ReadRegister(name, size(name)-1); len(v) == 0 || v[0] != 1 {
			t.Fatalf("%s reads %v after writing 1", name, v)
		}
	}
	p.ClearRegisters()
	for _, name := range names {
		for i := 0; i < size(name); i++ {
			v, err := p.ReadRegister(name, i)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range v {
				if w != 0 {
					t.Fatalf("%s[%d] = %v after ClearRegisters", name, i, v)
				}
			}
		}
	}
}

// TestWorkerLookupFollowsTableChanges checks that the remembered workers
// entry of the last sender is not used once the table changed: a deleted
// worker's packets are dropped, and a re-added one counts in its new job.
func TestWorkerLookupFollowsTableChanges(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("shard=%v", sharded), func(t *testing.T) {
			p := newPipe(t, 16, 64, 32)
			process := p.Process
			if sharded {
				process = p.NewShard().Process
			}
			setupJob(t, p, 7, 0, 2, 1, 0, 8)
			var out Output
			h := wire.Header{Format: wire.FormatCompat, Seq: 1, PacketID: 1, Slot: 2, Elements: 32}
			process(addr(0), mkpkt(t, h, nil), &out)
			if out.Reason != switchjob.StatAbsorbed {
				t.Fatalf("first packet: reason %v, want absorbed", out.Reason)
			}
			if err := p.DeleteWorker(WorkerKey{addr(0)}); err != nil {
				t.Fatal(err)
			}
			h.PacketID = 2
			process(addr(0), mkpkt(t, h, nil), &out)
			if out.Reason != switchjob.StatDropNotWorker {
				t.Fatalf("after delete: reason %v, want dropped as not a worker", out.Reason)
			}
			// Back as the only worker of job 9 on slots [8, 16): its
			// packet completes a slot of that partition at once.
			if err := p.InsertWorker(WorkerKey{addr(0)}, switchjob.Worker{JobID: 9, NumWorkers: 1, MulticastGroup: 2, PoolBase: 8, PoolSize: 8}); err != nil {
				t.Fatal(err)
			}
			if err := p.InsertReply(ReplyKey{JobID: 9}, Reply{Addr: replyAddr(0)}); err != nil {
				t.Fatal(err)
			}
			if err := p.InsertMulticastGroup(2, []switchjob.Replica{{EgressPort: 0, Instance: 0}}); err != nil {
				t.Fatal(err)
			}
			h.Slot, h.PacketID = 10, 3
			process(addr(0), mkpkt(t, h, []int32{5}), &out)
			if len(out.Dests) != 1 || out.Dests[0] != replyAddr(0) {
				t.Fatalf("re-added worker: dests %v reason %v, want its result multicast to %v", out.Dests, out.Reason, replyAddr(0))
			}
			if _, v := decode(t, out.Packet); v[0] != 5 {
				t.Fatalf("re-added worker's sum %d, want 5", v[0])
			}
			// Modified to job 7's partition again: slot 10 is no longer its.
			if err := p.ModifyWorker(WorkerKey{addr(0)}, switchjob.Worker{JobID: 7, NumWorkers: 2, MulticastGroup: 1, PoolBase: 0, PoolSize: 8}); err != nil {
				t.Fatal(err)
			}
			h.PacketID = 4
			process(addr(0), mkpkt(t, h, nil), &out)
			if len(out.Dests) != 0 || out.Reason == switchjob.StatAbsorbed {
				t.Fatalf("modified worker sent to a slot outside its partition: dests %v reason %v", out.Dests, out.Reason)
			}
		})
	}
}

// TestFanoutFollowsTableChanges checks that a multicast goes where the
// replies and groups say at the time, not where they said for the last
// result.
func TestFanoutFollowsTableChanges(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("shard=%v", sharded), func(t *testing.T) {
			p := newPipe(t, 16, 64, 32)
			process := p.Process
			counter := p.Counter
			if sharded {
				sh := p.NewShard()
				process = sh.Process
				counter = func(s switchjob.Stat) uint64 { return sh.stats[s] }
			}
			setupJob(t, p, 7, 0, 2, 1, 0, 8)
			var out Output
			slot := uint32(0)
			complete := func() []netip.AddrPort {
				t.Helper()
				h := wire.Header{Format: wire.FormatCompat, Seq: 1, PacketID: slot, Slot: slot, Elements: 32}
				slot++
				process(addr(0), mkpkt(t, h, nil), &out)
				process(addr(1), mkpkt(t, h, nil), &out)
				return append([]netip.AddrPort(nil), out.Dests...)
			}
			moved := netip.MustParseAddrPort("10.9.9.9:7000")
			steps := []struct {
				name    string
				change  func() error
				want    []netip.AddrPort
				missing uint64
			}{
				{"as set up", func() error { return nil }, []netip.AddrPort{replyAddr(0), replyAddr(1)}, 0},
				{"rank 1 moved", func() error { return p.ModifyReply(ReplyKey{JobID: 7, Rank: 1}, Reply{Addr: moved}) }, []netip.AddrPort{replyAddr(0), moved}, 0},
				{"rank 0's reply gone", func() error { return p.DeleteReply(ReplyKey{JobID: 7, Rank: 0}) }, []netip.AddrPort{moved}, 1},
				{"rank 0 back", func() error { return p.InsertReply(ReplyKey{JobID: 7, Rank: 0}, Reply{Addr: replyAddr(5)}) }, []netip.AddrPort{replyAddr(5), moved}, 0},
				{"group of rank 1 only", func() error { return p.ModifyMulticastGroup(1, []switchjob.Replica{{EgressPort: 1, Instance: 1}}) }, []netip.AddrPort{moved}, 0},
			}
			for _, s := range steps {
				if err := s.change(); err != nil {
					t.Fatal(err)
				}
				before := counter(switchjob.StatDropNoReply)
				if got := complete(); !slices.Equal(got, s.want) {
					t.Fatalf("%s: result sent to %v, want %v", s.name, got, s.want)
				}
				if got := counter(switchjob.StatDropNoReply) - before; got != s.missing {
					t.Fatalf("%s: %d replicas without a reply counted, want %d", s.name, got, s.missing)
				}
			}
			if err := p.DeleteMulticastGroup(1); err != nil {
				t.Fatal(err)
			}
			if got := complete(); len(got) != 0 || out.Reason != switchjob.StatDropNoGroup {
				t.Fatalf("group deleted: sent to %v (%v)", got, out.Reason)
			}
		})
	}
}
