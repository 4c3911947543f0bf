package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/switchml/switchml-go/wire"
)

func TestBlockExponent(t *testing.T) {
	minDenorm := math.Float32frombits(1)
	maxDenorm := math.Float32frombits(0x007fffff)
	minNormal := float32(0x1p-126)
	cases := []struct {
		name string
		x    []float32
		want int8
	}{
		{"empty", nil, MinExponent},
		{"zeros", []float32{0, 0, 0}, MinExponent},
		{"negative zero", []float32{float32(math.Copysign(0, -1))}, MinExponent},
		{"smallest denormal", []float32{minDenorm}, MinExponent},
		{"largest denormal", []float32{-maxDenorm}, MinExponent},
		{"smallest normal", []float32{minNormal}, -125},
		{"one", []float32{1}, 1},
		{"just below one", []float32{math.Nextafter32(1, 0)}, 0},
		{"half", []float32{0.5}, 0},
		{"1.5", []float32{1.5}, 1},
		{"minus two wins", []float32{1, -2, 0.25}, 2},
		{"max in tail", []float32{1, 1, 1, 1, 1, 1, 1, 1024}, 11},
		{"1e-30", []float32{1e-30}, -99},
		{"1e30", []float32{1e30}, 100},
		{"2^125", []float32{0x1p125}, 126},
		{"2^126 shares the top code", []float32{0x1p126}, TopExponent},
		{"max float32", []float32{1, math.MaxFloat32}, TopExponent},
		{"minus max float32", []float32{-math.MaxFloat32}, TopExponent},
	}
	for _, c := range cases {
		if got := BlockExponent(c.x); got != c.want {
			t.Errorf("%s: BlockExponent(%v) = %d, want %d", c.name, c.x, got, c.want)
		}
	}
}

// TestBlockExponentProperty checks 2^E > max|x| >= 2^(E-1) on random blocks of
// every magnitude, against a float64 computation that shares no code.
func TestBlockExponentProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 20000; iter++ {
		x := make([]float32, 1+rng.IntN(70))
		m := 0.0
		for i := range x {
			x[i] = math.Float32frombits(rng.Uint32() & 0xff7fffff) // never Inf/NaN
			m = max(m, math.Abs(float64(x[i])))
		}
		e := BlockExponent(x)
		p := power(e)
		if !(math.Ldexp(1, p) > m) {
			t.Fatalf("BlockExponent = %d but max|x| = %g is not below 2^%d", e, m, p)
		}
		if e != MinExponent && e != TopExponent && !(math.Ldexp(1, p-1) <= m) {
			t.Fatalf("BlockExponent = %d is not tight for max|x| = %g", e, m)
		}
		if e == MinExponent && m >= 0x1p-126 {
			t.Fatalf("MinExponent for normal max %g", m)
		}
		if e == TopExponent && m < 0x1p126 {
			t.Fatalf("TopExponent for max %g", m)
		}
	}
}

func TestMaxExponent(t *testing.T) {
	if MaxExponent(-126, 3) != 3 || MaxExponent(127, -5) != 127 || MaxExponent(-7, -9) != -7 {
		t.Fatal("MaxExponent is not max")
	}
}

// TestPow2 checks the bit-built power of two against math.Ldexp for every
// exponent code, including those only a damaged packet carries.
func TestPow2(t *testing.T) {
	for c := -128; c <= 127; c++ {
		e := int8(c)
		if got, want := pow2(e), math.Ldexp(1, power(e)); got != want {
			t.Fatalf("pow2(%d) = %v, want %v", e, got, want)
		}
	}
}

func TestScale(t *testing.T) {
	if got := Scale(1, 0); got != fullScale {
		t.Errorf("Scale(1, 0) = %v, want 2^31-1", got)
	}
	if got, want := Scale(4, 3), float64(fullScale)/32; got != want {
		t.Errorf("Scale(4, 3) = %v, want %v", got, want)
	}
	if got, want := Scale(1, MinExponent), float64(fullScale)*0x1p126; got != want {
		t.Errorf("Scale(1, -126) = %v, want %v", got, want)
	}
	if got, want := Scale(1, TopExponent), float64(fullScale)*0x1p-128; got != want {
		t.Errorf("Scale(1, 127) = %v, want %v (code 127 means 2^128)", got, want)
	}
	if Scale(0, 0) != Scale(1, 0) || Scale(-5, 0) != Scale(1, 0) {
		t.Error("n < 1 must count as 1")
	}
	if Limit(1) != math.MaxInt32 || Limit(2) != 1073741823 || Limit(64) != 33554431 || Limit(0) != math.MaxInt32 {
		t.Error("Limit is not floor((2^31-1)/n)")
	}
}

