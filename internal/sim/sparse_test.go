package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/wire"
)

// sparseWorkload is makeWorkload with most blocks of k values all zero:
// each op has a block density (share of a rank's blocks that hold values)
// drawn from densities, and the ranks' non-zero blocks overlap in part
// (some blocks are shared by all, the rest are each rank's own).
func sparseWorkload(rng *rand.Rand, n, k int, sizes []int, dtypes []dtype.Codec, densities []float64) workload {
	w := makeWorkload(rng, n, sizes, dtypes)
	for i, size := range sizes {
		d := densities[rng.IntN(len(densities))]
		blocks := (size + k - 1) / k
		shared := make([]bool, blocks)
		for b := range shared {
			shared[b] = rng.Float64() < d/2
		}
		for r := 0; r < n; r++ {
			op := w.ops[r][i]
			sz := op.DType.Size()
			for b := 0; b < blocks; b++ {
				if shared[b] || rng.Float64() < d/2 {
					continue
				}
				lo, hi := b*k*sz, min((b+1)*k, size)*sz
				clear(op.Data[lo:hi])
				clear(w.inputs[i][r].Data[lo:hi])
			}
		}
	}
	return w
}

// clone copies a workload's ops (inputs included), so two runs can start
// from the same tensors.
func (w workload) clone() workload {
	c := workload{ops: make([][]engine.Op, len(w.ops)), inputs: w.inputs}
	for r, ops := range w.ops {
		for _, op := range ops {
			op.Data = slices.Clone(op.Data)
			c.ops[r] = append(c.ops[r], op)
		}
	}
	return c
}

