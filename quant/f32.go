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
	dst, src = dst[:k], src[:k]
	i := 0
	for ; i+4 <= k; i += 4 {
		s := src[i : i+4 : i+4]
		d := dst[i : i+4 : i+4]
		d[0] = int32(c.q(s[0]))
		d[1] = int32(c.q(s[1]))
		d[2] = int32(c.q(s[2]))
		d[3] = int32(c.q(s[3]))
	}
	for ; i < k; i++ {
		dst[i] = int32(c.q(src[i]))
	}
	return k
}

// QuantizeBE is Quantize writing big-endian int32 into a packet payload: it
// converts min(len(dst)/4, len(src)) elements and returns that count.
func QuantizeBE(dst []byte, src []float32, n int, e int8) int {
	c := newQuantizer(n, e)
	k := min(len(dst)/4, len(src))
	dst, src = dst[:4*k], src[:k]
	i := 0
	for ; i+4 <= k; i += 4 {
		s := src[i : i+4 : i+4]
		d := dst[4*i : 4*i+16 : 4*i+16]
		binary.BigEndian.PutUint32(d[0:4], c.q(s[0]))
		binary.BigEndian.PutUint32(d[4:8], c.q(s[1]))
		binary.BigEndian.PutUint32(d[8:12], c.q(s[2]))
		binary.BigEndian.PutUint32(d[12:16], c.q(s[3]))
	}
	for ; i < k; i++ {
		binary.BigEndian.PutUint32(dst[4*i:4*i+4], c.q(src[i]))
	}
	return k
}

// Dequantize writes sum/f for every int32 sum of src into dst, f = Scale(n, e),
// and returns the number of elements converted, min(len(dst), len(src)).
func Dequantize(dst []float32, src []int32, n int, e int8) int {
	g := invScale(n, e)
	k := min(len(dst), len(src))
	dst, src = dst[:k], src[:k]
	i := 0
	for ; i+4 <= k; i += 4 {
		s := src[i : i+4 : i+4]
		d := dst[i : i+4 : i+4]
		d[0] = float32(float64(s[0]) * g)
		d[1] = float32(float64(s[1]) * g)
		d[2] = float32(float64(s[2]) * g)
		d[3] = float32(float64(s[3]) * g)
	}
	for ; i < k; i++ {
		dst[i] = float32(float64(src[i]) * g)
	}
	return k
}

// DequantizeBE is Dequantize reading big-endian int32 from a packet payload: it
// converts min(len(dst), len(src)/4) elements and returns that count.
func DequantizeBE(dst []float32, src []byte, n int, e int8) int {
	g := invScale(n, e)
	k := min(len(dst), len(src)/4)
	dst, src = dst[:k], src[:4*k]
	i := 0
	for ; i+4 <= k; i += 4 {
		s := src[4*i : 4*i+16 : 4*i+16]
		d := dst[i : i+4 : i+4]
		d[0] = float32(float64(int32(binary.BigEndian.Uint32(s[0:4]))) * g)
		d[1] = float32(float64(int32(binary.BigEndian.Uint32(s[4:8]))) * g)
		d[2] = float32(float64(int32(binary.BigEndian.Uint32(s[8:12]))) * g)
		d[3] = float32(float64(int32(binary.BigEndian.Uint32(s[12:16]))) * g)
	}
	for ; i < k; i++ {
		dst[i] = float32(float64(int32(binary.BigEndian.Uint32(src[4*i:4*i+4]))) * g)
	}
	return k
}

// Int32ToBE writes src as big-endian int32 into dst (an int32 tensor's packet
// payload) and returns the number of elements written, min(len(dst)/4, len(src)).
func Int32ToBE(dst []byte, src []int32) int {
	k := min(len(dst)/4, len(src))
	dst, src = dst[:4*k], src[:k]
	for i, v := range src {
		binary.BigEndian.PutUint32(dst[4*i:4*i+4], uint32(v))
	}
	return k
}

// BEToInt32 reads big-endian int32 from src into dst and returns the number of
// elements read, min(len(dst), len(src)/4).
func BEToInt32(dst []int32, src []byte) int {
	k := min(len(dst), len(src)/4)
	dst, src = dst[:k], src[:4*k]
	for i := range dst {
		dst[i] = int32(binary.BigEndian.Uint32(src[4*i : 4*i+4]))
	}
	return k
}
