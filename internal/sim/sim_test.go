package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/wire"
)

// workload is a sequence of allreduce ops for n workers plus the inputs,
// kept to check the results.
type workload struct {
	ops    [][]engine.Op
	inputs [][]engine.Op // copies of the inputs, [op][rank]
}

func makeWorkload(rng *rand.Rand, n int, sizes []int, dtypes []dtype.Codec) workload {
	w := workload{ops: make([][]engine.Op, n)}
	for i, size := range sizes {
		dt := dtypes[i%len(dtypes)]
		var in []engine.Op
		for r := 0; r < n; r++ {
			op := engine.Op{Seq: uint32(i + 1), DType: dt}
			cp := op
			switch dt {
			case dtype.Int32:
				x := make([]int32, size)
				for j := range x {
					x[j] = int32(rng.Uint32())
				}
				op.Data = dtype.Bytes(x)
			case dtype.Float32:
				x := make([]float32, size)
				scale := math.Pow(2, float64(rng.IntN(40)-20))
				for j := range x {
					x[j] = float32(rng.NormFloat64() * scale)
				}
				op.Data = dtype.Bytes(x)
			}
			cp.Data = dtype.New(dt, size)
			copy(cp.Data, op.Data)
			w.ops[r] = append(w.ops[r], op)
			in = append(in, cp)
		}
		w.inputs = append(w.inputs, in)
	}
	return w
}

// narrow sends about half the float ops of w on the 16-bit wire (the same
// ops at every rank, as the ranks of a job agree), drawn from rng.
func (w workload) narrow(rng *rand.Rand) {
	for i, in := range w.inputs {
		if !in[0].DType.Scaled() || rng.IntN(2) == 0 {
			continue
		}
		for r := range w.ops {
			w.ops[r][i].Wire16 = true
			w.inputs[i][r].Wire16 = true
		}
	}
}

// check verifies that every worker holds the same result and that it is the
// exact sum (int32) or within quant's bound (float32; on the 16-bit wire,
// its bound for blocks of 2k values).
func (w workload) check(t testing.TB, k int) {
	t.Helper()
	n := len(w.ops)
	for i, in := range w.inputs {
		switch in[0].DType {
		case dtype.Int32:
			for j := range dtype.As[int32](in[0].Data) {
				var sum int32
				for r := 0; r < n; r++ {
					sum += dtype.As[int32](in[r].Data)[j]
				}
				for r := 0; r < n; r++ {
					if got := dtype.As[int32](w.ops[r][i].Data)[j]; got != sum {
						t.Fatalf("op %d rank %d [%d] = %d, want %d", i, r, j, got, sum)
					}
				}
			}
		case dtype.Float32:
			size := len(dtype.As[float32](in[0].Data))
			k, errorBound := k, quant.ErrorBound
			if in[0].Wire16 {
				k, errorBound = 2*k, quant.ErrorBound16
			}
			for j := 0; j < size; j++ {
				lo := j / k * k
				hi := min(lo+k, size)
				e := quant.MinExponent
				var exact float64
				for r := 0; r < n; r++ {
					e = quant.MaxExponent(e, quant.BlockExponent(dtype.As[float32](in[r].Data)[lo:hi]))
					exact += float64(dtype.As[float32](in[r].Data)[j])
				}
				bound := errorBound(n, e)
				for r := 0; r < n; r++ {
					got := dtype.As[float32](w.ops[r][i].Data)[j]
					if got != dtype.As[float32](w.ops[0][i].Data)[j] {
						t.Fatalf("op %d [%d]: rank %d has %g, rank 0 %g", i, j, r, got, dtype.As[float32](w.ops[0][i].Data)[j])
					}
					if math.Abs(float64(got)-exact) > bound {
						t.Fatalf("op %d rank %d [%d] = %g, exact %g, bound %g", i, r, j, got, exact, bound)
					}
				}
			}
		}
	}
}

var lan = Link{Latency: 10 * time.Microsecond, Bandwidth: 10e9}

func TestAllReduceClean(t *testing.T) {
	type tc struct {
		n int
		f wire.Format
	}
	cases := []tc{{1, wire.FormatCompat}, {2, wire.FormatCompat}, {3, wire.FormatCompat}, {4, wire.FormatCompat},
		{8, wire.FormatCompat}, {32, wire.FormatCompat}, {3, wire.FormatExtended}, {64, wire.FormatExtended}}
	for _, c := range cases {
		for _, lanes := range []int{1, 4} {
			t.Run(fmt.Sprintf("n=%d/%v/lanes=%d", c.n, c.f, lanes), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c.n), uint64(lanes)))
				// 0, 1, non-multiples of the packet size, back to back.
				sizes := []int{0, 1, 33, 100, 257, 1000, 64}
				w := makeWorkload(rng, c.n, sizes, []dtype.Codec{dtype.Int32, dtype.Float32})
				s, err := New(Config{
					Workers: c.n, Lanes: lanes, PoolBase: 7,
					Engine: engine.Config{Format: c.f, Elements: 32, Window: 4, Timeout: time.Millisecond, GiveUp: sessionGiveUp},
					Up:     lan, Down: lan, Seed: 1, StartSkew: 20 * time.Microsecond, CheckSetReuse: true,
				})
				if err != nil {
					t.Fatal(err)
				}
				st, err := s.Run(w.ops)
				if err != nil {
					t.Fatal(err)
				}
				w.check(t, 32)
				if st.Lanes.Timeouts != 0 || st.Switch[switchjob.StatReceived] != st.Lanes.Sent || st.Switch[switchjob.StatMulticast] != st.Lanes.Results/uint64(c.n) {
					t.Fatalf("lossless run: %+v", st)
				}
			})
		}
	}
}

