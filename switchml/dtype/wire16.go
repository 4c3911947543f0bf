package dtype

import (
	"fmt"

	"github.com/switchml/switchml-go/quant"
)

// Wire16 is what a scaled type offers to travel on the 16-bit wire: its
// values as block-scaled 16-bit fixed point, two to a 32-bit payload word
// (quant.QuantizePairsBE), which a switch adds as it adds 32-bit values.
// float32, float16 and bfloat16 have it; int32 does not.
type Wire16 interface {
	// Quantize16 writes the block's values into dst, 2 bytes a value
	// rounded up to whole 4-byte words, scaled for a sum of workers
	// values under exp.
	Quantize16(dst, block []byte, workers int, exp int8)
	// Dequantize16 writes the summed payload back into the block's values.
	Dequantize16(block, payload []byte, workers int, exp int8)
	// Bound16 is Bound on the 16-bit wire.
	Bound16(workers int, exp int8) float64
}

// Wire bit widths: WireBits resolves a request (0, 16 or 32) for a type.
const (
	// WireDefault asks for the type's default: 16 bits for float16 and
	// bfloat16, 32 for float32 and int32.
	WireDefault = 0
	// WireNarrow is the 16-bit wire.
	WireNarrow = 16
	// WireFull is the 32-bit wire, the reference layout's.
	WireFull = 32
)

// WireBits is the width c's values travel at when bits is asked for:
// WireDefault gives 16 for the 16-bit types and 32 for the others,
// WireNarrow gives 16 for every scaled type (int32 sums stay exact, at 32),
// WireFull gives 32. Any other request is an error.
func WireBits(c Codec, bits int) (int, error) {
	_, narrow := c.(Wire16)
	switch bits {
	case WireDefault:
		if narrow && c.Size() == 2 {
			return WireNarrow, nil
		}
		return WireFull, nil
	case WireNarrow:
		if narrow {
			return WireNarrow, nil
		}
		return WireFull, nil
	case WireFull:
		return WireFull, nil
	}
	return 0, fmt.Errorf("dtype: %d wire bits: want %d (the type's default), %d or %d", bits, WireDefault, WireNarrow, WireFull)
}

func (float32Codec) Quantize16(dst, block []byte, workers int, exp int8) {
	quant.QuantizePairsBE(dst, As[float32](block), workers, exp)
}

func (float32Codec) Dequantize16(block, payload []byte, workers int, exp int8) {
	quant.DequantizePairsBE(As[float32](block), payload, workers, exp)
}

func (float32Codec) Bound16(workers int, exp int8) float64 { return quant.ErrorBound16(workers, exp) }

func (h *halfCodec) Quantize16(dst, block []byte, workers int, exp int8) {
	h.quantize16(dst, As[uint16](block), workers, exp)
}

func (h *halfCodec) Dequantize16(block, payload []byte, workers int, exp int8) {
	h.dequantize16(As[uint16](block), payload, workers, exp)
}

func (h *halfCodec) Bound16(workers int, exp int8) float64 { return h.bound16(workers, exp) }
