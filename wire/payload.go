package wire

import (
	"encoding/binary"
	"slices"
)

// ReadPayload, AddPayload and PutPayload work like copy: they handle
// min(len(vals), len(payload)/4) elements. On amd64 with AVX2 the byte swaps
// run eight elements per step; the loops below are the definition the vector
// kernels must match, and the build tag purego selects them everywhere.

// ReadPayload sets vals from a big-endian int32 payload and returns the
// number of values set, min(len(vals), len(payload)/4).
func ReadPayload(vals []int32, payload []byte) int {
	k := min(len(vals), len(payload)/4)
	vals, payload = vals[:k], payload[:4*k]
	for i := swapFast(int32Bytes(vals), payload); i < k; i++ {
		vals[i] = int32(binary.BigEndian.Uint32(payload[4*i : 4*i+4]))
	}
	return k
}

// AddPayload adds a big-endian int32 payload to vals element by element,
// wrapping on overflow as the switch's ALU does, and returns the number of
// values added, min(len(vals), len(payload)/4).
func AddPayload(vals []int32, payload []byte) int {
	k := min(len(vals), len(payload)/4)
	vals, payload = vals[:k], payload[:4*k]
	for i := addFast(vals, payload); i < k; i++ {
		vals[i] += int32(binary.BigEndian.Uint32(payload[4*i : 4*i+4]))
	}
	return k
}

// PutPayload writes vals as big-endian int32 into payload and returns the
// number of values written, min(len(vals), len(payload)/4).
func PutPayload(payload []byte, vals []int32) int {
	k := min(len(vals), len(payload)/4)
	vals, payload = vals[:k], payload[:4*k]
	for i := swapFast(payload, int32Bytes(vals)); i < k; i++ {
		binary.BigEndian.PutUint32(payload[4*i:4*i+4], uint32(vals[i]))
	}
	return k
}

// AppendPayload appends vals as big-endian int32 to b, typically right
// after a header written by Header.Append.
func AppendPayload(b []byte, vals []int32) []byte {
	off := len(b)
	b = slices.Grow(b, 4*len(vals))[:off+4*len(vals)]
	PutPayload(b[off:], vals)
	return b
}