// lossyRun runs one small seeded job with loss, reordering and duplication
// and checks the results.
func lossyRun(t *testing.T, seed uint64, loss float64) Stats {
	return lossyRunJitter(t, seed, loss, 10*time.Microsecond, 255)
}

// lossyRunJitter is lossyRun with a chosen jitter and format (-1: random).
func lossyRunJitter(t *testing.T, seed uint64, loss float64, jitter time.Duration, f wire.Format) Stats {
	rng := rand.New(rand.NewPCG(seed, 77))
	n := 1 + rng.IntN(8)
	lanes := []int{1, 4}[rng.IntN(2)]
	format := wire.Format(rng.IntN(2))
	if f != 255 {
		format = f
	}
	k := []int{32, 64}[rng.IntN(2)]
	if format == wire.FormatExtended {
		k = 1 + rng.IntN(64) // any packet size, including 1
	}
	nops := 1 + rng.IntN(3)
	sizes := make([]int, nops)
	for i := range sizes {
		sizes[i] = rng.IntN(400)
	}
	w := makeWorkload(rng, n, sizes, []dtype.Codec{[]dtype.Codec{dtype.Int32, dtype.Float32}[rng.IntN(2)], dtype.Float32, dtype.Int32})
	w.narrow(rand.New(rand.NewPCG(seed, 16))) // apart from rng: the other draws stay what they were
	link := Link{Latency: 10 * time.Microsecond, Jitter: jitter, Bandwidth: 1e9, Loss: loss, Duplicate: 0.02}
	s, err := New(Config{
		Workers: n, Lanes: lanes,
		Engine: engine.Config{Format: format, Elements: k, Window: 1 + rng.IntN(4), Timeout: time.Millisecond, GiveUp: sessionGiveUp},
		Up:     link, Down: link, Seed: seed, StartSkew: 50 * time.Microsecond, CheckSetReuse: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(w.ops)
	if err != nil {
		t.Fatalf("seed %d loss %g (n=%d lanes=%d %v k=%d sizes %v): %v", seed, loss, n, lanes, format, k, sizes, err)
	}
	w.check(t, k)
	if st.End > time.Minute {
		t.Fatalf("seed %d: %v of virtual time", seed, st.End)
	}
	return st
}

func TestLossySeeds(t *testing.T) {
	seeds := 2000 // per loss rate: 6,000 runs
	if testing.Short() {
		seeds = 50
	}
	for _, loss := range []float64{0.0001, 0.01, 0.1} {
		t.Run(fmt.Sprint("loss=", loss), func(t *testing.T) {
			total := sweep(t, seeds, loss, lossyRun)
			if total.SetReuses == 0 || total.Duplicated == 0 {
				t.Fatal("the sweep exercised neither set reuse nor duplication")
			}
			if loss >= 0.01 && (total.Lost == 0 || total.Lanes.Retransmits == 0) {
				t.Fatal("no loss recovery exercised")
			}
		})
	}
}

// sweep runs seeds seeded jobs at loss through run and sums what they
// lost, duplicated and recovered.
func sweep(t *testing.T, seeds int, loss float64, run func(*testing.T, uint64, float64) Stats) Stats {
	var total Stats
	for seed := 0; seed < seeds; seed++ {
		addStats(&total, run(t, uint64(seed)+uint64(loss*1e6)<<20, loss))
	}
	t.Logf("%d runs: lost %d, duplicated %d, retransmits %d, unicast replies %d, set reuses checked %d",
		seeds, total.Lost, total.Duplicated, total.Lanes.Retransmits, total.Switch[switchjob.StatRetransmitReply], total.SetReuses)
	return total
}

// addStats adds a run's losses, duplicates, recoveries and switch
// counters to total.
func addStats(total *Stats, st Stats) {
	total.Lost += st.Lost
	total.TrunkLost += st.TrunkLost
	total.Duplicated += st.Duplicated
	total.SetReuses += st.SetReuses
	total.Lanes.Retransmits += st.Lanes.Retransmits
	for i := range st.Switch {
		total.Switch[i] += st.Switch[i]
		total.Spine[i] += st.Spine[i]
	}
}

// TestSetReuseHeavyLoss pushes many slot reuses through heavy loss with the
// reuse check on: no (slot, set) may be overwritten while a worker still
// lacks its previous result.
func TestSetReuseHeavyLoss(t *testing.T) {
	link := Link{Latency: 5 * time.Microsecond, Jitter: 5 * time.Microsecond, Loss: 0.2, Duplicate: 0.05}
	rng := rand.New(rand.NewPCG(3, 3))
	w := makeWorkload(rng, 6, []int{2000, 33, 1500}, []dtype.Codec{dtype.Float32, dtype.Int32})
	s, err := New(Config{
		Workers: 6, Lanes: 2,
		Engine: engine.Config{Format: wire.FormatCompat, Elements: 32, Window: 3, Timeout: 100 * time.Microsecond, GiveUp: sessionGiveUp},
		Up:     link, Down: link, Seed: 42, StartSkew: time.Millisecond, CheckSetReuse: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(w.ops)
	if err != nil {
		t.Fatal(err)
	}
	w.check(t, 32)
	if st.SetReuses < 100 || st.Switch[switchjob.StatRetransmitReply] == 0 {
		t.Fatalf("reuses %d, unicast replies %d: not enough exercised", st.SetReuses, st.Switch[switchjob.StatRetransmitReply])
	}
}

// TestLostMulticastRecovered loses rank 1's copy of a multicast result:
// rank 1 times out, resends, and the switch answers it alone from the
// completed set.
func TestLostMulticastRecovered(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	w := makeWorkload(rng, 3, []int{200}, []dtype.Codec{dtype.Int32})
	dropped := 0
	s, err := New(Config{
		Workers: 3, Lanes: 1,
		Engine: engine.Config{Format: wire.FormatCompat, Elements: 32, Window: 2, Timeout: time.Millisecond, GiveUp: sessionGiveUp},
		Up:     lan, Down: lan, Seed: 1, CheckSetReuse: true,
		Drop: func(p Packet) bool {
			if !p.ToSwitch && p.Worker == 1 && p.Header.PacketID == 2 && dropped == 0 {
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
	// Rank 0 may resend too (its next packet on that slot waits for rank
	// 1), but only rank 1's resend finds the set complete.
	if dropped != 1 || st.Switch[switchjob.StatRetransmitReply] != 1 || s.Lane(1, 0).Stats().Retransmits == 0 {
		t.Fatalf("dropped %d, unicast replies %d, rank 1 %+v", dropped, st.Switch[switchjob.StatRetransmitReply], s.Lane(1, 0).Stats())
	}
}

func TestDeterministic(t *testing.T) {
	var prev Stats
	for i := 0; i < 2; i++ {
		st := lossyRun(t, 12345, 0.1)
		if i == 1 && fmt.Sprint(st) != fmt.Sprint(prev) {
			t.Fatalf("same seed, different runs:\n%+v\n%+v", prev, st)
		}
		prev = st
	}
}

// sessionGiveUp: the engines here give up as a worker's session does by
// default, by time since the last result.
const sessionGiveUp = switchml.DefaultGiveUp

// TestDeadPeerFails cuts rank 2 off: the others must fail with the timeout
// budget error instead of hanging, under the policy switchml.Session runs
// (a give-up in time since the last result; the simulator's clock).
func TestDeadPeerFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	w := makeWorkload(rng, 3, []int{100}, []dtype.Codec{dtype.Int32})
	s, err := New(Config{
		Workers: 3, Lanes: 2,
		Engine: engine.Config{Format: wire.FormatExtended, Elements: 32, Window: 2, Timeout: time.Millisecond, GiveUp: 2 * time.Second},
		Up:     lan, Down: lan, Seed: 1,
		Drop: func(p Packet) bool { return p.Worker == 2 },
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Run(w.ops)
	if !errors.Is(err, engine.ErrTimeoutBudget) {
		t.Fatalf("err = %v, want the timeout budget error", err)
	}
}

// TestExtendedLongDelays holds packets up to 30 link latencies (far beyond a
// round trip): the extended format's monotonic sequence numbers let the switch
// recognise requests delayed past the reuse of their set, so runs still
// finish with correct sums.
func TestExtendedLongDelays(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	var stale uint64
	for seed := 0; seed < seeds; seed++ {
		st := lossyRunJitter(t, uint64(seed)+1<<40, 0.05, 300*time.Microsecond, wire.FormatExtended)
		stale += st.Switch[switchjob.StatDropStale] + st.Switch[switchjob.StatDropMismatch]
	}
	if stale == 0 {
		t.Fatal("no delayed request reached a reused set: the test does not exercise the case")
	}
	t.Logf("%d runs, %d delayed requests rejected", seeds, stale)
}
