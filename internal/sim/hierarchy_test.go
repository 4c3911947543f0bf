package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/wire"
)

// TestHierarchClean runs 8 workers under 2 leaves without loss: exact
// sums, no timeouts, and every slot use crosses each trunk once each way.
func TestHierarchClean(t *testing.T) {
	for _, f := range []wire.Format{wire.FormatCompat, wire.FormatExtended} {
		t.Run(f.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(8, 2))
			w := makeWorkload(rng, 8, []int{0, 1, 33, 1000, 257}, []dtype.Codec{dtype.Int32, dtype.Float32})
			s, err := New(Config{
				Workers: 8, Lanes: 2, Leaves: 2, PoolBase: 3, SpineBase: 11,
				Engine: engine.Config{Format: f, Elements: 32, Window: 4, Timeout: time.Millisecond, GiveUp: sessionGiveUp},
				Up:     lan, Down: lan, TrunkUp: lan, TrunkDown: lan, Seed: 1, StartSkew: 20 * time.Microsecond, CheckSetReuse: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			st, err := s.Run(w.ops)
			if err != nil {
				t.Fatal(err)
			}
			w.check(t, 32)
			uses := st.Lanes.Results / 8
			switch {
			case st.Lanes.Timeouts != 0:
				t.Fatalf("lossless tree timed out %d times", st.Lanes.Timeouts)
			case st.Switch[switchjob.StatUpstream] != 2*uses || st.Switch[switchjob.StatFromParent] != 2*uses:
				t.Fatalf("leaves sent %d partial sums and took %d results up, want %d each (2 leaves x %d uses)",
					st.Switch[switchjob.StatUpstream], st.Switch[switchjob.StatFromParent], 2*uses, uses)
			case st.Spine[switchjob.StatMulticast] != uses || st.Spine[switchjob.StatReplicas] != 2*uses:
				t.Fatalf("spine multicast %d uses to %d leaves, want %d to %d", st.Spine[switchjob.StatMulticast], st.Spine[switchjob.StatReplicas], uses, 2*uses)
			}
		})
	}
}

// hierarchRun is one seeded two-level job with loss, reordering and
// duplication on every hop.
func hierarchRun(t *testing.T, seed uint64, loss float64) Stats {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1616))
	n := 2 + rng.IntN(9)
	leaves := 2 + rng.IntN(min(n, 4)-1)
	lanes := []int{1, 3}[rng.IntN(2)]
	format := wire.Format(rng.IntN(2))
	k := []int{32, 64}[rng.IntN(2)]
	if format == wire.FormatExtended {
		k = 1 + rng.IntN(64)
	}
	sizes := make([]int, 1+rng.IntN(3))
	for i := range sizes {
		sizes[i] = rng.IntN(400)
	}
	w := makeWorkload(rng, n, sizes, []dtype.Codec{[]dtype.Codec{dtype.Int32, dtype.Float32}[rng.IntN(2)], dtype.Float32, dtype.Int32})
	// Leaves add subsets of the workers' 16-bit pairs: their partial sums
	// decode as the root's do.
	w.narrow(rand.New(rand.NewPCG(seed, 16)))
	link := Link{Latency: 10 * time.Microsecond, Jitter: 10 * time.Microsecond, Bandwidth: 1e9, Loss: loss, Duplicate: 0.02}
	trunk := Link{Latency: 20 * time.Microsecond, Jitter: 10 * time.Microsecond, Bandwidth: 10e9, Loss: loss, Duplicate: 0.02}
	cfg := Config{
		Workers: n, Lanes: lanes, Leaves: leaves, PoolBase: uint32(rng.IntN(5)), SpineBase: uint32(rng.IntN(5)),
		Engine: engine.Config{Format: format, Elements: k, Window: 1 + rng.IntN(4), Timeout: time.Millisecond, GiveUp: sessionGiveUp},
		Up:     link, Down: link, TrunkUp: trunk, TrunkDown: trunk, Seed: seed, StartSkew: 50 * time.Microsecond, CheckSetReuse: true,
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(w.ops)
	if err != nil {
		t.Fatalf("seed %d loss %g (n=%d leaves=%d lanes=%d %v k=%d window %d sizes %v): %v",
			seed, loss, n, leaves, lanes, format, k, cfg.Engine.Window, sizes, err)
	}
	w.check(t, k)
	if st.End > time.Minute {
		t.Fatalf("seed %d: %v of virtual time", seed, st.End)
	}
	return st
}

