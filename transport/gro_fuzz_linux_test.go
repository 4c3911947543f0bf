package transport

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// groControl builds the control message the kernel attaches to a coalesced
// read: SOL_UDP / UDP_GRO with the segment size.
func groControl(seg int32) []byte {
	b := make([]byte, unix.CmsgSpace(4))
	binary.NativeEndian.PutUint64(b[0:8], uint64(unix.CmsgLen(4))) // cmsg_len
	binary.NativeEndian.PutUint32(b[8:12], unix.SOL_UDP)
	binary.NativeEndian.PutUint32(b[12:16], unix.UDP_GRO)
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(seg))
	return b
}

// FuzzGROSplit: whatever control bytes and data a read returns, the splitter
// neither panics nor loses, duplicates, reorders or invents a byte, and
// never hands out a datagram longer than the segment size.
func FuzzGROSplit(f *testing.F) {
	f.Add(groControl(256), []byte("0123456789abcdef"), int32(4))
	f.Add(groControl(0), []byte("x"), int32(0))
	f.Add([]byte{}, []byte{}, int32(0))
	f.Add(groControl(-5), bytes.Repeat([]byte{7}, 1000), int32(-5))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, []byte("abc"), int32(1))
	addr := netip.MustParseAddrPort("10.0.0.1:48864")
	f.Fuzz(func(t *testing.T, ctl, data []byte, seg int32) {
		if len(ctl) == 0 {
			ctl = groControl(seg)
		}
		got := groSegmentSize(ctl)
		segs, merged := splitCoalesced(nil, data, addr, got)
		var joined []byte
		for i, s := range segs {
			if s.addr != addr {
				t.Fatalf("segment %d from %v", i, s.addr)
			}
			if got > 0 && got <= len(data) && len(s.buf) > got {
				t.Fatalf("segment %d has %d bytes, segment size %d", i, len(s.buf), got)
			}
			if len(data) > 0 && len(s.buf) == 0 {
				t.Fatalf("empty segment %d out of %d bytes", i, len(data))
			}
			joined = append(joined, s.buf...)
		}
		if !bytes.Equal(joined, data) {
			t.Fatalf("segments join to %d bytes, want the %d read", len(joined), len(data))
		}
		switch {
		case len(data) == 0 && len(segs) != 1:
			t.Fatalf("empty read gave %d datagrams, want one empty one", len(segs))
		case merged != 0 && merged != len(segs):
			t.Fatalf("merged %d, segments %d", merged, len(segs))
		case merged == 0 && len(segs) != 1:
			t.Fatalf("%d segments reported as not coalesced", len(segs))
		}
	})
}
