package quant

import (
	"encoding/binary"
	"math"
)

// roundMagic is 1.5*2^52: adding it to a float64 v with |v| < 2^51 leaves
// round-half-even(v) in the low mantissa bits as two's complement, because the sum
// lies in [2^52, 2^53) where the ulp is 1. This rounds without a function call or a
// rounding instruction that GOAMD64=v1 lacks.
const roundMagic = 0x1.8p52

// quantizer holds the per-call constants of a float -> int32 conversion.
type quantizer struct {
	f, lim float64
}

func newQuantizer(n int, e int8) quantizer {
	return quantizer{f: Scale(n, e), lim: float64(Limit(n))}
}

// q converts one value; inlined into the loops below. The clamp never triggers
// for |x| < 2^E and n <= 128 (see the package documentation) and keeps a wrong E
// from wrapping around. NaN passes both comparisons and yields some int32.
func (c quantizer) q(x float32) uint32 {
	v := float64(x) * c.f
	if v > c.lim {
		v = c.lim
	}
	if v < -c.lim {
		v = -c.lim
	}
	return uint32(math.Float64bits(v + roundMagic))
}

// Quantize writes round(x*f) for every x of src into dst, f = Scale(n, e), and
// returns the number of elements converted, min(len(dst), len(src)).
func Quantize(dst []int32, src []float32, n int, e int8) int {
	c := newQuantizer(n, e)
	k := min(len(dst), len(src))
	done := quantizeFast(int32Bytes(dst[:k]), src[:k], c, false)
	quantizeGeneric(dst[done:k], src[done:k], c)
	return k
}

// QuantizeBE is Quantize writing big-endian int32 into a packet payload: it
// converts min(len(dst)/4, len(src)) elements and returns that count.
func QuantizeBE(dst []byte, src []float32, n int, e int8) int {
	c := newQuantizer(n, e)
	k := min(len(dst)/4, len(src))
	done := quantizeFast(dst[:4*k], src[:k], c, true)
	quantizeBEGeneric(dst[4*done:4*k], src[done:k], c)
	return k
}

// Dequantize writes sum/f for every int32 sum of src into dst, f = Scale(n, e),
// and returns the number of elements converted, min(len(dst), len(src)).
func Dequantize(dst []float32, src []int32, n int, e int8) int {
	g := invScale(n, e)
	k := min(len(dst), len(src))
	done := dequantizeFast(dst[:k], int32Bytes(src[:k]), g, false)
	dequantizeGeneric(dst[done:k], src[done:k], g)
	return k
}

// DequantizeBE is Dequantize reading big-endian int32 from a packet payload: it
// converts min(len(dst), len(src)/4) elements and returns that count.
func DequantizeBE(dst []float32, src []byte, n int, e int8) int {
	g := invScale(n, e)
	k := min(len(dst), len(src)/4)
	done := dequantizeFast(dst[:k], src[:4*k], g, true)
	dequantizeBEGeneric(dst[done:k], src[4*done:4*k], g)
	return k
}

// The generic kernels below are the definition: the vector kernels must match
// them bit for bit (tests compare them on every magnitude). len(dst) and len(src)
// agree on entry (counting 4 bytes per element in byte slices).

func quantizeGeneric(dst []int32, src []float32, c quantizer) {
	src = src[:len(dst)]
	for len(src) >= 4 && len(dst) >= 4 {
		dst[0] = int32(c.q(src[0]))
		dst[1] = int32(c.q(src[1]))
		dst[2] = int32(c.q(src[2]))
		dst[3] = int32(c.q(src[3]))
		src, dst = src[4:], dst[4:]
	}
	for i, x := range src {
		dst[i] = int32(c.q(x))
	}
}

func quantizeBEGeneric(dst []byte, src []float32, c quantizer) {
	src = src[:len(dst)/4]
	for len(src) >= 4 && len(dst) >= 16 {
		binary.BigEndian.PutUint32(dst[0:4], c.q(src[0]))
		binary.BigEndian.PutUint32(dst[4:8], c.q(src[1]))
		binary.BigEndian.PutUint32(dst[8:12], c.q(src[2]))
		binary.BigEndian.PutUint32(dst[12:16], c.q(src[3]))
		src, dst = src[4:], dst[16:]
	}
	for i, x := range src {
		binary.BigEndian.PutUint32(dst[4*i:4*i+4], c.q(x))
	}
}

func dequantizeGeneric(dst []float32, src []int32, g float64) {
	src = src[:len(dst)]
	for len(src) >= 4 && len(dst) >= 4 {
		dst[0] = float32(float64(src[0]) * g)
		dst[1] = float32(float64(src[1]) * g)
		dst[2] = float32(float64(src[2]) * g)
		dst[3] = float32(float64(src[3]) * g)
		src, dst = src[4:], dst[4:]
	}
	for i, v := range src {
		dst[i] = float32(float64(v) * g)
	}
}

func dequantizeBEGeneric(dst []float32, src []byte, g float64) {
	src = src[:4*len(dst)]
	for len(src) >= 16 && len(dst) >= 4 {
		dst[0] = float32(float64(int32(binary.BigEndian.Uint32(src[0:4]))) * g)
		dst[1] = float32(float64(int32(binary.BigEndian.Uint32(src[4:8]))) * g)
		dst[2] = float32(float64(int32(binary.BigEndian.Uint32(src[8:12]))) * g)
		dst[3] = float32(float64(int32(binary.BigEndian.Uint32(src[12:16]))) * g)
		src, dst = src[16:], dst[4:]
	}
	for i := range dst {
		dst[i] = float32(float64(int32(binary.BigEndian.Uint32(src[4*i:4*i+4]))) * g)
	}
}
