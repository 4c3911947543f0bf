package quant

import (
	"fmt"
	"math"
)

// MinExponent is the exponent of a block of zeros (and of denormals): 2^-126 is
// above every float32 denormal.
const MinExponent int8 = -126

// TopExponent is the largest exponent code. It stands for 2^128 (see the package
// documentation), so that blocks holding values up to math.MaxFloat32 still fit.
const TopExponent int8 = 127

// fullScale is the int32 range shared by the n workers: 2^31 - 1.
const fullScale = 1<<31 - 1

// power returns the power of two that the exponent code e stands for.
func power(e int8) int {
	if e == TopExponent {
		return 128
	}
	return int(e)
}

// pow2 is 2^power(e), built from its bits (every code is a normal float64).
func pow2(e int8) float64 { return math.Float64frombits(uint64(1023+power(e)) << 52) }

// exponentOfBits maps the bits of a non-negative finite float32 to its block
// exponent code: the IEEE exponent field minus 126, at least MinExponent (zero and
// denormals), at most TopExponent (the field values 253 and 254 share code 127).
func exponentOfBits(b uint32) int8 {
	field := int(b>>23) & 0xff
	if field == 0 {
		return MinExponent
	}
	e := field - 126
	if e > int(TopExponent) {
		e = int(TopExponent)
	}
	return int8(e)
}

// BlockExponent returns the exponent code e of the block: 2^e > max|x| (with the
// code 127 standing for 2^128), MinExponent for an empty or all-zero block. The
// result for blocks holding NaN or Inf is unspecified: call CheckFinite first.
func BlockExponent(x []float32) int8 {
	// Magnitudes of non-negative floats order like their bits, so the maximum is
	// found on integers without a float comparison per element.
	return exponentOfBits(maxAbsBits(x))
}

// FiniteBlockExponent is BlockExponent that also tells whether every
// element of x is finite, in the same single pass.
func FiniteBlockExponent(x []float32) (e int8, finite bool) {
	m := maxAbsBits(x)
	return exponentOfBits(m), m < 0x7f800000
}

// maxAbsBits is the largest |x| of x as float32 bits (sign cleared); NaN
// and Inf have the largest bits, from 0x7f800000 up.
func maxAbsBits(x []float32) uint32 {
	m0, i := maxAbsBitsFast(x)
	var m1, m2, m3 uint32
	for ; i+4 <= len(x); i += 4 {
		m0 = max(m0, math.Float32bits(x[i])&0x7fffffff)
		m1 = max(m1, math.Float32bits(x[i+1])&0x7fffffff)
		m2 = max(m2, math.Float32bits(x[i+2])&0x7fffffff)
		m3 = max(m3, math.Float32bits(x[i+3])&0x7fffffff)
	}
	for ; i < len(x); i++ {
		m0 = max(m0, math.Float32bits(x[i])&0x7fffffff)
	}
	return max(m0, m1, m2, m3)
}

// MaxExponent combines the exponents of two workers' blocks, as the switch does.
func MaxExponent(a, b int8) int8 { return max(a, b) }

// Scale returns f = (2^31-1)/(n*2^E) for the exponent code e. n < 1 counts as 1.
func Scale(n int, e int8) float64 {
	return fullScale / (float64(max(n, 1)) * pow2(e))
}

// invScale returns 1/f = n*2^E/(2^31-1), the factor that turns sums back into floats.
func invScale(n int, e int8) float64 {
	return float64(max(n, 1)) * pow2(e) / fullScale
}

// Limit returns L = floor((2^31-1)/n), the largest magnitude of one worker's
// quantized value; n such values never overflow int32. n < 1 counts as 1.
func Limit(n int) int32 {
	return int32(fullScale / max(n, 1))
}

// ErrorBound returns the largest absolute difference between an element of the
// dequantized n-way sum (Dequantize, float32 output) and the exact sum of the n
// inputs, when every input is below 2^E in magnitude and the result is finite:
// n*2^E * (n/(2*(2^31-1)) + 2^-24 + 2^-50), with the first term doubled for
// n > 128. See the package documentation for the derivation.
func ErrorBound(n int, e int8) float64 {
	return errorBound(n, e, quantLoss(n), outF32)
}

// ErrorBoundF16 is ErrorBound for float16 outputs: the output rounding is half an
// ulp of float16 (2^-11 relative, at most 2^-25 absolute for denormal results) on
// top of the float32 rounding it goes through.
func ErrorBoundF16(n int, e int8) float64 {
	return errorBound(n, e, quantLoss(n), outF16)
}

// ErrorBoundBF16 is ErrorBound for bfloat16 outputs: half an ulp of bfloat16
// (2^-8 relative; denormals share float32's exponent range) on top of the float32
// rounding it goes through.
func ErrorBoundBF16(n int, e int8) float64 {
	return errorBound(n, e, quantLoss(n), outBF16)
}

