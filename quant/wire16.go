package quant

import (
	"encoding/binary"
	"math"
)

// The 16-bit wire: values as block-scaled 16-bit fixed point, two to a
// 32-bit word, so that a packet carries twice the values in the same bytes
// and a switch that adds 32-bit words (every one of ours, the P4 programs
// included) sums each half on its own.
//
// With n workers and combined exponent E the scale is
//
//	f16 = (2^15 - 1) / (n * 2^E)
//
// and every value is clamped to [-L16, L16], L16 = floor((2^15-1)/n), so the
// n-way sum of one half never leaves [-(2^15-1), 2^15-1]: the headroom is
// log2(n) bits of the 16. Values a and b (a first) travel as the word
//
//	w = a * 2^16 + b
//
// in two's complement, big-endian: an arithmetic pair, not two int16s side
// by side. The switch's 32-bit sum of such words is A * 2^16 + B, with A
// and B the sums of the halves; since |B| <= 2^15-1, B is the low 16 bits
// of the sum read as int16, and A = (sum - B) / 2^16. No carry between the
// halves can be lost and |A*2^16 + B| < 2^31, so the 32-bit sum never
// wraps: the switch needs nothing new, and partial sums of any subset of
// the workers (a leaf switch's) decode the same way.
//
// An odd count of values pairs the last one with a zero.

// fullScale16 is 2^15 - 1, the largest magnitude of a 16-bit sum.
const fullScale16 = 1<<15 - 1

// MaxWorkers16 is the largest world size the 16-bit wire takes: with 256
// workers a worker's value keeps 7 bits (L16 = 127) and the sum 15.
const MaxWorkers16 = 256

// Scale16 returns f16 = (2^15-1)/(n*2^E) for the exponent code e. n < 1
// counts as 1.
func Scale16(n int, e int8) float64 {
	return fullScale16 / (float64(max(n, 1)) * pow2(e))
}

// invScale16 is 1/f16.
func invScale16(n int, e int8) float64 {
	return float64(max(n, 1)) * pow2(e) / fullScale16
}

// Limit16 returns L16 = floor((2^15-1)/n), the largest magnitude of one
// worker's 16-bit value; n of them never overflow a 16-bit half. n < 1
// counts as 1.
func Limit16(n int) int32 {
	return int32(fullScale16 / max(n, 1))
}

// PairWords is the number of 32-bit words that carry v values on the 16-bit
// wire.
func PairWords(v int) int { return (v + 1) / 2 }

// ErrorBound16 is ErrorBound for the 16-bit wire: the largest absolute
// difference between an element of the dequantized n-way sum (float32
// output) and the exact sum of the n inputs, when every input is below 2^E
// in magnitude:
//
//	n*2^E * ( n*c/(2^15-1) + 2^-24 + 2^-50 )
//
// where c is the most one value can lose: half a step from rounding, or up
// to one step where the clamp to L16 cuts a value rounded up to
// floor((2^15-1)/n) + 1, that is c = max(0.5, (2^15-1)/n - L16). The
// other terms are ErrorBound's: the float32 rounding of the output and the
// float64 arithmetic. For 8 workers it is about 8*2^E * 1.2e-4: 12 bits
// below the largest possible sum, against 28 on the 32-bit wire.
func ErrorBound16(n int, e int8) float64 {
	return errorBound(n, e, quantLoss16(n), outF32)
}

// ErrorBound16F16 is ErrorBound16 for float16 outputs (ErrorBoundF16's output
// rounding).
func ErrorBound16F16(n int, e int8) float64 {
	return errorBound(n, e, quantLoss16(n), outF16)
}

// ErrorBound16BF16 is ErrorBound16 for bfloat16 outputs (ErrorBoundBF16's
// output rounding).
func ErrorBound16BF16(n int, e int8) float64 {
	return errorBound(n, e, quantLoss16(n), outBF16)
}

// quantLoss16 is quantLoss on the 16-bit wire: n values that each lose
// up to c steps (see ErrorBound16).
func quantLoss16(n int) float64 {
	n = max(n, 1)
	c := max(0.5, fullScale16/float64(n)-float64(Limit16(n)))
	return float64(n) * c / fullScale16
}

// newQuantizer16 is the quantizer of the 16-bit wire: the 32-bit wire's
// arithmetic (and its vector kernels) with f16 and L16.
func newQuantizer16(n int, e int8) quantizer {
	return quantizer{f: Scale16(n, e), lim: float64(Limit16(n))}
}

// pair is the word that carries a then b.
func pair(a, b int32) uint32 { return uint32(a<<16 + b) }

// unpair splits a sum of pair words into the sums of its halves.
func unpair(w uint32) (a, b int32) {
	b = int32(int16(uint16(w)))
	a = (int32(w) - b) >> 16
	return a, b
}

// pairChunk is how many values go through a stack buffer of int32 at a
// time: the float kernels (vectorised where possible) scale and round into
// it, and a scalar pass pairs the halves. Even, so chunks start on a word.
const pairChunk = 512

// QuantizePairsBE writes the values of src as 16-bit fixed point for a sum
// of n workers under exponent e, two to a big-endian 32-bit word of dst (see
// the 16-bit wire above). It converts v = min(len(src), 2*(len(dst)/4))
// values into PairWords(v) words and returns v; when v is odd the last
// word's second half is 0.
func QuantizePairsBE(dst []byte, src []float32, n int, e int8) int {
	c := newQuantizer16(n, e)
	v := min(len(src), 2*(len(dst)/4))
	var buf [pairChunk]int32
	for done := quantizePairsFast(dst, src[:v], c); done < v; done += pairChunk {
		m := min(pairChunk, v-done)
		q, s := buf[:m], src[done:done+m]
		k := quantizeFast(int32Bytes(q), s, c, false)
		quantizeGeneric(q[k:], s[k:], c)
		putPairs(dst[2*done:], q)
	}
	return v
}

