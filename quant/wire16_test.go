package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// allReduce16Once quantizes n workers' blocks for the 16-bit wire, adds the
// words as a switch does (32-bit, wrapping), reads the sums back and checks
// every element against the exact sum within ErrorBound16. It also checks
// each half against an independent int64 sum of the workers' 16-bit values,
// so a pairing that loses a carry fails even where the bound is loose.
func allReduce16Once(t *testing.T, rng *rand.Rand, n, k int, gen func(*rand.Rand, int) float32, name string) {
	t.Helper()
	blocks := make([][]float32, n)
	E := MinExponent
	for w := range blocks {
		blocks[w] = make([]float32, k)
		for j := range blocks[w] {
			blocks[w][j] = gen(rng, w)
		}
		E = MaxExponent(E, BlockExponent(blocks[w]))
	}
	words := PairWords(k)
	sum := make([]uint32, words)
	halves := make([]int64, k)
	pkt := make([]byte, 4*words)
	f, lim := Scale16(n, E), float64(Limit16(n))
	for w, b := range blocks {
		for i := range pkt {
			pkt[i] = 0xa5 // a word the quantizer forgets to write shows
		}
		if got := QuantizePairsBE(pkt, b, n, E); got != k {
			t.Fatalf("%s: QuantizePairsBE converted %d of %d", name, got, k)
		}
		for i := range sum {
			sum[i] += binary.BigEndian.Uint32(pkt[4*i:])
		}
		for j, x := range b {
			v := math.RoundToEven(math.Max(-lim, math.Min(lim, float64(x)*f)))
			halves[j] += int64(v)
			if math.Abs(v) > lim {
				t.Fatalf("%s n=%d: worker %d value %g beyond L16 %v", name, n, w, x, lim)
			}
		}
		if k%2 == 1 {
			if lo := int16(binary.BigEndian.Uint32(pkt[4*(words-1):])); lo != 0 {
				t.Fatalf("%s: odd count: the last word's second half is %d, want 0", name, lo)
			}
		}
	}
	for i, s := range sum {
		binary.BigEndian.PutUint32(pkt[4*i:], s)
	}
	out := make([]float32, k)
	if got := DequantizePairsBE(out, pkt, n, E); got != k {
		t.Fatalf("%s: DequantizePairsBE converted %d of %d", name, got, k)
	}
	g := float64(n) * math.Ldexp(1, power(E)) / fullScale16
	bound := ErrorBound16(n, E)
	for j := range out {
		if want := float32(float64(halves[j]) * g); out[j] != want {
			t.Fatalf("%s n=%d E=%d k=%d: element %d = %v, the workers' 16-bit values sum to %d (%v)", name, n, E, k, j, out[j], halves[j], want)
		}
		checkResult(t, name, float64(out[j]), exactSum(blocks, j), bound, math.MaxFloat32)
	}
}

func TestWire16AllReduceProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 16))
	iters := 30
	if testing.Short() {
		iters = 6
	}
	for _, n := range []int{1, 2, 3, 4, 7, 8, 16, 33, 64, 100, 255, MaxWorkers16} {
		for _, class := range classes {
			for iter := 0; iter < iters; iter++ {
				k := 1 + rng.IntN(130)
				allReduce16Once(t, rng, n, k, func(r *rand.Rand, w int) float32 {
					if iter%4 == 3 && w%2 == 1 {
						return classes[r.IntN(len(classes))].gen(r)
					}
					return class.gen(r)
				}, class.name)
			}
		}
	}
}

// TestWire16EdgeOfRange puts the largest value below 2^E, of either sign,
// in every worker's block: every half's sum sits at the limit, where a lost
// carry or a wrap between the halves would show.
func TestWire16EdgeOfRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 16))
	for _, n := range []int{1, 2, 3, 5, 7, 8, 63, 64, 65, 127, 128, 129, MaxWorkers16} {
		for _, e := range []int8{-100, -1, 0, 1, 20, 126} {
			top := math.Nextafter32(float32(math.Ldexp(1, int(e))), 0)
			for _, signs := range []string{"++", "--", "+-", "-+", "mixed"} {
				allReduce16Once(t, rng, n, 9, func(r *rand.Rand, w int) float32 {
					j := r.IntN(2)
					s := signs
					if s == "mixed" {
						s = []string{"++", "--", "+-", "-+"}[r.IntN(4)]
					}
					if s[j] == '-' {
						return -top
					}
					return top
				}, "edge "+signs)
			}
		}
	}
}