// TestKnownBytes pins the wire layout: big-endian two's complement, ties to even.
func TestKnownBytes(t *testing.T) {
	// n=1, E=1: f = (2^31-1)/2, so 1.0 -> 1073741823.5 -> 1073741824 (even),
	// -0.5 -> -536870911.75 -> -536870912.
	src := []float32{1, -0.5, 0, 0x1p-40}
	got := make([]byte, 16)
	if k := QuantizeBE(got, src, 1, 1); k != 4 {
		t.Fatalf("QuantizeBE returned %d", k)
	}
	want := []byte{0x40, 0, 0, 0, 0xe0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if string(got) != string(want) {
		t.Fatalf("QuantizeBE = % x, want % x", got, want)
	}
	back := make([]float32, 4)
	DequantizeBE(back, got, 1, 1)
	if back[0] != 1 || back[1] != -0.5 || back[2] != 0 || back[3] != 0 {
		t.Fatalf("DequantizeBE = %v", back)
	}
}

func TestRoundHalfEven(t *testing.T) {
	// n=1, E=31: f = (2^31-1)/2^31, so x*f = x - x/2^31. Pick E so that f = 1
	// exactly is impossible; instead check ties through Quantize against a float64
	// reference on values whose product is exact.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		n := 1 + rng.IntN(64)
		e := int8(rng.IntN(254) - 126)
		x := float32(rng.NormFloat64()) * float32(math.Ldexp(1, power(e)-3))
		if math.Abs(float64(x)) >= math.Ldexp(1, power(e)) {
			continue
		}
		var q [1]int32
		Quantize(q[:], []float32{x}, n, e)
		want := math.RoundToEven(float64(x) * Scale(n, e))
		if float64(q[0]) != want {
			t.Fatalf("Quantize(%g, n=%d, e=%d) = %d, want %v", x, n, e, q[0], want)
		}
	}
}

// magnitude classes for the property tests.
var classes = []struct {
	name string
	gen  func(r *rand.Rand) float32
}{
	{"normal", func(r *rand.Rand) float32 { return float32(r.NormFloat64()) }},
	{"denormal", func(r *rand.Rand) float32 { return randSign(r) * math.Float32frombits(r.Uint32()&0x007fffff) }},
	{"1e-30", func(r *rand.Rand) float32 { return float32(r.NormFloat64() * 1e-30) }},
	{"1e30", func(r *rand.Rand) float32 { return float32(r.NormFloat64() * 1e30) }},
	{"powers of two", func(r *rand.Rand) float32 { return randSign(r) * float32(math.Ldexp(1, r.IntN(20)-10)) }},
	{"max float32", func(r *rand.Rand) float32 {
		return randSign(r) * math.Float32frombits(0x7f7fffff-uint32(r.IntN(3))*0x00400000)
	}},
	{"huge mixed", func(r *rand.Rand) float32 { return float32(r.NormFloat64() * 1e37) }},
	{"any exponent", func(r *rand.Rand) float32 { return math.Float32frombits(r.Uint32() & 0xff7fffff) }},
	{"zeros", func(r *rand.Rand) float32 { return 0 }},
	{"sparse", func(r *rand.Rand) float32 {
		if r.IntN(4) == 0 {
			return float32(r.NormFloat64() * 1e3)
		}
		return 0
	}},
}

func randSign(r *rand.Rand) float32 {
	if r.IntN(2) == 0 {
		return -1
	}
	return 1
}

// exactSum returns the exact real sum of the column j of blocks.
func exactSum(blocks [][]float32, j int) *big.Float {
	s := new(big.Float).SetPrec(1024)
	for _, b := range blocks {
		s.Add(s, new(big.Float).SetFloat64(float64(b[j])))
	}
	return s
}

// checkResult asserts |r - T| <= bound, or a legitimate overflow when T is at the
// edge of the output range.
func checkResult(t *testing.T, what string, r float64, exact *big.Float, bound, maxFinite float64) {
	t.Helper()
	tf, _ := exact.Float64()
	if math.IsInf(r, 0) {
		if math.Abs(tf)+bound < maxFinite || math.Signbit(r) != math.Signbit(tf) {
			t.Fatalf("%s: result %v but exact sum %g is within range (bound %g)", what, r, tf, bound)
		}
		return
	}
	if math.IsNaN(r) {
		t.Fatalf("%s: NaN result for exact sum %g", what, tf)
	}
	d := new(big.Float).SetPrec(1024).Sub(new(big.Float).SetFloat64(r), exact)
	df, _ := d.Float64()
	if math.Abs(df) > bound {
		t.Fatalf("%s: result %v, exact %g, error %g > bound %g", what, r, tf, math.Abs(df), bound)
	}
}

