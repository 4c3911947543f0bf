package quant

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/switchml/switchml-go/wire"
)

// floatsFrom reads little-endian float32s from fuzz bytes, replacing non-finite
// ones (which CheckFinite rejects before any conversion) by zero.
func floatsFrom(data []byte) []float32 {
	x := make([]float32, len(data)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		if math.IsNaN(float64(x[i])) || math.IsInf(float64(x[i]), 0) {
			x[i] = 0
		}
	}
	return x
}

// FuzzQuantize: n workers holding the same block (the worst case for overflow),
// any exponent at or above the block's own.
func FuzzQuantize(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0xff, 0xff, 0x7f, 0x7f}, uint16(3), int8(0))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0x7f, 0x80}, uint16(64), int8(-126))
	f.Add([]byte{0xff, 0xff, 0x7f, 0xff}, uint16(1), int8(127))
	f.Fuzz(func(t *testing.T, data []byte, n16 uint16, extra int8) {
		n := int(n16%1024) + 1
		x := floatsFrom(data)
		E := BlockExponent(x)
		if extra > 0 && int(E)+int(extra)%8 <= int(TopExponent) {
			E += extra % 8
		}
		q := make([]int32, len(x))
		pkt := make([]byte, 4*len(x))
		if Quantize(q, x, n, E) != len(x) || QuantizeBE(pkt, x, n, E) != len(x) {
			t.Fatal("short count")
		}
		sums := make([]int32, len(x))
		lim := int64(Limit(n))
		for j, v := range q {
			if int32(binary.BigEndian.Uint32(pkt[4*j:])) != v {
				t.Fatalf("QuantizeBE and Quantize disagree at %d", j)
			}
			if int64(v) > lim || int64(v) < -lim {
				t.Fatalf("%g -> %d beyond limit %d", x[j], v, lim)
			}
			s := int64(v) * int64(n)
			if s > math.MaxInt32 || s < math.MinInt32 {
				t.Fatalf("%d-way sum of %d overflows", n, v)
			}
			sums[j] = int32(s)
		}
		out := make([]float32, len(x))
		Dequantize(out, sums, n, E)
		bound := ErrorBound(n, E)
		for j := range out {
			exact := float64(n) * float64(x[j]) // exact: n < 2^11, x has 24 bits
			r := float64(out[j])
			if math.IsInf(r, 0) && math.Abs(exact)+bound >= math.MaxFloat32 {
				continue
			}
			if math.Abs(r-exact) > bound {
				t.Fatalf("n=%d E=%d x=%g: result %g, error %g > bound %g", n, E, x[j], r, math.Abs(r-exact), bound)
			}
		}
	})
}

// FuzzDequantize: any payload bytes, any exponent; no panic, both forms agree, and
// the result never exceeds what the largest legal sum could give.
func FuzzDequantize(f *testing.F) {
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0}, uint16(2), int8(5))
	f.Add([]byte{0, 0, 0, 1, 0xff}, uint16(0), int8(-128))
	f.Fuzz(func(t *testing.T, data []byte, n16 uint16, e int8) {
		n := int(n16)
		k := len(data) / 4
		out := make([]float32, k)
		ref := make([]float32, k)
		ints := make([]int32, k)
		if DequantizeBE(out, data, n, e) != k || wire.ReadPayload(ints, data) != k || Dequantize(ref, ints, n, e) != k {
			t.Fatal("short count")
		}
		span := float64(max(n, 1)) * math.Ldexp(1, power(e)) * (1 + 0x1p-20)
		for j := range out {
			if math.Float32bits(out[j]) != math.Float32bits(ref[j]) {
				t.Fatalf("DequantizeBE and Dequantize disagree at %d", j)
			}
			if r := math.Abs(float64(out[j])); math.IsNaN(r) || (!math.IsInf(r, 0) && r > span) {
				t.Fatalf("result %g beyond n*2^E = %g", r, span)
			}
		}
	})
}

// FuzzHalf: float16 and bfloat16 conversions agree with the float32 path on the
// widened values, and round trips are exact.
func FuzzHalf(f *testing.F) {
	f.Add([]byte{0x00, 0x3c, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x7c}, uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, n8 uint8) {
		n := int(n8%64) + 1
		h := make([]uint16, len(data)/2)
		for i := range h {
			h[i] = binary.LittleEndian.Uint16(data[2*i:])
		}
		for _, ft := range []struct {
			widen  func(uint16) float32
			narrow func(float32) uint16
			exp    func([]uint16) int8
			check  func([]uint16) error
			quant  func([]byte, []uint16, int, int8) int
		}{
			{F16ToFloat32, Float32ToF16, BlockExponentF16, CheckFiniteF16, QuantizeF16BE},
			{BF16ToFloat32, Float32ToBF16, BlockExponentBF16, CheckFiniteBF16, QuantizeBF16BE},
		} {
			w := make([]float32, len(h))
			finite := true
			for i, v := range h {
				w[i] = ft.widen(v)
				isNaN := math.IsNaN(float64(w[i]))
				if isNaN || math.IsInf(float64(w[i]), 0) {
					finite = false
				}
				if back := ft.narrow(w[i]); back != v && !isNaN {
					t.Fatalf("round trip %#04x -> %#04x", v, back)
				}
			}
			if (ft.check(h) == nil) != finite {
				t.Fatalf("check disagrees with the widened values")
			}
			if !finite {
				continue
			}
			E := ft.exp(h)
			if E != BlockExponent(w) {
				t.Fatalf("exponent %d, widened %d", E, BlockExponent(w))
			}
			a, b := make([]byte, 4*len(h)), make([]byte, 4*len(h))
			ft.quant(a, h, n, E)
			QuantizeBE(b, w, n, E)
			if string(a) != string(b) {
				t.Fatal("16-bit quantization differs from float32 on widened values")
			}
		}
	})
}
