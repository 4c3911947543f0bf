//go:build amd64 && !purego

package wire

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAVX2 selects the vector kernels; tests switch it off to compare them
// with the loops of payload.go.
var useAVX2 = cpu.X86.HasAVX2

// swapAVX2 copies blocks*32 bytes from src to dst, reversing the bytes of
// every 32-bit element: one kernel serves both directions, since a byte swap
// is its own inverse.
//
//go:noescape
func swapAVX2(dst, src *byte, blocks int)

// addAVX2 adds blocks*8 big-endian int32 of payload to vals.
//
//go:noescape
func addAVX2(vals *int32, payload *byte, blocks int)

// int32Bytes views vals as its bytes in native order, for the kernels.
func int32Bytes(vals []int32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), 4*len(vals))
}

// The fast paths handle the longest multiple of 8 elements and return how
// many elements they handled; the caller passes 4 payload bytes per value.

func swapFast(dst, src []byte) int {
	blocks := min(len(dst), len(src)) / 32
	if !useAVX2 || blocks == 0 {
		return 0
	}
	swapAVX2(unsafe.SliceData(dst), unsafe.SliceData(src), blocks)
	return 8 * blocks
}

func addFast(vals []int32, payload []byte) int {
	blocks := min(len(vals), len(payload)/4) / 8
	if !useAVX2 || blocks == 0 {
		return 0
	}
	addAVX2(unsafe.SliceData(vals), unsafe.SliceData(payload), blocks)
	return 8 * blocks
}