// putPairs writes the values of q as PairWords(len(q)) big-endian pair
// words.
func putPairs(dst []byte, q []int32) {
	for len(q) >= 8 && len(dst) >= 16 {
		binary.BigEndian.PutUint32(dst[0:4], pair(q[0], q[1]))
		binary.BigEndian.PutUint32(dst[4:8], pair(q[2], q[3]))
		binary.BigEndian.PutUint32(dst[8:12], pair(q[4], q[5]))
		binary.BigEndian.PutUint32(dst[12:16], pair(q[6], q[7]))
		q, dst = q[8:], dst[16:]
	}
	for len(q) >= 2 {
		binary.BigEndian.PutUint32(dst[0:4], pair(q[0], q[1]))
		q, dst = q[2:], dst[4:]
	}
	if len(q) == 1 {
		binary.BigEndian.PutUint32(dst[0:4], pair(q[0], 0))
	}
}

// DequantizePairsBE reads the summed words of src (QuantizePairsBE's
// layout, summed by the switch) back into floats: it converts
// v = min(len(dst), 2*(len(src)/4)) values and returns v.
func DequantizePairsBE(dst []float32, src []byte, n int, e int8) int {
	g := invScale16(n, e)
	v := min(len(dst), 2*(len(src)/4))
	var buf [pairChunk]int32
	for done := dequantizePairsFast(dst[:v], src, g); done < v; done += pairChunk {
		m := min(pairChunk, v-done)
		q, d := buf[:m], dst[done:done+m]
		getPairs(q, src[2*done:])
		k := dequantizeFast(d, int32Bytes(q), g, false)
		dequantizeGeneric(d[k:], q[k:], g)
	}
	return v
}

// getPairs reads len(q) values from the pair words of src.
func getPairs(q []int32, src []byte) {
	for len(q) >= 8 && len(src) >= 16 {
		q[0], q[1] = unpair(binary.BigEndian.Uint32(src[0:4]))
		q[2], q[3] = unpair(binary.BigEndian.Uint32(src[4:8]))
		q[4], q[5] = unpair(binary.BigEndian.Uint32(src[8:12]))
		q[6], q[7] = unpair(binary.BigEndian.Uint32(src[12:16]))
		q, src = q[8:], src[16:]
	}
	for len(q) >= 2 {
		q[0], q[1] = unpair(binary.BigEndian.Uint32(src[0:4]))
		q, src = q[2:], src[4:]
	}
	if len(q) == 1 {
		q[0], _ = unpair(binary.BigEndian.Uint32(src[0:4]))
	}
}

// QuantizeF16PairsBE is QuantizePairsBE for float16 bits; the result equals
// QuantizePairsBE of the widened values.
func QuantizeF16PairsBE(dst []byte, src []uint16, n int, e int8) int {
	return quantizeHalf(dst, src, n, e, false, true)
}

// QuantizeBF16PairsBE is QuantizePairsBE for bfloat16 bits; the result
// equals QuantizePairsBE of the widened values.
func QuantizeBF16PairsBE(dst []byte, src []uint16, n int, e int8) int {
	return quantizeHalf(dst, src, n, e, true, true)
}

// DequantizeF16PairsBE is DequantizePairsBE with float16 output (the float32
// result rounded to nearest even).
func DequantizeF16PairsBE(dst []uint16, src []byte, n int, e int8) int {
	return dequantizeHalf(dst, src, n, e, false, true)
}

// DequantizeBF16PairsBE is DequantizePairsBE with bfloat16 output (the
// float32 result rounded to nearest even).
func DequantizeBF16PairsBE(dst []uint16, src []byte, n int, e int8) int {
	return dequantizeHalf(dst, src, n, e, true, true)
}

// widenBF16 is BF16ToFloat32 of every value of src into dst
// (len(dst) == len(src)), four at a time.
func widenBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for len(src) >= 4 && len(dst) >= 4 {
		dst[0] = math.Float32frombits(uint32(src[0]) << 16)
		dst[1] = math.Float32frombits(uint32(src[1]) << 16)
		dst[2] = math.Float32frombits(uint32(src[2]) << 16)
		dst[3] = math.Float32frombits(uint32(src[3]) << 16)
		src, dst = src[4:], dst[4:]
	}
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// narrowBF16 is Float32ToBF16 of every sum of src into dst
// (len(dst) == len(src)): a dequantized sum is never NaN, so the rounding
// needs no test for it (an infinite sum stays infinite).
func narrowBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for len(src) >= 4 && len(dst) >= 4 {
		b0, b1, b2, b3 := math.Float32bits(src[0]), math.Float32bits(src[1]), math.Float32bits(src[2]), math.Float32bits(src[3])
		dst[0] = uint16((b0 + 0x7fff + b0>>16&1) >> 16)
		dst[1] = uint16((b1 + 0x7fff + b1>>16&1) >> 16)
		dst[2] = uint16((b2 + 0x7fff + b2>>16&1) >> 16)
		dst[3] = uint16((b3 + 0x7fff + b3>>16&1) >> 16)
		src, dst = src[4:], dst[4:]
	}
	for i, f := range src {
		b := math.Float32bits(f)
		dst[i] = uint16((b + 0x7fff + b>>16&1) >> 16)
	}
}
