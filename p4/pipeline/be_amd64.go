//go:build amd64 && !purego

package pipeline

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAVX2 selects the vector kernels for the payload loops; tests switch it
// off to compare with the plain loops.
var useAVX2 = cpu.X86.HasAVX2

// swap32 reverses the bytes of every 32-bit element (VPSHUFB works within
// each 128-bit half).
var swap32 = [32]byte{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12}

// The kernels handle blocks of 8 elements: load 32 bytes, swap, and add to
// the values (addBEAVX2) or store (swapAVX2, in either direction).
//
//go:noescape
func addBEAVX2(vals *int32, payload *byte, blocks int, shuffle *[32]byte)

//go:noescape
func swapAVX2(dst, src *byte, blocks int, shuffle *[32]byte)

func int32Bytes(v []int32) *byte { return (*byte)(unsafe.Pointer(unsafe.SliceData(v))) }

// The fast paths do the longest multiple of 8 elements and return how many
// they did; len(payload) >= 4*len(vals).
func addBEFast(vals []int32, payload []byte) int {
	blocks := len(vals) / 8
	if !useAVX2 || blocks == 0 {
		return 0
	}
	addBEAVX2(unsafe.SliceData(vals), unsafe.SliceData(payload), blocks, &swap32)
	return 8 * blocks
}

func copyBEFast(vals []int32, payload []byte) int {
	return swapFast(int32Bytes(vals), payload, len(vals))
}

func storeBEFast(dst []byte, vals []int32) int {
	return swapFast(unsafe.SliceData(dst), unsafe.Slice(int32Bytes(vals), 4*len(vals)), len(vals))
}

// swapFast copies n elements' worth of src to dst with their bytes reversed.
func swapFast(dst *byte, src []byte, n int) int {
	blocks := n / 8
	if !useAVX2 || blocks == 0 {
		return 0
	}
	swapAVX2(dst, unsafe.SliceData(src), blocks, &swap32)
	return 8 * blocks
}