func TestWire16KnownWords(t *testing.T) {
	// Two workers, E = 1: f16 = 32767/4, L16 = 16383.
	src := []float32{1.5, -1.5, -0.25, 0.0001, 1}
	dst := make([]byte, 12)
	if got := QuantizePairsBE(dst, src, 2, 1); got != 5 {
		t.Fatalf("converted %d, want 5", got)
	}
	q := func(x float64) int32 { return int32(math.RoundToEven(x * 32767 / 4)) }
	want := []uint32{
		uint32(q(1.5)<<16 + q(-1.5)),
		uint32(q(-0.25)<<16 + q(0.0001)),
		uint32(q(1) << 16),
	}
	for i, w := range want {
		if got := binary.BigEndian.Uint32(dst[4*i:]); got != w {
			t.Errorf("word %d = %#08x, want %#08x", i, got, w)
		}
	}
	// The pairing is arithmetic: a negative second half borrows from the first.
	if a, b := unpair(pair(-3, -5)); a != -3 || b != -5 {
		t.Errorf("unpair(pair(-3, -5)) = %d, %d", a, b)
	}
	if pair(0, -1) != 0xffffffff {
		t.Errorf("pair(0, -1) = %#x, want 0xffffffff (0*2^16 - 1)", pair(0, -1))
	}
}

func TestWire16ShortBuffers(t *testing.T) {
	src := []float32{1, 2, 3, 4, 5}
	if got := QuantizePairsBE(make([]byte, 7), src, 1, 3); got != 2 {
		t.Errorf("7 bytes take %d values, want 2 (one whole word)", got)
	}
	if got := QuantizePairsBE(make([]byte, 16), src, 1, 3); got != 5 {
		t.Errorf("16 bytes take %d of 5 values", got)
	}
	if got := DequantizePairsBE(make([]float32, 3), make([]byte, 16), 1, 3); got != 3 {
		t.Errorf("3 outputs from 4 words: %d", got)
	}
	if got := DequantizePairsBE(make([]float32, 9), make([]byte, 10), 1, 3); got != 4 {
		t.Errorf("9 outputs from 10 bytes: %d, want 4", got)
	}
}

// TestWire16HalfTypes checks that the float16 and bfloat16 paths quantize
// exactly as the widened float32 values do, across chunk boundaries, and
// that their sums stay within their bounds.
func TestWire16HalfTypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 16))
	for _, bf := range []bool{false, true} {
		for _, k := range []int{1, 2, 511, 512, 513, 1025, 1536} {
			n := 1 + rng.IntN(12)
			hs := make([][]uint16, n)
			E := MinExponent
			for w := range hs {
				hs[w] = make([]uint16, k)
				for j := range hs[w] {
					x := float32(rng.NormFloat64() * 3)
					if bf {
						hs[w][j] = Float32ToBF16(x)
					} else {
						hs[w][j] = Float32ToF16(x)
					}
				}
				if bf {
					E = max(E, BlockExponentBF16(hs[w]))
				} else {
					E = max(E, BlockExponentF16(hs[w]))
				}
			}
			words := PairWords(k)
			sum := make([]uint32, words)
			exact := make([]float64, k)
			for _, h := range hs {
				wide := make([]float32, k)
				for j, v := range h {
					if bf {
						wide[j] = BF16ToFloat32(v)
					} else {
						wide[j] = F16ToFloat32(v)
					}
					exact[j] += float64(wide[j])
				}
				a, b := make([]byte, 4*words), make([]byte, 4*words)
				QuantizePairsBE(a, wide, n, E)
				if bf {
					QuantizeBF16PairsBE(b, h, n, E)
				} else {
					QuantizeF16PairsBE(b, h, n, E)
				}
				if string(a) != string(b) {
					t.Fatalf("bf16=%v k=%d: the half path's words differ from the widened float32's", bf, k)
				}
				for i := range sum {
					sum[i] += binary.BigEndian.Uint32(b[4*i:])
				}
			}
			pkt := make([]byte, 4*words)
			for i, s := range sum {
				binary.BigEndian.PutUint32(pkt[4*i:], s)
			}
			out := make([]uint16, k)
			bound := ErrorBound16F16(n, E)
			if bf {
				DequantizeBF16PairsBE(out, pkt, n, E)
				bound = ErrorBound16BF16(n, E)
			} else {
				DequantizeF16PairsBE(out, pkt, n, E)
			}
			for j, v := range out {
				got := F16ToFloat32(v)
				if bf {
					got = BF16ToFloat32(v)
				}
				if d := math.Abs(float64(got) - exact[j]); d > bound {
					t.Fatalf("bf16=%v n=%d k=%d: element %d = %v, exact %v: error %g beyond %g", bf, n, k, j, got, exact[j], d, bound)
				}
			}
		}
	}
}

