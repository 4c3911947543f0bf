package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/wire"
)

// TestWire16WithinBound runs float32, float16 and bfloat16 ops on the 16-bit
// wire through the pipeline (which adds 32-bit words, as every switch of
// ours does), with packets lost both ways, and checks every element against
// the exact sum within the 16-bit bound of its 2*Elements-value block, every
// rank agreeing, and half the first transmissions of the 32-bit wire.
func TestWire16WithinBound(t *testing.T) {
	for _, f := range []wire.Format{wire.FormatCompat, wire.FormatExtended} {
		for _, dt := range []dtype.Codec{dtype.Float32, dtype.Float16, dtype.BFloat16} {
			for _, n := range []int{1, 3, 8} {
				for _, size := range []int{1, 63, 64, 65, 301} {
					t.Run(fmt.Sprintf("%v/%s/n=%d/size=%d", f, dt.Name(), n, size), func(t *testing.T) {
						const elements = 32
						h := newHarness(t, n, Config{Format: f, Elements: elements, Window: 3})
						rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
						lost := 0
						h.drop = func(toSwitch bool, rank int, hd wire.Header) bool {
							if rng.IntN(10) == 0 {
								lost++
								return true
							}
							return false
						}
						for op := 0; op < 2; op++ {
							ops := make([]Op, n)
							inputs := make([][]float32, n)
							for r := range ops {
								data := dtype.New(dt, size)
								inputs[r] = make([]float32, size)
								for i := range size {
									// Blocks of very different scales.
									dt.Set(data, i, rng.NormFloat64()*math.Pow(10, float64(i/64%5-2)))
									inputs[r][i] = float32(dt.Get(data, i))
								}
								ops[r] = Op{Seq: uint32(op), DType: dt, Data: data, Wire16: true}
							}
							before := h.lanes[0].Stats().Sent
							if !h.run(t, ops) {
								t.Fatal("did not finish")
							}
							blocks := (size + 2*elements - 1) / (2 * elements)
							if sent := h.lanes[0].Stats().Sent - before; sent != uint64(2*min(3, blocks)+blocks-min(3, blocks)) {
								t.Errorf("rank 0 sent %d packets for %d values, want %d: %d-value blocks and one exponent round", sent, size, blocks+min(3, blocks), 2*elements)
							}
							for i := 0; i < size; i++ {
								var exact float64
								for r := range inputs {
									exact += float64(inputs[r][i])
								}
								b := floatBound(inputs, 2*elements, i, dt.(dtype.Wire16).Bound16)
								for r := range ops {
									if err := h.lanes[r].Err(); err != nil {
										t.Fatal(err)
									}
									got := dt.Get(ops[r].Data, i)
									if math.Abs(got-exact) > b {
										t.Fatalf("rank %d [%d] = %g, exact %g, bound %g", r, i, got, exact, b)
									}
									if got != dt.Get(ops[0].Data, i) {
										t.Fatalf("ranks disagree at %d", i)
									}
								}
							}
						}
						if size > 100 && lost == 0 {
							t.Error("no packet was lost: the test did not exercise recovery")
						}
					})
				}
			}
		}
	}
}

// TestWire16PrecomputedExponents gives the lanes every 2*Elements-value
// block's exponent, as the session does, and checks they are used: a wrong
// exponent in them shows in the result.
func TestWire16PrecomputedExponents(t *testing.T) {
	const n, size, elements = 2, 256, 32
	h := newHarness(t, n, Config{Format: wire.FormatExtended, Elements: elements, Window: 2})
	ops := make([]Op, n)
	for r := range ops {
		x := make([]float32, size)
		for i := range x {
			x[i] = 1
		}
		exps := make([]int8, size/(2*elements))
		if err := quant.BlockExponents(exps, x, 2*elements); err != nil {
			t.Fatal(err)
		}
		exps[2] = -3 // too small for the 1s: they clamp
		ops[r] = Op{Seq: 1, DType: dtype.Float32, Data: dtype.Bytes(x), Wire16: true, Exps: exps, ExpBlock: 2 * elements, Checked: true}
	}
	if !h.run(t, ops) {
		t.Fatal("did not finish")
	}
	got := dtype.As[float32](ops[0].Data)
	if d := math.Abs(float64(got[0]) - 2); d > quant.ErrorBound16(n, 1) {
		t.Errorf("block 0: %v, want 2 within %g", got[0], quant.ErrorBound16(n, 1))
	}
	if got[2*2*elements] >= 1 {
		t.Errorf("block 2, sent under exponent -3: %v, want the clamped value below 1: the lanes did not use Exps", got[2*2*elements])
	}
}

func TestWire16Refusals(t *testing.T) {
	l, err := NewLane(Config{NumWorkers: 1, Elements: 32, Window: 1, Format: wire.FormatExtended})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Start(Op{DType: dtype.Int32, Data: make([]byte, 8), Wire16: true}, 0)
	if err == nil || !strings.Contains(err.Error(), "16-bit wire") {
		t.Errorf("int32 on the 16-bit wire: %v, want a refusal", err)
	}
	sp, err := NewLane(Config{NumWorkers: 1, Elements: 32, Window: 1, Format: wire.FormatExtended, Sparse: true})
	if err != nil {
		t.Fatal(err)
	}
	err = sp.Start(Op{DType: dtype.Float32, Data: make([]byte, 8), Wire16: true}, 0)
	if err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("a sparse op on the 16-bit wire: %v, want a refusal", err)
	}
	if err := sp.Start(Op{DType: dtype.Float32, Data: make([]byte, 8), Wire16: true, Dense: true}, 0); err != nil {
		t.Errorf("a dense op of a sparse lane on the 16-bit wire: %v", err)
	}
}
