package quant

import (
	"math"
)

// float16 (IEEE binary16) and bfloat16 values travel as raw bits in uint16. Both
// widen exactly to float32 and share the float32 int32 representation.

// F16ToFloat32 widens IEEE binary16 bits to float32 exactly (NaN stays NaN).
func F16ToFloat32(h uint16) float32 {
	// Shifting exponent and mantissa into float32 position gives the value times
	// 2^-112 (the bias difference 127-15); denormals come out as float32 denormals
	// of the right value, so one multiplication by 2^112 fixes every finite case.
	f := math.Float32frombits(uint32(h&0x7fff)<<13) * 0x1p112
	b := math.Float32bits(f)
	if h&0x7c00 == 0x7c00 {
		b |= 0x7f800000 // Inf/NaN: the multiplication left a finite exponent
	}
	return math.Float32frombits(b | uint32(h&0x8000)<<16)
}

// Float32ToF16 rounds a float32 to the nearest IEEE binary16 (ties to even).
// Values beyond the float16 range become ±Inf; NaN stays a (quiet) NaN.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	b &= 0x7fffffff
	switch {
	case b >= 0x47800000: // >= 65536, Inf or NaN
		if b > 0x7f800000 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case b < 0x38800000: // below 2^-14: float16 denormal or zero
		// Adding 0.5 in float32 leaves round(|f| * 2^24) in the low mantissa bits:
		// the float32 adder does the ties-to-even rounding.
		r := math.Float32frombits(b) + 0.5
		return sign | uint16(math.Float32bits(r)-0x3f000000)
	default:
		// Rebias the exponent and round the 13 dropped bits to nearest even; a
		// mantissa carry moves into the exponent, up to Inf for [65520, 65536).
		b = b - (127-15)<<23 + 0xfff + (b>>13)&1
		return sign | uint16(b>>13)
	}
}

// BF16ToFloat32 widens bfloat16 bits to float32 exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 rounds a float32 to the nearest bfloat16 (ties to even). Values
// beyond the bfloat16 range become ±Inf; NaN stays a (quiet) NaN.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BlockExponentF16 is BlockExponent for float16 bits. A zero block has
// MinExponent; float16 denormals get their exact exponent.
func BlockExponentF16(x []uint16) int8 {
	e, _ := FiniteBlockExponentF16(x)
	return e
}

// BlockExponentBF16 is BlockExponent for bfloat16 bits.
func BlockExponentBF16(x []uint16) int8 {
	e, _ := FiniteBlockExponentBF16(x)
	return e
}

// FiniteBlockExponentF16 is BlockExponentF16 and CheckFiniteF16 in one
// pass: a NaN or Inf is the largest magnitude there is, so the block is
// finite exactly when its largest magnitude is (finite false: the exponent
// is unspecified, and CheckFiniteF16 names the value).
func FiniteBlockExponentF16(x []uint16) (e int8, finite bool) {
	m := maxMagnitude16(x)
	return exponentOfBits(math.Float32bits(F16ToFloat32(m))), m < 0x7c00
}

// FiniteBlockExponentBF16 is FiniteBlockExponentF16 for bfloat16 bits.
func FiniteBlockExponentBF16(x []uint16) (e int8, finite bool) {
	m := maxMagnitude16(x)
	return exponentOfBits(uint32(m) << 16), m < 0x7f80
}

// maxMagnitude16 is the largest of the 16-bit floats' bits with the sign
// cleared, four lanes at a time.
func maxMagnitude16(x []uint16) uint16 {
	m0, k := maxMagnitude16Fast(x)
	x = x[k:]
	var m1, m2, m3 uint16
	for len(x) >= 4 {
		m0 = max(m0, x[0]&0x7fff)
		m1 = max(m1, x[1]&0x7fff)
		m2 = max(m2, x[2]&0x7fff)
		m3 = max(m3, x[3]&0x7fff)
		x = x[4:]
	}
	for _, h := range x {
		m0 = max(m0, h&0x7fff)
	}
	return max(m0, m1, m2, m3)
}

// CheckFiniteF16 is CheckFinite for float16 bits.
func CheckFiniteF16(x []uint16) error {
	for i, h := range x {
		if h&0x7c00 == 0x7c00 {
			return &NonFiniteError{Index: i, Value: F16ToFloat32(h), Type: "float16"}
		}
	}
	return nil
}

