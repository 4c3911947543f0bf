package afxdp

import "encoding/binary"

// Netlink message layout, shared by the Linux code and its tests.
const (
	nlmsgHdrLen = 16
	rtaHdrLen   = 4
)

func nlAlign(n int) int { return (n + 3) &^ 3 }

// nlAttr is one route netlink attribute.
type nlAttr struct {
	typ  uint16
	data []byte
}

// parseAttrs splits b into route netlink attributes, ignoring a truncated
// tail. The nested flag (0x8000) and byte-order flag are cleared from the
// types.
func parseAttrs(b []byte, out []nlAttr) []nlAttr {
	for len(b) >= rtaHdrLen {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4]) &^ 0xc000
		if l < rtaHdrLen || l > len(b) {
			break
		}
		out = append(out, nlAttr{typ: t, data: b[rtaHdrLen:l]})
		if nlAlign(l) >= len(b) {
			break
		}
		b = b[nlAlign(l):]
	}
	return out
}

// appendAttr appends an attribute of type t holding data to b.
func appendAttr(b []byte, t uint16, data []byte) []byte {
	var h [rtaHdrLen]byte
	binary.NativeEndian.PutUint16(h[0:2], uint16(rtaHdrLen+len(data)))
	binary.NativeEndian.PutUint16(h[2:4], t)
	b = append(b, h[:]...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nlMessage is one message of a netlink reply.
type nlMessage struct {
	typ  uint16
	seq  uint32
	data []byte
}

// parseMessages splits a netlink datagram into messages, ignoring a
// truncated tail.
func parseMessages(b []byte, out []nlMessage) []nlMessage {
	for len(b) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < nlmsgHdrLen || l > len(b) {
			break
		}
		out = append(out, nlMessage{
			typ:  binary.NativeEndian.Uint16(b[4:6]),
			seq:  binary.NativeEndian.Uint32(b[8:12]),
			data: b[nlmsgHdrLen:l],
		})
		if nlAlign(l) >= len(b) {
			break
		}
		b = b[nlAlign(l):]
	}
	return out
}
