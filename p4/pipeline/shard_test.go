package pipeline

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

// TestShardOwnsSlot: the first shard to reach a slot serves it; the same
// slot reaching another shard is dropped without touching its registers,
// until a reset of the slot frees it.
func TestShardOwnsSlot(t *testing.T) {
	p := newPipe(t, 8, 16, 4)
	setupJob(t, p, 1, 0, 2, 1, 0, 8)
	a, b := p.NewShard(), p.NewShard()
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 1, PacketID: 1, Slot: 3, Elements: 4}
	a.Process(addr(0), mkpkt(t, h, []int32{1, 2, 3, 4}), &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("first contribution at shard a: %v, want absorbed", out.Reason)
	}
	b.Process(addr(1), mkpkt(t, h, []int32{10, 20, 30, 40}), &out)
	if out.Reason != switchjob.StatDropWrongShard || len(out.Dests) != 0 {
		t.Fatalf("slot 3 at shard b: %v to %v, want drop_wrong_shard", out.Reason, out.Dests)
	}
	a.Process(addr(1), mkpkt(t, h, []int32{10, 20, 30, 40}), &out)
	if len(out.Dests) != 2 {
		t.Fatalf("second contribution at shard a: %v, want a multicast", out.Reason)
	}
	if _, v := decode(t, out.Packet); v[3] != 44 {
		t.Fatalf("sum %v, want 11 22 33 44", v)
	}
	// Another slot is free for b.
	h2 := h
	h2.Slot = 4
	b.Process(addr(0), mkpkt(t, h2, nil), &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("slot 4 at shard b: %v, want absorbed", out.Reason)
	}
	c := p.Counters()
	if c[switchjob.StatReceived] != 4 || c[switchjob.StatDropWrongShard] != 1 || c[switchjob.StatMulticast] != 1 || c[switchjob.StatAbsorbed] != 2 {
		t.Fatalf("counters summed over shards: %v", c)
	}
	checkInvariants(t, p)
	// A reset (a job starting on the partition) frees the slots.
	if err := p.ResetPool(0, 8); err != nil {
		t.Fatal(err)
	}
	h.Seq, h.PacketID = 2, 2
	b.Process(addr(0), mkpkt(t, h, nil), &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("slot 3 at shard b after a reset: %v, want absorbed", out.Reason)
	}
	// So does zeroing a bitmap over P4Runtime, as the controller's reset does.
	for _, idx := range []int{3, 8 + 3} {
		if err := p.WriteRegister(RegPoolBitmap, idx, []int64{0}); err != nil {
			t.Fatal(err)
		}
	}
	h.Seq, h.PacketID = 3, 3
	a.Process(addr(0), mkpkt(t, h, nil), &out)
	if out.Reason != switchjob.StatAbsorbed {
		t.Fatalf("slot 3 at shard a after a register reset: %v, want absorbed", out.Reason)
	}
	// Counter writes see one switch: the sum takes the value written.
	if err := p.SetCounter(switchjob.StatReceived, 100); err != nil {
		t.Fatal(err)
	}
	if got := p.Counter(switchjob.StatReceived); got != 100 {
		t.Fatalf("received after SetCounter(100) = %d", got)
	}
}

// TestShardSingleSkipsOwnership: a lone shard is the whole switch, as
// Pipeline.Process is.
func TestShardSingleSkipsOwnership(t *testing.T) {
	p := newPipe(t, 8, 16, 4)
	setupJob(t, p, 1, 0, 2, 1, 0, 8)
	sh := p.NewShard()
	var out Output
	h := wire.Header{Format: wire.FormatExtended, Seq: 1, PacketID: 1, Slot: 2, Elements: 4}
	sh.Process(addr(0), mkpkt(t, h, nil), &out)
	p.Process(addr(1), mkpkt(t, h, nil), &out)
	if len(out.Dests) != 2 {
		t.Fatalf("%v, want a multicast", out.Reason)
	}
	if p.owner[2].Load() != 0 {
		t.Fatal("a single shard took ownership of a slot")
	}
}

// TestShardConcurrent runs two shards at once over disjoint halves of a
// job's pool, as two lanes steered to two shards are (what the race
// detector checks), and checks every sum.
func TestShardConcurrent(t *testing.T) {
	const workers, slots, uses, elems = 4, 16, 200, 8
	p := newPipe(t, slots, elems, workers)
	setupJob(t, p, 1, 0, workers, 1, 0, slots)
	shards := []*Shard{p.NewShard(), p.NewShard()}
	var wg sync.WaitGroup
	errs := make(chan string, 2*slots)
	for k, sh := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := Output{Packet: make([]byte, 0, wire.MaxPacket), Dests: make([]netip.AddrPort, 0, workers)}
			vals := make([]int32, elems)
			// Shard k serves slots k, k+2, ...: lanes of half the pool.
			for use := 0; use < uses; use++ {
				for slot := k; slot < slots; slot += 2 {
					h := wire.Header{Format: wire.FormatExtended, Seq: uint32(use + 1), PacketID: uint32(slot), Slot: uint32(slot), Set: uint8(use % 2), Elements: elems}
					for r := 0; r < workers; r++ {
						for i := range vals {
							vals[i] = int32(r*1000 + use + i)
						}
						b, _ := h.Append(nil)
						b = wire.AppendPayload(b, vals)
						sh.Process(addr(r), b, &out)
					}
					if len(out.Dests) != workers {
						errs <- "slot use did not complete"
						return
					}
					_, pl, err := wire.Parse(out.Packet)
					if err != nil {
						errs <- err.Error()
						return
					}
					got := make([]int32, elems)
					wire.ReadPayload(got, pl)
					for i, v := range got {
						if want := int32(6000 + workers*(use+i)); v != want {
							errs <- "wrong sum"
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if c := p.Counters(); c[switchjob.StatMulticast] != uses*slots || c[switchjob.StatDropWrongShard] != 0 {
		t.Fatalf("counters %v", c)
	}
}
