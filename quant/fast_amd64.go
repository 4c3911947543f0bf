//go:build amd64 && !purego

package quant

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAVX2 selects the vector kernels; tests switch it off to compare against
// the generic kernels.
var useAVX2 = cpu.X86.HasAVX2

// useAVX512 selects the AVX-512 kernels for the blocks of 16 elements they
// can take (the AVX2 kernels then take what is left of 8); they compute
// the same bits.
var useAVX512 = cpu.X86.HasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW

// useF16C selects the 16-bit wire's float16 kernels (with useAVX2).
var useF16C = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// Byte shuffles for VPSHUFB: swap the bytes of every int32 (big-endian
// payloads) or leave them (native []int32).
var (
	shuffleBE     = [32]byte{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12}
	shuffleNative = [32]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
)

// quantizeAVX2 converts blocks*8 elements: VCVTPS2PD, VMULPD by f, clamp with
// VMINPD/VMAXPD, VCVTPD2DQ (round half even under the default MXCSR, which Go
// never changes), VPSHUFB, store.
//
//go:noescape
func quantizeAVX2(dst *byte, src *float32, blocks int, f, lim, nlim float64, shuffle *[32]byte)

// dequantizeAVX2 converts blocks*8 elements: load, VPSHUFB, VCVTDQ2PD, VMULPD by
// g, VCVTPD2PS (round half even), store.
//
//go:noescape
func dequantizeAVX2(dst *float32, src *byte, blocks int, inv float64, shuffle *[32]byte)

// maxAbsBitsAVX2 returns the largest element magnitude of blocks*8 elements
// as float32 bits with the sign cleared.
//
//go:noescape
func maxAbsBitsAVX2(src *float32, blocks int) uint32

// quantizeAVX512 and dequantizeAVX512 are the AVX2 kernels on blocks of
// 16 elements.
//
//go:noescape
func quantizeAVX512(dst *byte, src *float32, blocks int, f, lim, nlim float64, shuffle *[32]byte)

//go:noescape
func dequantizeAVX512(dst *float32, src *byte, blocks int, inv float64, shuffle *[32]byte)

// maxAbsBitsFast scans the longest multiple of 8 elements it can and returns
// the largest magnitude's bits and how many elements it scanned.
func maxAbsBitsFast(x []float32) (uint32, int) {
	blocks := len(x) / 8
	if !useAVX2 || blocks == 0 {
		return 0, 0
	}
	// AVX-512 does not pay here: the scan streams its input from memory,
	// where an AVX-512 version of it was slower than this one.
	return maxAbsBitsAVX2(unsafe.SliceData(x), blocks), 8 * blocks
}

// splitWide says how many blocks of 16 elements the AVX-512 kernels take
// out of blocks of 8, and how many elements that is; the AVX2 kernels
// take the rest.
func splitWide(blocks int) (wide, elements int) {
	if !useAVX512 || blocks < 2 {
		return 0, 0
	}
	return blocks / 2, 16 * (blocks / 2)
}

func shuffleFor(be bool) *[32]byte {
	if be {
		return &shuffleBE
	}
	return &shuffleNative
}

// quantizeFast converts the longest multiple of 8 elements it can and returns how
// many it did; len(dst) == 4*len(src).
func quantizeFast(dst []byte, src []float32, c quantizer, be bool) int {
	blocks := len(src) / 8
	if !useAVX2 || blocks == 0 {
		return 0
	}
	sh := shuffleFor(be)
	wide, done := splitWide(blocks)
	if wide > 0 {
		quantizeAVX512(unsafe.SliceData(dst), unsafe.SliceData(src), wide, c.f, c.lim, -c.lim, sh)
	}
	if done < 8*blocks {
		quantizeAVX2(&dst[4*done], &src[done], blocks-done/8, c.f, c.lim, -c.lim, sh)
	}
	return 8 * blocks
}

// dequantizeFast is quantizeFast's counterpart; len(src) == 4*len(dst).
func dequantizeFast(dst []float32, src []byte, g float64, be bool) int {
	blocks := len(dst) / 8
	if !useAVX2 || blocks == 0 {
		return 0
	}
	sh := shuffleFor(be)
	wide, done := splitWide(blocks)
	if wide > 0 {
		dequantizeAVX512(unsafe.SliceData(dst), unsafe.SliceData(src), wide, g, sh)
	}
	if done < 8*blocks {
		dequantizeAVX2(&dst[done], &src[4*done], blocks-done/8, g, sh)
	}
	return 8 * blocks
}

