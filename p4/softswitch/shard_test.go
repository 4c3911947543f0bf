package softswitch

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"testing"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

// shardBench is a switch with one 8-worker job on 256 slots and, for each
// shard, the packets of 8 workers streaming over its share of the slots.
func shardBench(tb testing.TB, shards, elems int) (*Server, []*Shard, [][]benchPacket) {
	const workers, slots = 8, 256
	srv, err := NewServer(ServerConfig{Pipeline: pipeline.Config{Slots: slots, MaxElements: elems, MaxWorkers: workers}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	p := srv.pipe
	var reps []switchjob.Replica
	for r := range workers {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(r), 1}), 5000)
		w := switchjob.Worker{JobID: 1, Rank: uint16(r), NumWorkers: workers, MulticastGroup: 1, PoolBase: 0, PoolSize: slots}
		if err := p.InsertWorker(pipeline.WorkerKey{Addr: src}, w); err != nil {
			tb.Fatal(err)
		}
		if err := p.InsertReply(pipeline.ReplyKey{JobID: 1, Rank: uint16(r)}, pipeline.Reply{Addr: src}); err != nil {
			tb.Fatal(err)
		}
		reps = append(reps, switchjob.Replica{EgressPort: uint32(r), Instance: uint16(r)})
	}
	if err := p.InsertMulticastGroup(1, reps); err != nil {
		tb.Fatal(err)
	}
	vals := make([]int32, elems)
	var sh []*Shard
	pkts := make([][]benchPacket, shards)
	for k := range shards {
		sh = append(sh, srv.Shard())
		// Shard k serves slots k, k+shards, ...: four uses of each slot,
		// the sets alternating and every use of a (slot, set) with another
		// packet id than the last, so that the stream loops forever in the
		// compatible format (whose sequence numbers wrap).
		for use := range 4 {
			for slot := k; slot < slots; slot += shards {
				h := wire.Header{Format: wire.FormatCompat, PacketID: uint32(use*slots + slot), Slot: uint32(slot), Set: uint8(use % 2), Elements: elems}
				for r := range workers {
					b, err := h.Append(nil)
					if err != nil {
						tb.Fatal(err)
					}
					src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(r), 1}), 5000)
					pkts[k] = append(pkts[k], benchPacket{src, wire.AppendPayload(b, vals)})
				}
			}
		}
	}
	return srv, sh, pkts
}

type benchPacket struct {
	src netip.AddrPort
	b   []byte
}

// BenchmarkShards runs the pipeline alone (no sockets) on 1 and 2 shards,
// each on its own goroutine taking the lock once per batch of 128 packets
// as the data-plane loop does: elements/s is the aggregate. b.N packets are
// split among the shards.
func BenchmarkShards(b *testing.B) {
	for _, elems := range []int{64, 256} {
		for _, shards := range []int{1, 2} {
			b.Run(fmt.Sprintf("elements=%d/shards=%d", elems, shards), func(b *testing.B) {
				srv, sh, pkts := shardBench(b, shards, elems)
				b.ResetTimer()
				var wg sync.WaitGroup
				for k := range shards {
					wg.Go(func() {
						out := pipeline.Output{Packet: make([]byte, 0, wire.MaxPacket), Dests: make([]netip.AddrPort, 0, 8)}
						stream := pkts[k]
						i := 0
						for n := k; n < b.N; {
							sh[k].BeginBatch()
							for j := 0; j < 128 && n < b.N; j++ {
								p := &stream[i]
								sh[k].Process(p.src, p.b, &out)
								if i++; i == len(stream) {
									i = 0
								}
								n += shards
							}
							sh[k].EndBatch()
						}
					})
				}
				wg.Wait()
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				b.ReportMetric(ns, "ns/packet")
				b.ReportMetric(float64(elems)*1e9/ns, "elements/s")
				if c := srv.Counters(); c[switchjob.StatDropWrongShard]+c[switchjob.StatDropStale]+c[switchjob.StatDropMismatch] != 0 {
					b.Fatalf("drops in the stream: %v", c)
				}
			})
		}
	}
}

// TestShardServerLock: a shard's batch holds the control plane off, and
// control-plane calls on the server still work between batches.
func TestShardServerLock(t *testing.T) {
	srv, sh, pkts := shardBench(t, 2, 32)
	var out pipeline.Output
	sh[0].BeginBatch()
	sh[1].BeginBatch() // shards do not exclude each other
	for _, p := range pkts[0][:8] {
		sh[0].Process(p.src, p.b, &out)
	}
	if len(out.Dests) != 8 {
		t.Fatalf("slot use of shard 0 did not complete: %v", out.Reason)
	}
	sh[1].EndBatch()
	sh[0].EndBatch()
	if c := srv.Counters(); c[switchjob.StatMulticast] != 1 || c[switchjob.StatReceived] != 8 {
		t.Fatalf("counters %v", c)
	}
}