// TestAllReduceProperty simulates n workers end to end: local exponents, switch
// max, quantization, int32 sums (in int64 to see overflow), dequantization.
func TestAllReduceProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ns := []int{1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 63, 64}
	iters := 40
	if testing.Short() {
		iters = 8
	}
	for _, n := range ns {
		for _, class := range classes {
			for iter := 0; iter < iters; iter++ {
				k := 1 + rng.IntN(130)
				allReduceOnce(t, rng, n, k, func(r *rand.Rand, w int) float32 {
					// Mix classes across workers now and then, so E comes from
					// another worker than the element's own.
					if iter%4 == 3 && w%2 == 1 {
						return classes[r.IntN(len(classes))].gen(r)
					}
					return class.gen(r)
				}, class.name)
			}
		}
	}
	// Beyond 128 workers the clamp can bite; the bound says so.
	for _, n := range []int{100, 128, 129, 255, 1000} {
		for iter := 0; iter < 3; iter++ {
			allReduceOnce(t, rng, n, 17, func(r *rand.Rand, w int) float32 {
				if r.IntN(3) == 0 {
					return randSign(r) * math.Nextafter32(4, 0)
				}
				return classes[r.IntN(len(classes))].gen(r)
			}, "large n")
		}
	}
}

func allReduceOnce(t *testing.T, rng *rand.Rand, n, k int, gen func(*rand.Rand, int) float32, name string) {
	t.Helper()
	blocks := make([][]float32, n)
	E := MinExponent
	for w := range blocks {
		blocks[w] = make([]float32, k)
		for j := range blocks[w] {
			blocks[w][j] = gen(rng, w)
		}
		if err := CheckFinite(blocks[w]); err != nil {
			t.Fatal(err)
		}
		E = MaxExponent(E, BlockExponent(blocks[w]))
	}
	sums := make([]int64, k)
	q := make([]int32, k)
	pkt := make([]byte, 4*k)
	lim := int64(Limit(n))
	for w, b := range blocks {
		Quantize(q, b, n, E)
		QuantizeBE(pkt, b, n, E)
		for j, v := range q {
			if got := int32(binary.BigEndian.Uint32(pkt[4*j:])); got != v {
				t.Fatalf("%s: QuantizeBE[%d] = %d, Quantize = %d", name, j, got, v)
			}
			if int64(v) > lim || int64(v) < -lim {
				t.Fatalf("%s n=%d E=%d: worker %d value %g quantized to %d, beyond limit %d", name, n, E, w, b[j], v, lim)
			}
			sums[j] += int64(v)
		}
	}
	sum32 := make([]int32, k)
	for j, s := range sums {
		if s > math.MaxInt32 || s < math.MinInt32 {
			t.Fatalf("%s n=%d E=%d: sum %d overflows int32", name, n, E, s)
		}
		sum32[j] = int32(s)
	}
	wire.PutPayload(pkt, sum32)
	out := make([]float32, k)
	outBE := make([]float32, k)
	Dequantize(out, sum32, n, E)
	DequantizeBE(outBE, pkt, n, E)
	bound := ErrorBound(n, E)
	for j := range out {
		if math.Float32bits(out[j]) != math.Float32bits(outBE[j]) {
			t.Fatalf("%s: DequantizeBE[%d] = %v, Dequantize = %v", name, j, outBE[j], out[j])
		}
		checkResult(t, name, float64(out[j]), exactSum(blocks, j), bound, math.MaxFloat32)
	}
}

// TestEdgeOfRange puts the largest float32 below 2^E in every worker's block for
// every exponent code: the place where rounding up could overflow.
func TestEdgeOfRange(t *testing.T) {
	ns := []int{1, 2, 3, 5, 7, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, math.MaxInt32}
	for e := int(MinExponent); e <= int(TopExponent); e++ {
		top := math.Nextafter32(float32(math.Ldexp(1, power(int8(e)))), 0)
		if e == int(TopExponent) {
			top = math.MaxFloat32
		}
		for _, n := range ns {
			var q [2]int32
			Quantize(q[:], []float32{top, -top}, n, int8(e))
			lim := Limit(n)
			if q[0] > lim || q[1] < -lim || q[0] != -q[1] {
				t.Fatalf("e=%d n=%d: %g -> %d, %d beyond limit %d", e, n, top, q[0], q[1], lim)
			}
			if int64(q[0])*int64(n) > math.MaxInt32 {
				t.Fatalf("e=%d n=%d: n-way sum of %d overflows", e, n, q[0])
			}
			if n <= 128 && float64(q[0]) < float64(lim)*(1-0x1p-23) {
				t.Fatalf("e=%d n=%d: largest value quantized to %d, far below limit %d", e, n, q[0], lim)
			}
		}
	}
}