// unionBlocks is the number of k-value blocks of op i that are non-zero
// at some rank, per lane of SplitLanes(lanes).
func (w workload) unionBlocks(i, k, lanes int) []int {
	in := w.inputs[i]
	sz := in[0].DType.Size()
	n := len(in[0].Data) / sz
	var out []int
	for _, rg := range engine.SplitLanes(n, lanes, k) {
		c := 0
		for lo := rg.Off; lo < rg.Off+rg.Len; lo += k {
			hi := min(lo+k, rg.Off+rg.Len)
			for r := range in {
				if slices.ContainsFunc(in[r].Data[lo*sz:hi*sz], func(b byte) bool { return b != 0 }) {
					c++
					break
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// sparseRun runs one seeded sparse job with loss, reordering and
// duplication, checks every sum and checks that the results are the
// dense mode's, bit for bit, on the same inputs.
func sparseRun(t *testing.T, seed uint64, loss float64) Stats {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 91))
	n := 1 + rng.IntN(8)
	lanes := []int{1, 3}[rng.IntN(2)]
	k := 1 + rng.IntN(48)
	sizes := make([]int, 1+rng.IntN(3))
	for i := range sizes {
		sizes[i] = rng.IntN(1200)
	}
	dts := []dtype.Codec{[]dtype.Codec{dtype.Int32, dtype.Float32}[rng.IntN(2)], dtype.Float32, dtype.Int32}
	w := sparseWorkload(rng, n, k, sizes, dts, []float64{0, 0.01, 0.1, 0.5, 1})
	// Some ops run dense on the sparse lanes, as the session's policy
	// decides for tensors whose blocks all travel anyway.
	for i := range sizes {
		if rng.IntN(3) == 0 {
			for r := range w.ops {
				w.ops[r][i].Dense = true
			}
		}
	}
	dense := w.clone()
	window := 1 + rng.IntN(6)
	link := Link{Latency: 10 * time.Microsecond, Jitter: 10 * time.Microsecond, Bandwidth: 1e9, Loss: loss, Duplicate: 0.02}
	cfg := Config{
		Workers: n, Lanes: lanes,
		Engine: engine.Config{Format: wire.FormatExtended, Elements: k, Window: window, Timeout: time.Millisecond, GiveUp: sessionGiveUp, Sparse: true},
		Up:     link, Down: link, Seed: seed, StartSkew: 50 * time.Microsecond, CheckSetReuse: true,
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(w.ops)
	if err != nil {
		t.Fatalf("seed %d loss %g (n=%d lanes=%d k=%d window=%d sizes %v): %v", seed, loss, n, lanes, k, window, sizes, err)
	}
	w.check(t, k)
	cfg.Engine.Sparse, cfg.Up, cfg.Down = false, lan, lan
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(dense.ops); err != nil {
		t.Fatalf("seed %d: dense reference: %v", seed, err)
	}
	for r := range w.ops {
		for i := range w.ops[r] {
			if !slices.Equal(w.ops[r][i].Data, dense.ops[r][i].Data) {
				t.Fatalf("seed %d (n=%d lanes=%d k=%d sizes %v): rank %d op %d: the sparse result differs from the dense one", seed, n, lanes, k, sizes, r, i)
			}
		}
	}
	return st
}

func TestSparseLossySeeds(t *testing.T) {
	seeds := 2000 // per loss rate: 4,000 runs
	if testing.Short() {
		seeds = 50
	}
	for _, loss := range []float64{0.01, 0.1} {
		t.Run(fmt.Sprint("loss=", loss), func(t *testing.T) {
			total := sweep(t, seeds, loss, sparseRun)
			if total.SetReuses == 0 || total.Duplicated == 0 || total.Lost == 0 || total.Lanes.Retransmits == 0 || total.Switch[switchjob.StatRetransmitReply] == 0 {
				t.Fatal("the sweep exercised too little: set reuse, duplication, loss and recovery must all occur")
			}
		})
	}
}

// TestSparseSendsOnlyTheUnion: on a clean network each worker sends one
// directory per lane and one packet per block some worker holds; a block
// no worker holds is never sent, and a worker sends values only for its
// own non-zero blocks.
func TestSparseSendsOnlyTheUnion(t *testing.T) {
	const n, k, lanes = 4, 16, 2
	rng := rand.New(rand.NewPCG(4, 4))
	w := sparseWorkload(rng, n, k, []int{4000, 4000}, []dtype.Codec{dtype.Float32, dtype.Int32}, []float64{0.05})
	type sent struct{ rank, lane int }
	packets := map[sent]int{}
	var problems []string
	s, err := New(Config{
		Workers: n, Lanes: lanes,
		Engine: engine.Config{Format: wire.FormatExtended, Elements: k, Window: 8, Timeout: time.Millisecond, GiveUp: sessionGiveUp, Sparse: true},
		Up:     lan, Down: lan, Seed: 1, CheckSetReuse: true,
		Drop: func(p Packet) bool {
			if !p.ToSwitch {
				return false
			}
			packets[sent{p.Worker, p.Lane}]++
			h := p.Header
			if h.Block == wire.DirectoryBlock || h.Elements == 0 {
				return false
			}
			// Which op: by sequence number (1-based).
			in := w.inputs[h.Seq-1][p.Worker]
			sz := in.DType.Size()
			rg := engine.SplitLanes(len(in.Data)/sz, lanes, k)[p.Lane]
			lo := (rg.Off + int(h.Block)*k) * sz
			hi := min(rg.Off+int(h.Block)*k+k, rg.Off+rg.Len) * sz
			if !slices.ContainsFunc(in.Data[lo:hi], func(b byte) bool { return b != 0 }) {
				problems = append(problems, fmt.Sprintf("rank %d sent values for its zero block %d of lane %d", p.Worker, h.Block, p.Lane))
			}
			return false
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(w.ops); err != nil {
		t.Fatal(err)
	}
	w.check(t, k)
	if len(problems) > 0 {
		t.Fatal(problems[0])
	}
	want := make([]int, lanes)
	dense := 0
	for i := range w.inputs {
		for l, u := range w.unionBlocks(i, k, lanes) {
			want[l] += 1 + u // the directory and one packet per union block
		}
		dense += (4000 + k - 1) / k
	}
	total := 0
	for r := 0; r < n; r++ {
		for l := 0; l < lanes; l++ {
			if got := packets[sent{r, l}]; got != want[l] {
				t.Fatalf("rank %d lane %d sent %d packets, want %d (a directory per op and one per union block)", r, l, got, want[l])
			}
			total += packets[sent{r, l}]
		}
	}
	if total >= n*dense/3 {
		t.Fatalf("sent %d packets, a dense run sends about %d", total, n*dense)
	}
	t.Logf("%d packets sent, dense would send %d", total, n*dense)
}

// TestSparseAllZero: a tensor that is zero everywhere costs one directory
// per lane, and the result is zero.
func TestSparseAllZero(t *testing.T) {
	const n = 3
	ops := make([][]engine.Op, n)
	for r := range ops {
		x := make([]float32, 5000)
		ops[r] = []engine.Op{{Seq: 1, DType: dtype.Float32, Data: dtype.Bytes(x)}}
	}
	s, err := New(Config{
		Workers: n, Lanes: 2,
		Engine: engine.Config{Format: wire.FormatExtended, Elements: 64, Window: 4, Timeout: time.Millisecond, GiveUp: sessionGiveUp, Sparse: true},
		Up:     lan, Down: lan, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(ops)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lanes.Sent != n*2 {
		t.Fatalf("sent %d packets, want %d (one directory per lane)", st.Lanes.Sent, n*2)
	}
	for r := range ops {
		for j, v := range dtype.As[float32](ops[r][0].Data) {
			if v != 0 || math.Signbit(float64(v)) {
				t.Fatalf("rank %d [%d] = %g", r, j, v)
			}
		}
	}
}
