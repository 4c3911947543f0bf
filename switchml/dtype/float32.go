package dtype

import (
	"context"

	"github.com/switchml/switchml-go/quant"
)

// Float32 sums IEEE single-precision values as block-scaled fixed point.
var Float32 Codec = float32Codec{}

func init() { Register(Float32) }

type float32Codec struct{}

func (float32Codec) Name() string                        { return "float32" }
func (float32Codec) Code() int                           { return 0 }
func (float32Codec) Size() int                           { return 4 }
func (float32Codec) Scaled() bool                        { return true }
func (float32Codec) Check(data []byte) error             { return quant.CheckFinite(As[float32](data)) }
func (float32Codec) Bound(workers int, exp int8) float64 { return quant.ErrorBound(workers, exp) }
func (float32Codec) Get(data []byte, i int) float64      { return float64(As[float32](data)[i]) }
func (float32Codec) Set(data []byte, i int, v float64)   { As[float32](data)[i] = float32(v) }

func (float32Codec) Exponent(block []byte, check bool) (int8, bool) {
	if check {
		return quant.FiniteBlockExponent(As[float32](block))
	}
	return quant.BlockExponent(As[float32](block)), true
}

// BlockExponents is quant's one pass over the tensor.
func (float32Codec) BlockExponents(exps []int8, data []byte, k int) error {
	return quant.BlockExponents(exps, As[float32](data), k)
}

func (float32Codec) Quantize(dst, block []byte, workers int, exp int8) {
	quant.QuantizeBE(dst, As[float32](block), workers, exp)
}

func (float32Codec) Dequantize(block, payload []byte, workers int, exp int8) {
	quant.DequantizeBE(As[float32](block), payload, workers, exp)
}

func (float32Codec) RingSum(ctx context.Context, r Summer, data []byte, _ *[]float32) error {
	return r.AllReduceFloat32(ctx, As[float32](data))
}