// TestWrongExponentClamps: a caller (or peer) exponent below the data's must not
// wrap around to the opposite sign.
func TestWrongExponentClamps(t *testing.T) {
	src := []float32{1000, -1000, math.MaxFloat32, -math.MaxFloat32}
	for _, n := range []int{1, 3, 64} {
		q := make([]int32, 4)
		Quantize(q, src, n, 0)
		lim := Limit(n)
		if q[0] != lim || q[1] != -lim || q[2] != lim || q[3] != -lim {
			t.Fatalf("n=%d: got %v, want ±%d", n, q, lim)
		}
	}
}

// TestSmallValuesLosePrecision documents the absolute (not relative) error for
// values far below the block maximum.
func TestSmallValuesLosePrecision(t *testing.T) {
	const n = 8
	block := []float32{1, 0x1p-28 * 0.99, 0x1p-27, 1e-6, 3e-7}
	E := BlockExponent(block)
	if E != 1 {
		t.Fatalf("E = %d", E)
	}
	q := make([]int32, len(block))
	Quantize(q, block, n, E)
	if q[1] != 0 {
		t.Errorf("value below n*2^E/2^32 = 2^-28 quantized to %d, want 0", q[1])
	}
	if q[2] == 0 {
		t.Errorf("2^-27 vanished; only values below 2^-28 should")
	}
	out := make([]float32, len(block))
	Dequantize(out, q, n, E) // one worker's share, seen through an 8-worker scale
	step := 1 / Scale(n, E)
	for j, x := range block {
		abs := math.Abs(float64(out[j]) - float64(x))
		if abs > 0.5*step+ErrorBound(1, E) {
			t.Errorf("x=%g: absolute error %g beyond half a step %g", x, abs, 0.5*step)
		}
	}
	// 3e-7 keeps only about 7 bits: relative error far above float32's 2^-24,
	// yet within the absolute bound.
	rel := math.Abs(float64(out[4])-3e-7) / 3e-7
	if rel < 1e-5 {
		t.Errorf("3e-7 came back with relative error %g; expected a visible loss", rel)
	}
}

func TestErrorBound(t *testing.T) {
	// n=1, E=0: 2^0 * (1/(2*(2^31-1)) + 2^-24 + 2^-50)
	want := 1/(2*float64(fullScale)) + 0x1p-24 + 0x1p-50
	if got := ErrorBound(1, 0); got != want {
		t.Errorf("ErrorBound(1, 0) = %g, want %g", got, want)
	}
	if got, want := ErrorBound(64, 10), 64*1024*(64/(2*float64(fullScale))+0x1p-24+0x1p-50); got != want {
		t.Errorf("ErrorBound(64, 10) = %g, want %g", got, want)
	}
	if got, want := ErrorBound(129, 0), 129*(129/float64(fullScale)+0x1p-24+0x1p-50); got != want {
		t.Errorf("quantization term must double beyond 128 workers")
	}
	if b := ErrorBound(1, TopExponent); math.IsInf(b, 0) || b < 0x1p104 {
		t.Errorf("ErrorBound(1, 127) = %g, want about 2^104", b)
	}
}

func TestShortBuffers(t *testing.T) {
	src := []float32{1, 2, 3, 4, 5}
	dst := make([]byte, 4*3+2)
	for i := range dst {
		dst[i] = 0xaa
	}
	if k := QuantizeBE(dst, src, 1, 4); k != 3 {
		t.Fatalf("QuantizeBE wrote %d elements, want 3", k)
	}
	if dst[12] != 0xaa || dst[13] != 0xaa {
		t.Fatal("QuantizeBE wrote past the last whole element")
	}
	out := make([]float32, 10)
	if k := DequantizeBE(out, dst, 1, 4); k != 3 {
		t.Fatalf("DequantizeBE read %d elements, want 3", k)
	}
	if out[3] != 0 || out[2] != 3 {
		t.Fatalf("DequantizeBE = %v", out)
	}
	if k := Quantize(make([]int32, 2), src, 1, 4); k != 2 {
		t.Fatalf("Quantize = %d", k)
	}
	if k := Dequantize(out[:1], []int32{1, 2}, 1, 4); k != 1 {
		t.Fatalf("Dequantize = %d", k)
	}
}

