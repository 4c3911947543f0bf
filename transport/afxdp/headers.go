package afxdp

import (
	"encoding/binary"
	"net/netip"
)

const (
	ethHeaderLen  = 14
	vlanTagLen    = 4
	ipv4HeaderLen = 20
	udpHeaderLen  = 8
	// headersLen is what an outgoing datagram carries before its payload.
	headersLen = ethHeaderLen + ipv4HeaderLen + udpHeaderLen

	etherTypeIPv4 = 0x0800
	etherTypeVLAN = 0x8100
	protoUDP      = 17
	defaultTTL    = 64
)

// checksum is the Internet checksum (RFC 1071) of b folded into 16 bits
// and complemented, continuing from the partial sum initial.
func checksum(b []byte, initial uint32) uint16 {
	sum := initial
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// header is the template of a Conn's outgoing headers: Ethernet, IPv4 and
// UDP with everything filled in that stays the same from one datagram to
// the next (source MAC, source address and port, protocol, TTL, DF).
type header [headersLen]byte

func newHeader(srcMAC [6]byte, src netip.AddrPort) header {
	var h header
	copy(h[6:12], srcMAC[:])
	binary.BigEndian.PutUint16(h[12:14], etherTypeIPv4)
	ip := h[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
	ip[0] = 0x45 // version 4, 5 words
	ip[6] = 0x40 // don't fragment
	ip[8] = defaultTTL
	ip[9] = protoUDP
	a := src.Addr().Unmap().As4()
	copy(ip[12:16], a[:])
	binary.BigEndian.PutUint16(h[34:36], src.Port())
	return h
}

// build writes the headers of a datagram of n payload bytes to dst (whose
// next hop has the MAC dstMAC) into b[:headersLen]. With udpSum the UDP
// checksum covers the payload, which must already sit at b[headersLen:];
// otherwise the checksum is 0, which IPv4 allows and receivers take as
// "not computed".
func (h *header) build(b []byte, dstMAC [6]byte, dst netip.AddrPort, n int, id uint16, udpSum bool) {
	b = b[:headersLen+n]
	copy(b, h[:])
	copy(b[0:6], dstMAC[:])
	ip := b[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipv4HeaderLen+udpHeaderLen+n))
	binary.BigEndian.PutUint16(ip[4:6], id)
	a := dst.Addr().Unmap().As4()
	copy(ip[16:20], a[:])
	binary.BigEndian.PutUint16(ip[10:12], checksum(ip, 0))
	udp := b[ethHeaderLen+ipv4HeaderLen : headersLen]
	binary.BigEndian.PutUint16(udp[2:4], dst.Port())
	binary.BigEndian.PutUint16(udp[4:6], uint16(udpHeaderLen+n))
	if udpSum {
		binary.BigEndian.PutUint16(udp[6:8], udpChecksum(ip[12:16], ip[16:20], b[ethHeaderLen+ipv4HeaderLen:]))
	}
}

// udpChecksum is the UDP checksum of seg (header with a zero checksum field
// and payload) between src and dst, never 0 (RFC 768: 0 means none).
func udpChecksum(src, dst, seg []byte) uint16 {
	var sum uint32
	sum += uint32(src[0])<<8 | uint32(src[1])
	sum += uint32(src[2])<<8 | uint32(src[3])
	sum += uint32(dst[0])<<8 | uint32(dst[1])
	sum += uint32(dst[2])<<8 | uint32(dst[3])
	sum += protoUDP
	sum += uint32(len(seg))
	c := checksum(seg, sum)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// packet is where a received frame's UDP payload sits and whom it is from
// and for.
type packet struct {
	off, n  int // payload offset in the frame and length
	src     netip.AddrPort
	dstIP   [4]byte
	dstPort uint16
}

// parse finds the UDP payload of an Ethernet frame carrying IPv4 (with at
// most one 802.1Q tag). It reports false for anything else and for frames
// whose lengths or IPv4 header checksum do not hold together. Trailing
// Ethernet padding is not part of the payload. The UDP checksum is not
// checked.
func parse(f []byte) (packet, bool) {
	var p packet
	if len(f) < ethHeaderLen {
		return p, false
	}
	off := ethHeaderLen
	et := binary.BigEndian.Uint16(f[12:14])
	if et == etherTypeVLAN {
		if len(f) < ethHeaderLen+vlanTagLen {
			return p, false
		}
		et = binary.BigEndian.Uint16(f[16:18])
		off += vlanTagLen
	}
	if et != etherTypeIPv4 || len(f) < off+ipv4HeaderLen {
		return p, false
	}
	ip := f[off:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < ipv4HeaderLen || len(ip) < ihl+udpHeaderLen {
		return p, false
	}
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if total < ihl+udpHeaderLen || total > len(ip) {
		return p, false
	}
	if ip[9] != protoUDP || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 {
		return p, false
	}
	if checksum(ip[:ihl], 0) != 0 {
		return p, false
	}
	udp := ip[ihl:total]
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if ulen < udpHeaderLen || ulen > len(udp) {
		return p, false
	}
	p.off = off + ihl + udpHeaderLen
	p.n = ulen - udpHeaderLen
	p.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(udp[0:2]))
	p.dstIP = [4]byte(ip[16:20])
	p.dstPort = binary.BigEndian.Uint16(udp[2:4])
	return p, true
}
