package dtype

import (
	"context"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/wire"
)

// Int32 sums int32 values exactly, wrapping.
var Int32 Codec = int32Codec{}

func init() { Register(Int32) }

type int32Codec struct{}

func (int32Codec) Name() string                   { return "int32" }
func (int32Codec) Code() int                      { return 3 }
func (int32Codec) Size() int                      { return 4 }
func (int32Codec) Scaled() bool                   { return false }
func (int32Codec) Check([]byte) error             { return nil }
func (int32Codec) Bound(int, int8) float64        { return 0 }
func (int32Codec) Get(data []byte, i int) float64 { return float64(As[int32](data)[i]) }
func (int32Codec) Set(data []byte, i int, v float64) {
	As[int32](data)[i] = int32(v)
}

func (int32Codec) Exponent([]byte, bool) (int8, bool) { return quant.MinExponent, true }

func (int32Codec) Quantize(dst, block []byte, _ int, _ int8) {
	wire.PutPayload(dst, As[int32](block))
}

func (int32Codec) Dequantize(block, payload []byte, _ int, _ int8) {
	wire.ReadPayload(As[int32](block), payload)
}

func (int32Codec) RingSum(ctx context.Context, r Summer, data []byte, _ *[]float32) error {
	return r.AllReduceInt32(ctx, As[int32](data))
}
