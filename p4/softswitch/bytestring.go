package softswitch

import (
	"google.golang.org/grpc/codes"
)

// decodeUnsigned reads a P4Runtime bytestring (big-endian, any length, leading
// zero bytes allowed) that must fit in width bits (width <= 64).
func decodeUnsigned(b []byte, width int) (uint64, error) {
	if len(b) == 0 {
		return 0, errorf(codes.OutOfRange, "empty bytestring (a %d-bit value needs at least one byte)", width)
	}
	i := 0
	for i < len(b)-1 && b[i] == 0 {
		i++
	}
	b = b[i:]
	if len(b) > 8 {
		return 0, errorf(codes.OutOfRange, "value 0x%x does not fit in %d bits", b, width)
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	if width < 64 && v>>uint(width) != 0 {
		return 0, errorf(codes.OutOfRange, "value %d does not fit in %d bits", v, width)
	}
	return v, nil
}

// decodeSigned reads a two's complement bytestring (sign-extended to any
// length) that must fit in an int<width>.
func decodeSigned(b []byte, width int) (int64, error) {
	if len(b) == 0 {
		return 0, errorf(codes.OutOfRange, "empty bytestring (an int<%d> needs at least one byte)", width)
	}
	neg := b[0]&0x80 != 0
	fill := byte(0)
	if neg {
		fill = 0xff
	}
	// Drop sign-extension bytes while the next byte keeps the same sign.
	for len(b) > 1 && b[0] == fill && (b[1]&0x80 != 0) == neg {
		b = b[1:]
	}
	if len(b) > 8 {
		return 0, errorf(codes.OutOfRange, "value 0x%x does not fit in int<%d>", b, width)
	}
	var u uint64
	if neg {
		u = ^uint64(0)
	}
	for _, c := range b {
		u = u<<8 | uint64(c)
	}
	v := int64(u)
	if width < 64 {
		lo, hi := -(int64(1) << uint(width-1)), int64(1)<<uint(width-1)-1
		if v < lo || v > hi {
			return 0, errorf(codes.OutOfRange, "value %d does not fit in int<%d>", v, width)
		}
	}
	return v, nil
}

// encodeSigned returns the canonical (shortest) two's complement bytestring.
func encodeSigned(v int64) []byte {
	n := 1
	for n < 8 {
		lo, hi := -(int64(1) << uint(8*n-1)), int64(1)<<uint(8*n-1)-1
		if v >= lo && v <= hi {
			break
		}
		n++
	}
	b := make([]byte, n)
	u := uint64(v)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(u)
		u >>= 8
	}
	return b
}

// fixedBytes encodes v in exactly n big-endian bytes (for MAC addresses in
// tests and clients that prefer fixed widths).
func fixedBytes(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return b
}