// outRounding is the rounding of a result to its output type: relative,
// and absolute for denormal results.
type outRounding struct{ rel, abs float64 }

var (
	outF32  = outRounding{0x1p-24, 0}
	outF16  = outRounding{0x1p-24 + 0x1p-11, 0x1p-25}
	outBF16 = outRounding{0x1p-24 + 0x1p-8, 0x1p-134}
)

// quantLoss is what the n values' rounding (and clamp) on the 32-bit wire
// can cost, relative to the largest possible sum.
func quantLoss(n int) float64 {
	n = max(n, 1)
	loss := float64(n) / (2 * fullScale)
	if n > 128 {
		loss *= 2
	}
	return loss
}

// errorBound is a bound of either wire: loss relative to the largest
// possible result, the output's rounding and the float64 arithmetic.
func errorBound(n int, e int8, loss float64, out outRounding) float64 {
	span := float64(max(n, 1)) * math.Ldexp(1, power(e)) // largest possible |result|
	return span*(loss+out.rel+0x1p-50) + out.abs
}

// NonFiniteError reports a NaN or ±Inf in a tensor, which block-scaled fixed point
// cannot carry. Index is the position of the first such element.
type NonFiniteError struct {
	Index int
	Value float32 // the element (widened to float32 for 16-bit formats)
	Type  string  // "float32", "float16" or "bfloat16"
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("quant: %s tensor: %v at index %d: aggregation cannot carry NaN or Inf (a diverged gradient?)",
		e.Type, e.Value, e.Index)
}

// CheckFinite returns a *NonFiniteError for the first NaN or ±Inf in x, nil if
// every element is finite. Call it before sending any block of x.
func CheckFinite(x []float32) error {
	const chunk = 256
	for start := 0; start < len(x); start += chunk {
		c := x[start:min(start+chunk, len(x))]
		if !anyNonFinite(c) {
			continue
		}
		for i, v := range c {
			if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
				return &NonFiniteError{Index: start + i, Value: v, Type: "float32"}
			}
		}
	}
	return nil
}

// BlockExponents is CheckFinite and BlockExponent in one pass: it writes
// BlockExponent of every k-element block of x (the last one may be shorter)
// into dst and returns a *NonFiniteError for the first NaN or ±Inf, as
// CheckFinite does. A sender that computes them once, before sending, reads
// its tensor once for both instead of once to check it and again for every
// packet's exponent. dst must hold ceil(len(x)/k) exponents; k must be
// positive.
func BlockExponents(dst []int8, x []float32, k int) error {
	if k <= 0 {
		return fmt.Errorf("quant: BlockExponents: block size %d, want > 0", k)
	}
	if blocks := (len(x) + k - 1) / k; len(dst) < blocks {
		return fmt.Errorf("quant: BlockExponents: %d exponents for %d blocks of %d", len(dst), blocks, k)
	}
	for b, lo := 0, 0; lo < len(x); b, lo = b+1, lo+k {
		m := maxAbsBits(x[lo:min(lo+k, len(x))])
		if m >= 0x7f800000 { // the exponent field all ones: NaN or Inf
			err := CheckFinite(x[lo:min(lo+k, len(x))])
			if nf, ok := err.(*NonFiniteError); ok {
				nf.Index += lo
			}
			return err
		}
		dst[b] = exponentOfBits(m)
	}
	return nil
}

// anyNonFinite reports whether x holds a NaN or an Inf: with AVX2 from the
// largest magnitude's bits (non-finite ones are the largest), otherwise two
// elements per 64-bit word: an element is non-finite exactly when its
// exponent field is all ones, and adding 1 at the bottom of the masked field
// carries into the element's (cleared) sign bit only then, never into the
// other element.
func anyNonFinite(x []float32) bool {
	if m, done := maxAbsBitsFast(x); done > 0 {
		if m >= 0x7f800000 {
			return true
		}
		x = x[done:]
	}
	const (
		fields = 0x7f8000007f800000
		one    = 0x0080000000800000
		signs  = 0x8000000080000000
	)
	var acc0, acc1 uint64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		w0 := uint64(math.Float32bits(x[i])) | uint64(math.Float32bits(x[i+1]))<<32
		w1 := uint64(math.Float32bits(x[i+2])) | uint64(math.Float32bits(x[i+3]))<<32
		acc0 |= w0&fields + one
		acc1 |= w1&fields + one
	}
	for ; i < len(x); i++ {
		acc0 |= uint64(math.Float32bits(x[i]))&fields + one
	}
	return (acc0|acc1)&signs != 0
}