// TestHierarchLossySeeds is the two-level proof: 1,200 seeded runs per loss
// rate with loss, jitter and duplication on the workers' links and the
// trunks; every run must finish with exact int32 sums and float32 sums
// within the quantization bound, and no (slot, set) may be reused at any
// switch while a worker below it lacks the previous result.
func TestHierarchLossySeeds(t *testing.T) {
	seeds := 1200
	if testing.Short() {
		seeds = 60
	}
	for _, loss := range []float64{0.01, 0.1} {
		t.Run(fmt.Sprint("loss=", loss), func(t *testing.T) {
			var total Stats
			for seed := 0; seed < seeds; seed++ {
				addStats(&total, hierarchRun(t, uint64(seed)+uint64(loss*1e6)<<20, loss))
			}
			t.Logf("%d runs: lost %d (%d on trunks), duplicated %d, worker retransmits %d, partial sums resent %d, spine unicast replies %d, leaf unicast replies %d, stale drops at leaves %d and at the spine %d, set reuses checked %d",
				seeds, total.Lost, total.TrunkLost, total.Duplicated, total.Lanes.Retransmits, total.Switch[switchjob.StatUpstreamResend],
				total.Spine[switchjob.StatRetransmitReply], total.Switch[switchjob.StatRetransmitReply],
				total.Switch[switchjob.StatDropStale], total.Spine[switchjob.StatDropStale], total.SetReuses)
			switch {
			case total.TrunkLost == 0 || total.Switch[switchjob.StatUpstreamResend] == 0:
				t.Fatal("no loss on the trunks was recovered: the sweep does not exercise the upper hop")
			case total.Spine[switchjob.StatRetransmitReply] == 0:
				t.Fatal("the spine never answered a leaf's resend alone: lost results on the way down were not exercised")
			case total.Switch[switchjob.StatRetransmitReply] == 0:
				t.Fatal("no leaf answered a worker's retransmission from a completed use")
			case total.Switch[switchjob.StatDropStale] == 0:
				t.Fatal("no late copy reached a leaf after its slot moved on")
			case total.SetReuses == 0 || total.Duplicated == 0:
				t.Fatal("the sweep exercised neither set reuse nor duplication")
			}
		})
	}
}

// TestHierarchLostHops loses one chosen packet on each hop of the tree in
// turn: a partial sum on its way up, the spine's result to one leaf, and
// the leaf's result to one worker. Each is recovered by the workers'
// timeouts, through the path the test names.
func TestHierarchLostHops(t *testing.T) {
	cases := []struct {
		name    string
		drop    func(Packet) bool
		counter func(Stats) uint64
	}{
		{"partial sums up", func(p Packet) bool { return p.Trunk && p.ToSwitch && p.Leaf == 1 },
			func(st Stats) uint64 { return st.Switch[switchjob.StatUpstreamResend] }},
		{"spine result down", func(p Packet) bool { return p.Trunk && !p.ToSwitch && p.Leaf == 0 },
			func(st Stats) uint64 { return st.Spine[switchjob.StatRetransmitReply] }},
		{"leaf result to a worker", func(p Packet) bool { return !p.Trunk && !p.ToSwitch && p.Worker == 3 },
			func(st Stats) uint64 { return st.Switch[switchjob.StatRetransmitReply] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 5))
			w := makeWorkload(rng, 4, []int{200}, []dtype.Codec{dtype.Int32})
			dropped := 0
			s, err := New(Config{
				Workers: 4, Lanes: 1, Leaves: 2,
				Engine: engine.Config{Format: wire.FormatExtended, Elements: 32, Window: 2, Timeout: time.Millisecond, GiveUp: sessionGiveUp},
				Up:     lan, Down: lan, TrunkUp: lan, TrunkDown: lan, Seed: 1, CheckSetReuse: true,
				Drop: func(p Packet) bool {
					if dropped == 0 && p.Header.PacketID == 3 && c.drop(p) {
						dropped++
						return true
					}
					return false
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			st, err := s.Run(w.ops)
			if err != nil {
				t.Fatal(err)
			}
			w.check(t, 32)
			if dropped != 1 || c.counter(st) == 0 || st.Lanes.Retransmits == 0 {
				t.Fatalf("dropped %d, recovery counter %d, retransmits %d: the loss was not recovered the way it should be", dropped, c.counter(st), st.Lanes.Retransmits)
			}
		})
	}
}
