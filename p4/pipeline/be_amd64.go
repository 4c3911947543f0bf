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
// or store the values (or, for storeBEAVX2, the reverse).
//
//go:noescape
func addBEAVX2(vals *int32, payload *byte, blocks int, shuffle *[32]byte)

//go:noescape
func copyBEAVX2(vals *int32, payload *byte, blocks int, shuffle *[32]byte)

//go:noescape
func storeBEAVX2(dst *byte, vals *int32, blocks int, shuffle *[32]byte)

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
	blocks := len(vals) / 8
	if !useAVX2 || blocks == 0 {
		return 0
	}
	copyBEAVX2(unsafe.SliceData(vals), unsafe.SliceData(payload), blocks, &swap32)
	return 8 * blocks
}

func storeBEFast(dst []byte, vals []int32) int {
	blocks := len(vals) / 8
	if !useAVX2 || blocks == 0 {
		return 0
	}
	storeBEAVX2(unsafe.SliceData(dst), unsafe.SliceData(vals), blocks, &swap32)
	return 8 * blocks
}
