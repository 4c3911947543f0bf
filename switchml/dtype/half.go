package dtype

import (
	"context"

	"github.com/switchml/switchml-go/quant"
)

// Float16 sums IEEE half-precision values, given as their bits (uint16),
// as block-scaled fixed point; BFloat16 sums bfloat16 values the same way.
var (
	Float16 Codec = &halfCodec{name: "float16", code: 1,
		toF32: quant.F16ToFloat32, fromF32: quant.Float32ToF16, check: quant.CheckFiniteF16,
		exponent: quant.FiniteBlockExponentF16, quantize: quant.QuantizeF16BE, dequantize: quant.DequantizeF16BE,
		bound: quant.ErrorBoundF16, quantize16: quant.QuantizeF16PairsBE, dequantize16: quant.DequantizeF16PairsBE,
		bound16: quant.ErrorBound16F16}
	BFloat16 Codec = &halfCodec{name: "bfloat16", code: 2,
		toF32: quant.BF16ToFloat32, fromF32: quant.Float32ToBF16, check: quant.CheckFiniteBF16,
		exponent: quant.FiniteBlockExponentBF16, quantize: quant.QuantizeBF16BE, dequantize: quant.DequantizeBF16BE,
		bound: quant.ErrorBoundBF16, quantize16: quant.QuantizeBF16PairsBE, dequantize16: quant.DequantizeBF16PairsBE,
		bound16: quant.ErrorBound16BF16}
)

func init() {
	Register(Float16)
	Register(BFloat16)
}

// halfCodec is a 16-bit float type, by quant's functions for it.
type halfCodec struct {
	name       string
	code       int
	toF32      func(uint16) float32
	fromF32    func(float32) uint16
	check      func([]uint16) error
	exponent   func([]uint16) (int8, bool)
	quantize   func(dst []byte, src []uint16, n int, e int8) int
	dequantize func(dst []uint16, src []byte, n int, e int8) int
	bound      func(n int, e int8) float64
	// The 16-bit wire (Wire16).
	quantize16   func(dst []byte, src []uint16, n int, e int8) int
	dequantize16 func(dst []uint16, src []byte, n int, e int8) int
	bound16      func(n int, e int8) float64
}

func (h *halfCodec) Name() string                        { return h.name }
func (h *halfCodec) Code() int                           { return h.code }
func (*halfCodec) Size() int                             { return 2 }
func (*halfCodec) Scaled() bool                          { return true }
func (h *halfCodec) Check(data []byte) error             { return h.check(As[uint16](data)) }
func (h *halfCodec) Bound(workers int, exp int8) float64 { return h.bound(workers, exp) }
func (h *halfCodec) Get(data []byte, i int) float64      { return float64(h.toF32(As[uint16](data)[i])) }
func (h *halfCodec) Set(data []byte, i int, v float64)   { As[uint16](data)[i] = h.fromF32(float32(v)) }

func (h *halfCodec) Exponent(block []byte, check bool) (int8, bool) {
	// One pass: a NaN or Inf is the largest magnitude there is.
	e, finite := h.exponent(As[uint16](block))
	if check && !finite {
		return quant.MinExponent, false
	}
	return e, true
}

func (h *halfCodec) Quantize(dst, block []byte, workers int, exp int8) {
	h.quantize(dst, As[uint16](block), workers, exp)
}

func (h *halfCodec) Dequantize(block, payload []byte, workers int, exp int8) {
	h.dequantize(As[uint16](block), payload, workers, exp)
}

// RingSum widens the values to float32 for the ring and rounds the sums
// back.
func (h *halfCodec) RingSum(ctx context.Context, r Summer, data []byte, scratch *[]float32) error {
	x := As[uint16](data)
	if cap(*scratch) < len(x) {
		*scratch = make([]float32, len(x))
	}
	buf := (*scratch)[:len(x)]
	for i, v := range x {
		buf[i] = h.toF32(v)
	}
	if err := r.AllReduceFloat32(ctx, buf); err != nil {
		return err
	}
	for i, v := range buf {
		x[i] = h.fromF32(v)
	}
	return nil
}