// CheckFiniteBF16 is CheckFinite for bfloat16 bits.
func CheckFiniteBF16(x []uint16) error {
	for i, h := range x {
		if h&0x7f80 == 0x7f80 {
			return &NonFiniteError{Index: i, Value: BF16ToFloat32(h), Type: "bfloat16"}
		}
	}
	return nil
}

// halfChunk is how many 16-bit elements are widened into a stack buffer at a
// time, so that the float32 kernels (vectorised where possible) do the scaling.
const halfChunk = 512

// QuantizeF16BE is QuantizeBE for float16 bits: it converts
// min(len(dst)/4, len(src)) elements and returns that count. The result equals
// QuantizeBE of the widened values.
func QuantizeF16BE(dst []byte, src []uint16, n int, e int8) int {
	return quantizeHalf(dst, src, n, e, false, false)
}

// QuantizeBF16BE is QuantizeBE for bfloat16 bits: it converts
// min(len(dst)/4, len(src)) elements and returns that count. The result equals
// QuantizeBE of the widened values.
func QuantizeBF16BE(dst []byte, src []uint16, n int, e int8) int {
	return quantizeHalf(dst, src, n, e, true, false)
}

// quantizeHalf converts 16-bit floats (bf16: bfloat16, else float16)
// through a stack buffer of float32, a chunk at a time, into the 32-bit
// wire's payload or, with pairs, the 16-bit wire's; it returns the values
// converted. The switches sit outside the element loops so the
// conversions inline.
func quantizeHalf(dst []byte, src []uint16, n int, e int8, bf16, pairs bool) int {
	v, start := min(len(dst)/4, len(src)), 0
	if pairs {
		v = min(len(src), 2*(len(dst)/4))
		start = quantizeHalfPairsFast(dst, src[:v], newQuantizer16(n, e), bf16)
	}
	var buf [halfChunk]float32 // even, so that pair chunks start on a word
	for done := start; done < v; done += halfChunk {
		c := min(halfChunk, v-done)
		w := buf[:c]
		if bf16 {
			widenBF16(w, src[done:done+c])
		} else {
			for i, h := range src[done : done+c] {
				w[i] = F16ToFloat32(h)
			}
		}
		if pairs {
			QuantizePairsBE(dst[2*done:], w, n, e)
		} else {
			QuantizeBE(dst[4*done:4*(done+c)], w, n, e)
		}
	}
	return v
}

// DequantizeF16BE is DequantizeBE with float16 output (the float32 result rounded
// to nearest even): it converts min(len(dst), len(src)/4) elements and returns
// that count.
func DequantizeF16BE(dst []uint16, src []byte, n int, e int8) int {
	return dequantizeHalf(dst, src, n, e, false, false)
}

// DequantizeBF16BE is DequantizeBE with bfloat16 output (the float32 result
// rounded to nearest even): it converts min(len(dst), len(src)/4) elements and
// returns that count.
func DequantizeBF16BE(dst []uint16, src []byte, n int, e int8) int {
	return dequantizeHalf(dst, src, n, e, true, false)
}

// dequantizeHalf is quantizeHalf's counterpart: the sums of src, of
// either wire, through float32, rounded to the 16-bit type.
func dequantizeHalf(dst []uint16, src []byte, n int, e int8, bf16, pairs bool) int {
	v, start := min(len(dst), len(src)/4), 0
	if pairs {
		v = min(len(dst), 2*(len(src)/4))
		start = dequantizeHalfPairsFast(dst[:v], src, invScale16(n, e), bf16)
	}
	var buf [halfChunk]float32
	for done := start; done < v; done += halfChunk {
		c := min(halfChunk, v-done)
		w := buf[:c]
		if pairs {
			DequantizePairsBE(w, src[2*done:], n, e)
		} else {
			DequantizeBE(w, src[4*done:4*(done+c)], n, e)
		}
		d := dst[done : done+c]
		if bf16 {
			narrowBF16(d, w)
		} else {
			for i, f := range w {
				d[i] = Float32ToF16(f)
			}
		}
	}
	return v
}
