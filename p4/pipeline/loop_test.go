package pipeline

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

// TestNoLoopBetweenSwitches joins two switches the way a hostile user can:
// a one-worker job on each whose lane address is the other switch's data
// plane. One forged contribution to A, sent from B's address, makes A
// multicast a result to B. Without the result mark, B takes it as a
// contribution, answers A, and each switch takes the other's answer for a
// retransmission of a completed use and answers it: the packets go round
// for as long as the jobs live. With the mark, B refuses the result and
// nothing more moves; a neighbour job on A keeps exact sums.
func TestNoLoopBetweenSwitches(t *testing.T) {
	for _, format := range []wire.Format{wire.FormatCompat, wire.FormatExtended} {
		t.Run(format.String(), func(t *testing.T) {
			dataA := netip.MustParseAddrPort("10.9.0.1:48864")
			dataB := netip.MustParseAddrPort("10.9.0.2:48864")
			a, b := newPipe(t, 8, 64, 4), newPipe(t, 8, 64, 4)
			peerJob := func(p *Pipeline, peer netip.AddrPort) {
				t.Helper()
				w := switchjob.Worker{JobID: 1, NumWorkers: 1, MulticastGroup: 1, PoolSize: 4}
				if err := p.InsertWorker(WorkerKey{peer}, w); err != nil {
					t.Fatal(err)
				}
				if err := p.InsertReply(ReplyKey{JobID: 1}, Reply{Addr: peer}); err != nil {
					t.Fatal(err)
				}
				if err := p.InsertMulticastGroup(1, []switchjob.Replica{{}}); err != nil {
					t.Fatal(err)
				}
			}
			peerJob(a, dataB)
			peerJob(b, dataA)
			setupJob(t, a, 2, 0, 2, 2, 4, 4) // the neighbour: 2 workers, slots 4..7

			h := wire.Header{Format: format, Seq: 3, PacketID: 1, Slot: 1, Elements: 32}
			type packet struct {
				to, from netip.AddrPort
				b        []byte
			}
			queue := []packet{{to: dataA, from: dataB, b: mkpkt(t, h, []int32{7})}}
			switches := map[netip.AddrPort]*Pipeline{dataA: a, dataB: b}
			// Deliver until nothing moves; a loop never stops, so a bound
			// on the packets delivered tells the two apart.
			const bound = 100
			delivered := 0
			var out Output
			for len(queue) > 0 && delivered < bound {
				pk := queue[0]
				queue = queue[1:]
				delivered++
				switches[pk.to].Process(pk.from, pk.b, &out)
				for _, d := range out.Dests {
					if _, ok := switches[d]; ok {
						queue = append(queue, packet{to: d, from: pk.to, b: slices.Clone(out.Packet)})
					}
				}
			}
			if len(queue) > 0 {
				t.Fatalf("still %d packets between the switches after %d delivered: a loop", len(queue), delivered)
			}
			// The forged packet and A's result to B, refused there.
			if delivered != 2 {
				t.Fatalf("%d packets delivered, want 2 (the forged one and A's result)", delivered)
			}
			for name, p := range map[string]*Pipeline{"A": a, "B": b} {
				if n := p.Counter(switchjob.StatRetransmitReply); n != 0 {
					t.Errorf("switch %s answered %d retransmissions, want 0", name, n)
				}
			}
			if n := b.Counter(switchjob.StatDropResult); n != 1 {
				t.Errorf("switch B refused %d results, want 1", n)
			}
			checkInvariants(t, a)
			checkInvariants(t, b)

			// A's neighbour job sums exactly.
			n := wire.Header{Format: format, Seq: 1, PacketID: 1, Slot: 5, Elements: 32}
			a.Process(addr(0), mkpkt(t, n, []int32{1, 2}), &out)
			a.Process(addr(1), mkpkt(t, n, []int32{10, 20}), &out)
			if len(out.Dests) != 2 {
				t.Fatalf("neighbour's result went to %v, want its 2 workers", out.Dests)
			}
			if rh, v := decode(t, out.Packet); !rh.Result || v[0] != 11 || v[1] != 22 {
				t.Fatalf("neighbour's result %+v %v, want marked sums [11 22 ...]", rh, v[:2])
			}
		})
	}
}

// TestResultRefusedAsContribution sends a marked result from a worker's
// address: the switch drops it before it touches a register, in either
// layout, and the worker's genuine contribution is still taken.
func TestResultRefusedAsContribution(t *testing.T) {
	for _, format := range []wire.Format{wire.FormatCompat, wire.FormatExtended} {
		p := newPipe(t, 4, 64, 4)
		setupJob(t, p, 1, 0, 2, 1, 0, 4)
		var out Output
		h := wire.Header{Format: format, Seq: 1, PacketID: 1, Slot: 2, Elements: 32, Result: true}
		p.Process(addr(0), mkpkt(t, h, []int32{1000}), &out)
		if len(out.Dests) != 0 || out.Reason != switchjob.StatDropResult {
			t.Fatalf("%v: a result as contribution: dests %v reason %v, want drop_result", format, out.Dests, out.Reason)
		}
		if bm, _ := p.ReadRegister(RegPoolBitmap, 2); bm[0] != 0 {
			t.Fatalf("%v: a refused result set the bitmap to %#x", format, bm)
		}
		h.Result = false
		p.Process(addr(0), mkpkt(t, h, []int32{1}), &out)
		p.Process(addr(1), mkpkt(t, h, []int32{2}), &out)
		if _, v := decode(t, out.Packet); len(out.Dests) != 2 || v[0] != 3 {
			t.Fatalf("%v: sum %v to %v, want 3 to both workers", format, v[:1], out.Dests)
		}
		checkInvariants(t, p)
	}
}
