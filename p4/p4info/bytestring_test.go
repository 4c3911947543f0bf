package p4info

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func TestBytesIsCanonical(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		want []byte
	}{
		{0, []byte{0}}, // zero is one byte, never empty
		{1, []byte{1}},
		{255, []byte{255}},
		{256, []byte{1, 0}},
		{0xBEE0, []byte{0xbe, 0xe0}},
		{0x0a000001, []byte{10, 0, 0, 1}},
		{1 << 32, []byte{1, 0, 0, 0, 0}},
		{1<<64 - 1, bytes.Repeat([]byte{0xff}, 8)},
	} {
		if got := Bytes(tc.v); !bytes.Equal(got, tc.want) {
			t.Errorf("Bytes(%#x) = %x, want %x", tc.v, got, tc.want)
		}
	}
}

// decodeCase is a bytestring read for a width: the value it holds, or (ok
// false) an error wrapping ErrOutOfRange.
type decodeCase[T comparable] struct {
	b     []byte
	width int
	want  T
	ok    bool
}

func checkDecode[T comparable](t *testing.T, name string, decode func([]byte, int) (T, error), cases []decodeCase[T]) {
	t.Helper()
	for _, tc := range cases {
		got, err := decode(tc.b, tc.width)
		switch {
		case tc.ok && (err != nil || got != tc.want):
			t.Errorf("%s(%x, %d) = %v, %v; want %v", name, tc.b, tc.width, got, err, tc.want)
		case !tc.ok && !errors.Is(err, ErrOutOfRange):
			t.Errorf("%s(%x, %d) = %v, %v; want an error wrapping ErrOutOfRange", name, tc.b, tc.width, got, err)
		}
	}
}

func TestUint(t *testing.T) {
	checkDecode(t, "Uint", Uint, []decodeCase[uint64]{
		{[]byte{0x63}, 8, 99, true},
		{[]byte{0, 0x63}, 16, 99, true},
		{[]byte{0, 0, 0x63}, 12, 99, true}, // leading zeros are accepted beyond the width's bytes
		{[]byte{0}, 1, 0, true},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}, 9, 7, true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 48, 1<<48 - 1, true},
		{bytes.Repeat([]byte{0xff}, 8), 64, 1<<64 - 1, true},
		{nil, 8, 0, false},
		{[]byte{}, 32, 0, false},
		{[]byte{1, 0x63}, 8, 0, false},
		{[]byte{0x10, 0x63}, 12, 0, false},
		{[]byte{0, 0x40, 0x63}, 12, 0, false},
		{[]byte{2}, 1, 0, false},
		{[]byte{1, 0, 0, 0, 0, 0, 0, 0, 0}, 64, 0, false}, // more than 64 bits
		{[]byte{1, 0, 0, 0, 0}, 32, 0, false},
	})
}

func TestUintReadsBytes(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xff, 0x100, 0xbee0, 1<<48 - 1, 1<<64 - 1} {
		if got, err := Uint(Bytes(v), 64); err != nil || got != v {
			t.Errorf("Uint(Bytes(%#x)) = %#x, %v", v, got, err)
		}
	}
}

func TestIntBytesIsCanonical(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		want []byte
	}{
		{0, []byte{0}},
		{1, []byte{1}},
		{-1, []byte{0xff}},
		{127, []byte{0x7f}},
		{128, []byte{0, 0x80}}, // the sign bit needs a byte of its own
		{-128, []byte{0x80}},
		{-129, []byte{0xff, 0x7f}},
		{-10, []byte{0xf6}},
		{-1 << 63, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
	} {
		if got := IntBytes(tc.v); !bytes.Equal(got, tc.want) {
			t.Errorf("IntBytes(%d) = %x, want %x", tc.v, got, tc.want)
		}
	}
}

func TestInt(t *testing.T) {
	checkDecode(t, "Int", Int, []decodeCase[int64]{
		{[]byte{0x9d}, 8, -99, true},
		{[]byte{0xff, 0x9d}, 8, -99, true}, // sign extension is accepted
		{[]byte{0xfd, 0x1d}, 12, -739, true},
		{[]byte{0, 0}, 16, 0, true},
		{[]byte{0x07, 0xff}, 12, 2047, true},
		{[]byte{0xf8, 0x00}, 12, -2048, true},
		{[]byte{0, 0x9d}, 8, 0, false}, // +157 does not fit int<8>
		{[]byte{0x8d, 0x1d}, 12, 0, false},
		{[]byte{0x08, 0x00}, 12, 0, false},
		{[]byte{0x80, 0, 0, 0, 0, 0, 0, 0, 0}, 64, 0, false},
		{nil, 16, 0, false},
	})
	for _, v := range []int64{0, 1, -1, 127, -128, 128, -129, 1 << 40, -(1 << 40), 1<<63 - 1, -1 << 63} {
		if got, err := Int(IntBytes(v), 64); err != nil || got != v {
			t.Errorf("Int(IntBytes(%d)) = %d, %v", v, got, err)
		}
	}
}

func TestIPv4(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want uint32
		ok   bool
	}{
		{"10.0.0.1", 0x0a000001, true},
		{"0.0.0.0", 0, true},
		{"255.255.255.255", 0xffffffff, true},
		{"::ffff:192.168.1.2", 0xc0a80102, true}, // IPv4-mapped
		{"::1", 0, false},
		{"fe80::1", 0, false},
	} {
		got, err := IPv4(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("IPv4(%s) = %#x, %v; want %#x, ok %v", tc.addr, got, err, tc.want, tc.ok)
		}
		if tc.ok {
			if back := AddrFromIPv4(got); back != netip.MustParseAddr(tc.addr).Unmap() {
				t.Errorf("AddrFromIPv4(%#x) = %v, want %s", got, back, tc.addr)
			}
		}
	}
	if _, err := IPv4(netip.Addr{}); err == nil {
		t.Error("IPv4 of the zero Addr gave no error")
	}
}

func TestMAC(t *testing.T) {
	for _, tc := range []struct {
		mac [6]byte
		v   uint64
	}{
		{[6]byte{}, 0},
		{[6]byte{0, 0, 0, 0, 0xbe, 0xef}, 0xbeef},
		{[6]byte{2, 0x53, 0x4d, 0x4c, 0, 0xfe}, 0x02534d4c00fe},
		{[6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1<<48 - 1},
	} {
		if got := MAC(tc.mac); got != tc.v {
			t.Errorf("MAC(%x) = %#x, want %#x", tc.mac, got, tc.v)
		}
		if got := MACFrom(tc.v); got != tc.mac {
			t.Errorf("MACFrom(%#x) = %x, want %x", tc.v, got, tc.mac)
		}
	}
}
