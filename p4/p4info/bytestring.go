package p4info

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrOutOfRange marks a bytestring whose value does not fit the bit width it
// was read for (or that is empty), so that a P4Runtime server can answer with
// the OUT_OF_RANGE code the specification asks for.
var ErrOutOfRange = errors.New("out of range")

// The P4Runtime specification ("Bytestrings") carries every bit<W> value as a
// big-endian bytestring. A sender should use the canonical form, the fewest
// bytes that hold the value (zero is a single 0x00 byte); a receiver must also
// accept leading zero bytes as long as the value fits in W bits.

// Bytes returns the canonical (shortest) P4Runtime bytestring of v.
func Bytes(v uint64) []byte {
	n := 1
	for x := v >> 8; x != 0; x >>= 8 {
		n++
	}
	return lowBytes(v, n)
}

// lowBytes is the n low-order bytes of u, big-endian.
func lowBytes(u uint64, n int) []byte {
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(u)
		u >>= 8
	}
	return b
}

// Uint reads a bytestring (canonical or with leading zero bytes) that must
// hold a bit<width> value, width at most 64. An empty bytestring, or a value
// that needs more than width bits, is an error wrapping ErrOutOfRange.
func Uint(b []byte, width int) (uint64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("empty bytestring (a %d-bit value needs at least one byte): %w", width, ErrOutOfRange)
	}
	i := 0
	for i < len(b)-1 && b[i] == 0 {
		i++
	}
	b = b[i:]
	if len(b) > 8 {
		return 0, fmt.Errorf("value 0x%x does not fit in %d bits: %w", b, width, ErrOutOfRange)
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	if width < 64 && v>>uint(max(width, 0)) != 0 {
		return 0, fmt.Errorf("value %d does not fit in %d bits: %w", v, width, ErrOutOfRange)
	}
	return v, nil
}

// IntBytes returns the canonical (shortest) two's complement bytestring of an
// int<W> value.
func IntBytes(v int64) []byte {
	n := 1
	for n < 8 {
		lo, hi := -(int64(1) << uint(8*n-1)), int64(1)<<uint(8*n-1)-1
		if v >= lo && v <= hi {
			break
		}
		n++
	}
	return lowBytes(uint64(v), n)
}

// Int reads a two's complement bytestring (canonical or sign-extended to any
// length) that must hold an int<width> value, width 1 to 64. An empty
// bytestring, or a value outside int<width>, is an error wrapping
// ErrOutOfRange.
func Int(b []byte, width int) (int64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("empty bytestring (an int<%d> needs at least one byte): %w", width, ErrOutOfRange)
	}
	neg := b[0]&0x80 != 0
	fill := byte(0)
	if neg {
		fill = 0xff
	}
	// Sign-extension bytes carry no value as long as the byte after them
	// keeps the same sign.
	for len(b) > 1 && b[0] == fill && (b[1]&0x80 != 0) == neg {
		b = b[1:]
	}
	if len(b) > 8 {
		return 0, fmt.Errorf("value 0x%x does not fit in int<%d>: %w", b, width, ErrOutOfRange)
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
		if width < 1 {
			return 0, fmt.Errorf("value %d does not fit in int<%d>: %w", v, width, ErrOutOfRange)
		}
		lo, hi := -(int64(1) << uint(width-1)), int64(1)<<uint(width-1)-1
		if v < lo || v > hi {
			return 0, fmt.Errorf("value %d does not fit in int<%d>: %w", v, width, ErrOutOfRange)
		}
	}
	return v, nil
}

// IPv4 returns the bit<32> value of an IPv4 address (an IPv4-mapped IPv6
// address counts as its IPv4 address), as the pipeline's tables hold it.
func IPv4(a netip.Addr) (uint32, error) {
	a = a.Unmap()
	if !a.Is4() {
		return 0, fmt.Errorf("%v is not an IPv4 address (the pipeline's tables hold IPv4 addresses only)", a)
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), nil
}

// AddrFromIPv4 is the IPv4 address of a bit<32> value.
func AddrFromIPv4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// MAC returns the bit<48> value of a MAC address.
func MAC(mac [6]byte) uint64 {
	var v uint64
	for _, b := range mac {
		v = v<<8 | uint64(b)
	}
	return v
}

// MACFrom is the MAC address of a bit<48> value (bits above 48 are dropped).
func MACFrom(v uint64) [6]byte {
	var mac [6]byte
	for i := 5; i >= 0; i-- {
		mac[i] = byte(v)
		v >>= 8
	}
	return mac
}