// TestErrorBound16 pins the bound's value, so a change to it is a decision:
// 8 workers, E = 0, c = 0.5 (32767/8 = 4095.875, L16 = 4095: the clamp
// can cost 0.875 of a step, so c = 0.875).
func TestErrorBound16(t *testing.T) {
	got := ErrorBound16(8, 0)
	want := 8 * (8*0.875/32767 + 0x1p-24 + 0x1p-50)
	if math.Abs(got-want) > 1e-15 {
		t.Errorf("ErrorBound16(8, 0) = %g, want %g", got, want)
	}
	if ErrorBound16(2, 0) >= ErrorBound16(8, 0) || ErrorBound16(8, 0) >= ErrorBound(8, 0)*(1<<17) {
		t.Errorf("ErrorBound16 out of order: n=2 %g, n=8 %g, 32-bit n=8 %g", ErrorBound16(2, 0), ErrorBound16(8, 0), ErrorBound(8, 0))
	}
}

// TestFiniteBlockExponentHalf: the one-pass exponent and check agree with
// BlockExponent and CheckFinite on blocks with and without NaN and Inf.
func TestFiniteBlockExponentHalf(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 16))
	for iter := 0; iter < 5000; iter++ {
		x := make([]uint16, 1+rng.IntN(40))
		for i := range x {
			x[i] = uint16(rng.Uint32())
		}
		if rng.IntN(2) == 0 { // mostly finite blocks too
			for i := range x {
				x[i] &^= 0x4000
			}
		}
		e, finite := FiniteBlockExponentBF16(x)
		if finite != (CheckFiniteBF16(x) == nil) {
			t.Fatalf("bfloat16 %04x: finite %v, CheckFiniteBF16 %v", x, finite, CheckFiniteBF16(x))
		}
		if finite && e != exponentOfBits(uint32(maxMagnitude16(x))<<16) {
			t.Fatalf("bfloat16 %04x: exponent %d", x, e)
		}
		e, finite = FiniteBlockExponentF16(x)
		if finite != (CheckFiniteF16(x) == nil) {
			t.Fatalf("float16 %04x: finite %v, CheckFiniteF16 %v", x, finite, CheckFiniteF16(x))
		}
		if finite {
			var m float32
			for _, h := range x {
				m = max(m, float32(math.Abs(float64(F16ToFloat32(h)))))
			}
			if want := BlockExponent([]float32{m}); e != want {
				t.Fatalf("float16 %04x: exponent %d, want %d", x, e, want)
			}
		}
	}
}

// TestNarrowBF16 is Float32ToBF16 for every value but NaN, which a sum
// never is.
func TestNarrowBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 16))
	src := make([]float32, 4099)
	for i := range src {
		for {
			src[i] = math.Float32frombits(rng.Uint32())
			if !math.IsNaN(float64(src[i])) {
				break
			}
		}
	}
	src[0], src[1] = float32(math.Inf(1)), float32(math.Inf(-1))
	dst := make([]uint16, len(src))
	narrowBF16(dst, src)
	for i, f := range src {
		if dst[i] != Float32ToBF16(f) {
			t.Fatalf("%v: %#04x, Float32ToBF16 %#04x", f, dst[i], Float32ToBF16(f))
		}
	}
}