// int32Bytes views an int32 slice as its bytes (native order) for the kernels.
func int32Bytes(x []int32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

// shuffleHalves swaps the bytes of every 16-bit half: with the high half
// first in each dword's lanes, it makes big-endian pair words (see
// pairs_amd64.s).
var shuffleHalves = [32]byte{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}

// The 16-bit wire's kernels, on blocks of 16 values (32 bytes of pair
// words): they compute the bits of QuantizePairsBE, DequantizePairsBE and
// their bfloat16 forms (see pairs_amd64.s).
//
//go:noescape
func quantizePairsAVX2(dst *byte, src *float32, blocks int, f, lim, nlim float64, shuffle *[32]byte)

//go:noescape
func quantizeBF16PairsAVX2(dst *byte, src *uint16, blocks int, f, lim, nlim float64, shuffle *[32]byte)

// quantizeF16PairsAVX2 and dequantizeF16PairsAVX2 also need F16C.
//
//go:noescape
func quantizeF16PairsAVX2(dst *byte, src *uint16, blocks int, f, lim, nlim float64, shuffle *[32]byte)

//go:noescape
func dequantizeF16PairsAVX2(dst *uint16, src *byte, blocks int, inv float64, shuffle *[32]byte)

//go:noescape
func dequantizePairsAVX2(dst *float32, src *byte, blocks int, inv float64, shuffle *[32]byte)

//go:noescape
func dequantizeBF16PairsAVX2(dst *uint16, src *byte, blocks int, inv float64, shuffle *[32]byte)

// maxMagnitude16AVX2 is maxMagnitude16 of blocks*16 values.
//
//go:noescape
func maxMagnitude16AVX2(src *uint16, blocks int) uint16

// quantizePairsFast converts the longest multiple of 16 values of src it
// can into pair words and returns how many values it did; dst holds at
// least 2*len(src) bytes.
func quantizePairsFast(dst []byte, src []float32, c quantizer) int {
	blocks := len(src) / 16
	if !useAVX2 || blocks == 0 {
		return 0
	}
	_ = dst[32*blocks-1]
	quantizePairsAVX2(unsafe.SliceData(dst), unsafe.SliceData(src), blocks, c.f, c.lim, -c.lim, &shuffleHalves)
	return 16 * blocks
}

// quantizeHalfPairsFast is quantizePairsFast on bfloat16 (bf16) or
// float16 bits.
func quantizeHalfPairsFast(dst []byte, src []uint16, c quantizer, bf16 bool) int {
	blocks := len(src) / 16
	if !useAVX2 || blocks == 0 || !bf16 && !useF16C {
		return 0
	}
	_ = dst[32*blocks-1]
	kernel := quantizeF16PairsAVX2
	if bf16 {
		kernel = quantizeBF16PairsAVX2
	}
	kernel(unsafe.SliceData(dst), unsafe.SliceData(src), blocks, c.f, c.lim, -c.lim, &shuffleHalves)
	return 16 * blocks
}

// dequantizePairsFast reads the longest multiple of 16 values of dst it
// can from the pair words of src and returns how many values it did; src
// holds at least 2*len(dst) bytes.
func dequantizePairsFast(dst []float32, src []byte, g float64) int {
	blocks := len(dst) / 16
	if !useAVX2 || blocks == 0 {
		return 0
	}
	_ = src[32*blocks-1]
	dequantizePairsAVX2(unsafe.SliceData(dst), unsafe.SliceData(src), blocks, g, &shuffleHalves)
	return 16 * blocks
}

// dequantizeHalfPairsFast is dequantizePairsFast with bfloat16 (bf16) or
// float16 output.
func dequantizeHalfPairsFast(dst []uint16, src []byte, g float64, bf16 bool) int {
	blocks := len(dst) / 16
	if !useAVX2 || blocks == 0 || !bf16 && !useF16C {
		return 0
	}
	_ = src[32*blocks-1]
	kernel := dequantizeF16PairsAVX2
	if bf16 {
		kernel = dequantizeBF16PairsAVX2
	}
	kernel(unsafe.SliceData(dst), unsafe.SliceData(src), blocks, g, &shuffleHalves)
	return 16 * blocks
}

// maxMagnitude16Fast scans the longest multiple of 16 values it can and
// returns their maxMagnitude16 and how many it scanned.
func maxMagnitude16Fast(x []uint16) (uint16, int) {
	blocks := len(x) / 16
	if !useAVX2 || blocks == 0 {
		return 0, 0
	}
	return maxMagnitude16AVX2(unsafe.SliceData(x), blocks), 16 * blocks
}
