package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"sort"
	"testing"
)

// refF16 decodes binary16 bits by the definition, in float64.
func refF16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	switch exp {
	case 0x1f:
		if mant != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	case 0:
		return sign * math.Ldexp(mant, -24)
	}
	return sign * math.Ldexp(1+mant/1024, exp-15)
}

func TestF16ToFloat32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := float64(F16ToFloat32(h))
		want := refF16(h)
		if math.IsNaN(want) {
			if !math.IsNaN(got) {
				t.Fatalf("F16ToFloat32(%#04x) = %v, want NaN", h, got)
			}
			continue
		}
		if got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("F16ToFloat32(%#04x) = %v, want %v", h, got, want)
		}
		// Round trip of every float16 through float32 is the identity.
		if back := Float32ToF16(float32(got)); back != h {
			t.Fatalf("Float32ToF16(F16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestBF16Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := BF16ToFloat32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToFloat32(%#04x) = %#08x", h, math.Float32bits(f))
		}
		back := Float32ToBF16(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(BF16ToFloat32(back))) {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("Float32ToBF16(BF16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
}

// nearestRef rounds |x| to the nearest of the sorted finite positive values vals
// (bit patterns 0..len-1), ties to the even bit pattern, overflowing to inf when
// |x| reaches the midpoint between the largest value and the next power of two.
func nearestRef(ax float64, vals []float64, inf uint16, overflowAt float64) uint16 {
	if ax >= overflowAt {
		return inf
	}
	i := sort.SearchFloat64s(vals, ax) // first vals[i] >= ax
	if i < len(vals) && vals[i] == ax {
		return uint16(i)
	}
	if i == len(vals) {
		return uint16(len(vals) - 1) // below the overflow midpoint
	}
	lo, hi := vals[i-1], vals[i]
	switch {
	case ax-lo < hi-ax:
		return uint16(i - 1)
	case ax-lo > hi-ax:
		return uint16(i)
	case (i-1)%2 == 0:
		return uint16(i - 1)
	}
	return uint16(i)
}

func TestFloat32ToHalfRounding(t *testing.T) {
	f16 := make([]float64, 0x7c00)
	for i := range f16 {
		f16[i] = refF16(uint16(i))
	}
	bf16 := make([]float64, 0x7f80)
	for i := range bf16 {
		bf16[i] = float64(BF16ToFloat32(uint16(i)))
	}
	check := func(x float32) {
		ax := math.Abs(float64(x))
		var sign uint16
		if math.Signbit(float64(x)) {
			sign = 0x8000
		}
		if want := sign | nearestRef(ax, f16, 0x7c00, 65520); Float32ToF16(x) != want {
			t.Fatalf("Float32ToF16(%g = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), Float32ToF16(x), want)
		}
		// Midpoint between the largest bfloat16, (2-2^-7)*2^127, and 2^128.
		bfOver := 0x1p128 - 0x1p119
		if want := sign | nearestRef(ax, bf16, 0x7f80, bfOver); Float32ToBF16(x) != want {
			t.Fatalf("Float32ToBF16(%g = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), Float32ToBF16(x), want)
		}
	}
	// Every float16 value, its neighbours and the midpoints between float16
	// values (the ties), plus random float32s of all magnitudes.
	for i := 0; i < 0x7c00; i++ {
		v := float32(f16[i])
		check(v)
		check(-v)
		check(math.Nextafter32(v, 0))
		check(math.Nextafter32(v, 1e9))
		if i+1 < len(f16) {
			mid := float32((f16[i] + f16[i+1]) / 2) // exact in float32
			check(mid)
			check(math.Nextafter32(mid, 0))
			check(math.Nextafter32(mid, 1e9))
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 200000; i++ {
		x := math.Float32frombits(rng.Uint32() & 0xff7fffff)
		if i%2 == 0 {
			x = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-25))
		}
		check(x)
	}
	check(math.MaxFloat32)
	check(65504)
	check(65519.996)
	check(65520)
	if h := Float32ToF16(float32(math.Inf(-1))); h != 0xfc00 {
		t.Errorf("-Inf -> %#04x", h)
	}
	if h := Float32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN -> %#04x", h)
	}
	if h := Float32ToBF16(float32(math.NaN())); h&0x7f80 != 0x7f80 || h&0x7f == 0 {
		t.Errorf("NaN -> %#04x", h)
	}
}

func TestBlockExponentHalf(t *testing.T) {
	blocks := [][]uint16{
		nil,
		{0, 0x8000},
		{0x3c00},
		{0x0001},
		{0x7bff, 0xfbff},
		{0x3f80, 0xbf80},
		{0x7f7f},
		{0x0080, 0x0001, 0x8000},
		{0x03ff, 0x0400, 0x8001},
	}
	for _, x := range blocks {
		// Reference: widen and use the float32 function.
		wf := make([]float32, len(x))
		wb := make([]float32, len(x))
		for i, h := range x {
			wf[i] = F16ToFloat32(h)
			wb[i] = BF16ToFloat32(h)
		}
		if got, want := BlockExponentF16(x), BlockExponent(wf); got != want {
			t.Errorf("BlockExponentF16(%#04x) = %d, want %d", x, got, want)
		}
		if got, want := BlockExponentBF16(x), BlockExponent(wb); got != want {
			t.Errorf("BlockExponentBF16(%#04x) = %d, want %d", x, got, want)
		}
	}
	// Direct values, independent of BlockExponent.
	if e := BlockExponentF16([]uint16{0x3c00}); e != 1 {
		t.Errorf("f16 1.0 -> %d, want 1", e)
	}
	if e := BlockExponentF16([]uint16{0x0001}); e != -23 {
		t.Errorf("f16 2^-24 -> %d, want -23", e)
	}
	if e := BlockExponentF16([]uint16{0x7bff}); e != 16 {
		t.Errorf("f16 65504 -> %d, want 16", e)
	}
	if e := BlockExponentBF16([]uint16{0x3f80}); e != 1 {
		t.Errorf("bf16 1.0 -> %d, want 1", e)
	}
	if e := BlockExponentBF16([]uint16{0x7f7f}); e != TopExponent {
		t.Errorf("bf16 max -> %d, want %d", e, TopExponent)
	}
}

func TestCheckFiniteHalf(t *testing.T) {
	x := make([]uint16, 100)
	for i := range x {
		x[i] = uint16(i) * 0x133 & 0x7bff // finite in both formats
	}
	if err := CheckFiniteF16(x); err != nil {
		t.Fatal(err)
	}
	if err := CheckFiniteBF16(x); err != nil {
		t.Fatal(err)
	}
	var nf *NonFiniteError
	y := append([]uint16(nil), x...)
	y[42], y[50] = 0xfc00, 0x7e00 // f16 -Inf, NaN
	if err := CheckFiniteF16(y); !errors.As(err, &nf) || nf.Index != 42 || !math.IsInf(float64(nf.Value), -1) || nf.Type != "float16" {
		t.Fatalf("CheckFiniteF16: %v", err)
	}
	z := append([]uint16(nil), x...)
	z[7], z[9] = 0x7fc0, 0xff80 // bf16 NaN, -Inf
	if err := CheckFiniteBF16(z); !errors.As(err, &nf) || nf.Index != 7 || !math.IsNaN(float64(nf.Value)) || nf.Type != "bfloat16" {
		t.Fatalf("CheckFiniteBF16: %v", err)
	}
	// 0x7c00 is a finite bfloat16 and 0x7f80 is Inf in both.
	if err := CheckFiniteBF16([]uint16{0x7c00}); err != nil {
		t.Fatalf("bf16 0x7c00 is finite: %v", err)
	}
}

// TestHalfAllReduce runs the n-way pipeline with float16 and bfloat16 tensors.
func TestHalfAllReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	type format struct {
		name   string
		widen  func(uint16) float32
		exp    func([]uint16) int8
		check  func([]uint16) error
		quant  func([]byte, []uint16, int, int8) int
		dequan func([]uint16, []byte, int, int8) int
		bound  func(int, int8) float64
		max    float64
		gen    func() uint16
	}
	formats := []format{
		{"float16", F16ToFloat32, BlockExponentF16, CheckFiniteF16, QuantizeF16BE, DequantizeF16BE, ErrorBoundF16, 65504, func() uint16 {
			switch rng.IntN(4) {
			case 0:
				return uint16(rng.IntN(0x400)) | uint16(rng.IntN(2))<<15 // denormals
			case 1:
				return Float32ToF16(float32(rng.NormFloat64()))
			}
			return uint16(rng.IntN(0x7c00)) | uint16(rng.IntN(2))<<15
		}},
		{"bfloat16", BF16ToFloat32, BlockExponentBF16, CheckFiniteBF16, QuantizeBF16BE, DequantizeBF16BE, ErrorBoundBF16, float64(BF16ToFloat32(0x7f7f)), func() uint16 {
			if rng.IntN(2) == 0 {
				return Float32ToBF16(float32(rng.NormFloat64() * 1e-3))
			}
			return uint16(rng.IntN(0x7f80)) | uint16(rng.IntN(2))<<15
		}},
	}
	for _, ft := range formats {
		for _, n := range []int{1, 2, 3, 8, 17, 64} {
			for iter := 0; iter < 60; iter++ {
				k := 1 + rng.IntN(100)
				blocks := make([][]uint16, n)
				wide := make([][]float32, n)
				E := MinExponent
				for w := range blocks {
					blocks[w] = make([]uint16, k)
					wide[w] = make([]float32, k)
					for j := range blocks[w] {
						blocks[w][j] = ft.gen()
						wide[w][j] = ft.widen(blocks[w][j])
					}
					if err := ft.check(blocks[w]); err != nil {
						t.Fatal(err)
					}
					if ft.exp(blocks[w]) != BlockExponent(wide[w]) {
						t.Fatalf("%s exponent differs from the widened block's", ft.name)
					}
					E = MaxExponent(E, ft.exp(blocks[w]))
				}
				sums := make([]int64, k)
				pkt := make([]byte, 4*k)
				ref := make([]byte, 4*k)
				for w := range blocks {
					ft.quant(pkt, blocks[w], n, E)
					QuantizeBE(ref, wide[w], n, E)
					if string(pkt) != string(ref) {
						t.Fatalf("%s quantization differs from float32 quantization of the widened values", ft.name)
					}
					for j := range sums {
						v := int64(int32(binary.BigEndian.Uint32(pkt[4*j:])))
						if v > int64(Limit(n)) || v < -int64(Limit(n)) {
							t.Fatalf("%s: %d beyond limit", ft.name, v)
						}
						sums[j] += v
					}
				}
				for j, s := range sums {
					if s > math.MaxInt32 || s < math.MinInt32 {
						t.Fatalf("%s: sum overflows", ft.name)
					}
					binary.BigEndian.PutUint32(pkt[4*j:], uint32(int32(s)))
				}
				out := make([]uint16, k)
				ft.dequan(out, pkt, n, E)
				f32 := make([]float32, k)
				DequantizeBE(f32, pkt, n, E)
				for j := range out {
					exact := new(big.Float).SetPrec(1024)
					for w := range wide {
						exact.Add(exact, new(big.Float).SetFloat64(float64(wide[w][j])))
					}
					r := float64(ft.widen(out[j]))
					checkResult(t, ft.name, r, exact, ft.bound(n, E), ft.max)
				}
			}
		}
	}
}
