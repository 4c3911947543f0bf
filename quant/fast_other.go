//go:build !amd64 || purego

package quant

// Without vector kernels the generic loops do all the work.

var useAVX2, useAVX512, useF16C = false, false, false

func quantizeFast(dst []byte, src []float32, c quantizer, be bool) int { return 0 }

func dequantizeFast(dst []float32, src []byte, g float64, be bool) int { return 0 }

func int32Bytes(x []int32) []byte { return nil }

func maxAbsBitsFast(x []float32) (uint32, int) { return 0, 0 }

func quantizePairsFast(dst []byte, src []float32, c quantizer) int { return 0 }

func quantizeHalfPairsFast(dst []byte, src []uint16, c quantizer, bf16 bool) int { return 0 }

func dequantizePairsFast(dst []float32, src []byte, g float64) int { return 0 }

func dequantizeHalfPairsFast(dst []uint16, src []byte, g float64, bf16 bool) int { return 0 }

func maxMagnitude16Fast(x []uint16) (uint16, int) { return 0, 0 }