func TestCheckFinite(t *testing.T) {
	if err := CheckFinite(nil); err != nil {
		t.Fatal(err)
	}
	ok := make([]float32, 1000)
	for i := range ok {
		ok[i] = float32(i) - 500
	}
	ok[7] = math.MaxFloat32
	ok[8] = math.Float32frombits(1)
	if err := CheckFinite(ok); err != nil {
		t.Fatalf("finite tensor: %v", err)
	}
	bads := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for _, bad := range bads {
		for _, at := range []int{0, 255, 256, 300, 999} {
			x := append([]float32(nil), ok...)
			x[at] = bad
			if at < 999 {
				x[999] = float32(math.NaN()) // a later one must not win
			}
			err := CheckFinite(x)
			var nf *NonFiniteError
			if !errors.As(err, &nf) {
				t.Fatalf("CheckFinite with %v at %d: %v", bad, at, err)
			}
			if nf.Index != at || math.Float32bits(nf.Value) != math.Float32bits(bad) || nf.Type != "float32" {
				t.Fatalf("CheckFinite with %v at %d: got %+v", bad, at, nf)
			}
		}
	}
}

// The word-at-a-time scan agrees with the element test for every exponent
// field and sign, at every position of the unrolled loop and its tail.
func TestAnyNonFiniteEveryExponent(t *testing.T) {
	for field := uint32(0); field < 256; field++ {
		for _, low := range []uint32{0, 1, 0x400000, 0x7fffff} {
			for _, sign := range []uint32{0, 1 << 31} {
				v := math.Float32frombits(sign | field<<23 | low)
				want := field == 255
				for n := 1; n <= 9; n++ {
					for at := 0; at < n; at++ {
						x := make([]float32, n)
						for i := range x {
							x[i] = math.Float32frombits(0x7f7fffff) // the largest finite
						}
						x[at] = v
						if got := anyNonFinite(x); got != want {
							t.Fatalf("bits %#08x at %d of %d: anyNonFinite = %v, want %v", math.Float32bits(v), at, n, got, want)
						}
					}
				}
			}
		}
	}
}

// The vector scan and the plain loop find the same largest magnitude,
// wherever it sits and whatever its sign.
func TestMaxAbsBitsEveryPosition(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for n := 0; n <= 70; n++ {
		for at := 0; at < max(n, 1); at++ {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			if n > 0 {
				x[at] = -1e30 // the largest, negative
			}
			var want uint32
			for _, v := range x {
				want = max(want, math.Float32bits(v)&0x7fffffff)
			}
			if got := maxAbsBits(x); got != want {
				t.Fatalf("n=%d, largest at %d: maxAbsBits = %#x, want %#x", n, at, got, want)
			}
		}
	}
}

// TestBlockExponents checks the one-pass scan against BlockExponent per
// block and CheckFinite over the whole tensor, for block sizes that do and
// do not divide the length, with a NaN or Inf placed anywhere.
func TestBlockExponents(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		n := rng.IntN(5000)
		k := []int{1, 7, 8, 64, 256, 2048}[rng.IntN(6)]
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(60)-30))
		}
		if n > 0 && trial%3 == 0 {
			bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[trial%9/3]
			x[rng.IntN(n)] = bad
			if trial%2 == 0 {
				x[rng.IntN(n)] = bad
			}
		}
		exps := make([]int8, (n+k-1)/k)
		err := BlockExponents(exps, x, k)
		want := CheckFinite(x)
		if fmt.Sprint(err) != fmt.Sprint(want) {
			t.Fatalf("trial %d (n %d, k %d): error %v, want %v", trial, n, k, err, want)
		}
		if err != nil {
			continue
		}
		for b := range exps {
			if w := BlockExponent(x[b*k : min(b*k+k, n)]); exps[b] != w {
				t.Fatalf("trial %d (n %d, k %d): block %d exponent %d, want %d", trial, n, k, b, exps[b], w)
			}
		}
	}
	if err := BlockExponents(make([]int8, 1), make([]float32, 10), 8); err == nil {
		t.Fatal("too few exponents accepted")
	}
	if err := BlockExponents(nil, nil, 0); err == nil {
		t.Fatal("block size 0 accepted")
	}
}
