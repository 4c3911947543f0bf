package bmv2

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/switchml/switchml-go/wire"
)

// Ethernet / IPv4 / UDP framing of SwitchML packets, built and checked by
// hand so that the test depends on neither BMv2's nor the kernel's view of
// them.

const (
	ethLen   = 14
	ipv4Len  = 20
	udpLen   = 8
	elements = 64 // the v1model program's only packet size (size code 1)
	// frameLen is a compatible SwitchML frame with 64 elements.
	frameLen   = ethLen + ipv4Len + udpLen + wire.CompatLen + 4*elements
	replyTTL   = 64
	etherIPv4  = 0x0800
	ipProtoUDP = 17
)

// endpoint is one end of a SwitchML exchange on the wire.
type endpoint struct {
	MAC  [6]byte
	Addr netip.AddrPort
}

func (e endpoint) String() string {
	return fmt.Sprintf("%x/%v", e.MAC, e.Addr)
}

// buildFrame returns the Ethernet frame carrying a SwitchML packet (header
// h, values vals) from src to dst, with a valid IPv4 checksum and a zero UDP
// checksum.
func buildFrame(src, dst endpoint, ipID uint16, h wire.Header, vals []int32) ([]byte, error) {
	if len(vals) != h.Elements {
		return nil, fmt.Errorf("%d values for a header of %d elements", len(vals), h.Elements)
	}
	sml, err := h.Append(nil)
	if err != nil {
		return nil, err
	}
	for _, v := range vals {
		sml = binary.BigEndian.AppendUint32(sml, uint32(v))
	}
	b := make([]byte, 0, ethLen+ipv4Len+udpLen+len(sml))
	b = append(b, dst.MAC[:]...)
	b = append(b, src.MAC[:]...)
	b = binary.BigEndian.AppendUint16(b, etherIPv4)
	ip := len(b)
	b = append(b, 0x45, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(ipv4Len+udpLen+len(sml)))
	b = binary.BigEndian.AppendUint16(b, ipID)
	b = append(b, 0x40, 0, 64, ipProtoUDP, 0, 0) // DF, TTL 64, UDP, checksum
	s4, d4 := src.Addr.Addr().As4(), dst.Addr.Addr().As4()
	b = append(b, s4[:]...)
	b = append(b, d4[:]...)
	binary.BigEndian.PutUint16(b[ip+10:], ^onesSum(b[ip:ip+ipv4Len]))
	b = binary.BigEndian.AppendUint16(b, src.Addr.Port())
	b = binary.BigEndian.AppendUint16(b, dst.Addr.Port())
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen+len(sml)))
	b = binary.BigEndian.AppendUint16(b, 0)
	return append(b, sml...), nil
}

// onesSum is the 16-bit ones' complement sum of b (the IPv4 header checksum
// is its complement; a header with a valid checksum sums to 0xffff).
func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// frame is a received frame taken apart.
type frame struct {
	Raw      []byte
	Src, Dst endpoint
	Hdr      wire.Header
	Vals     []int32
	SML      []byte // the UDP payload: SwitchML header and values
	problems []string
}

// parseFrame takes a SwitchML frame apart, noting what is not as a reply
// from the switch must be (the checks that need no expectation).
func parseFrame(b []byte) frame {
	f := frame{Raw: b}
	bad := func(format string, args ...any) { f.problems = append(f.problems, fmt.Sprintf(format, args...)) }
	if len(b) < ethLen+ipv4Len+udpLen {
		bad("frame of %d bytes is too short for Ethernet/IPv4/UDP", len(b))
		return f
	}
	copy(f.Dst.MAC[:], b[0:6])
	copy(f.Src.MAC[:], b[6:12])
	if et := binary.BigEndian.Uint16(b[12:]); et != etherIPv4 {
		bad("EtherType %#04x, want IPv4", et)
		return f
	}
	ip := b[ethLen:]
	if ip[0] != 0x45 {
		bad("IPv4 version/IHL byte %#02x, want 0x45", ip[0])
		return f
	}
	if sum := onesSum(ip[:ipv4Len]); sum != 0xffff {
		bad("IPv4 header checksum %#04x does not verify (sum %#04x)", binary.BigEndian.Uint16(ip[10:]), sum)
	}
	if ip[8] != replyTTL {
		bad("IPv4 TTL %d, want %d", ip[8], replyTTL)
	}
	if ip[9] != ipProtoUDP {
		bad("IPv4 protocol %d, want UDP", ip[9])
		return f
	}
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if total != len(ip) {
		bad("IPv4 total length %d, but %d bytes follow the Ethernet header", total, len(ip))
	}
	udp := ip[ipv4Len:]
	f.Src.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(udp[0:]))
	f.Dst.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(udp[2:]))
	if ul := int(binary.BigEndian.Uint16(udp[4:])); ul != len(udp) {
		bad("UDP length %d, but %d bytes follow the IPv4 header", ul, len(udp))
	}
	if cs := binary.BigEndian.Uint16(udp[6:]); cs != 0 {
		bad("UDP checksum %#04x, want 0", cs)
	}
	f.SML = udp[udpLen:]
	h, payload, err := wire.Parse(f.SML)
	if err != nil {
		bad("SwitchML header: %v", err)
		return f
	}
	f.Hdr = h
	f.Vals = make([]int32, h.Elements)
	for i := range f.Vals {
		f.Vals[i] = int32(binary.BigEndian.Uint32(payload[4*i:]))
	}
	return f
}

func (f frame) String() string {
	return fmt.Sprintf("%v -> %v seq %d packet %#x slot %d set %d exp %d/%d, %d values",
		f.Src, f.Dst, f.Hdr.Seq, f.Hdr.PacketID, f.Hdr.Slot, f.Hdr.Set, f.Hdr.Exp0, f.Hdr.Exp1, len(f.Vals))
}

// result is what one rank must receive: from the switch, to its reply
// address, the request's header with the slot's exponent, and the sums.
type result struct {
	Src, Dst endpoint
	Hdr      wire.Header
	Vals     []int32
}

// checkReply compares a received frame with what was expected of it.
func checkReply(b []byte, want result) []string {
	f := parseFrame(b)
	out := f.problems
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if f.Hdr.Elements == 0 && len(out) > 0 {
		return out
	}
	if len(b) != frameLen {
		bad("frame of %d bytes, want %d", len(b), frameLen)
	}
	if f.Src != want.Src {
		bad("source %v, want the switch's %v", f.Src, want.Src)
	}
	if f.Dst != want.Dst {
		bad("destination %v, want the rank's reply address %v", f.Dst, want.Dst)
	}
	if f.Hdr != want.Hdr {
		bad("SwitchML header %+v, want %+v", f.Hdr, want.Hdr)
	}
	if !slices.Equal(f.Vals, want.Vals) {
		n := 0
		for i := range min(len(f.Vals), len(want.Vals)) {
			if f.Vals[i] != want.Vals[i] {
				if n < 4 {
					bad("value[%d] = %d, want %d", i, f.Vals[i], want.Vals[i])
				}
				n++
			}
		}
		if n > 4 || len(f.Vals) != len(want.Vals) {
			bad("%d values differ of %d (want %d values)", n, len(f.Vals), len(want.Vals))
		}
	}
	return out
}

// checkStep compares what each rank received after one packet with what
// it should have: got[r] are the frames rank r received, want[r] its
// expected result, nil for nothing.
func checkStep(got [][][]byte, want []*result) []string {
	var out []string
	for r := range want {
		var frames [][]byte
		if r < len(got) {
			frames = got[r]
		}
		switch {
		case want[r] == nil && len(frames) > 0:
			for _, b := range frames {
				out = append(out, fmt.Sprintf("rank %d: unexpected frame %v", r, parseFrame(b)))
			}
		case want[r] != nil && len(frames) != 1:
			out = append(out, fmt.Sprintf("rank %d: %d frames, want exactly one", r, len(frames)))
			for _, b := range frames {
				for _, p := range checkReply(b, *want[r]) {
					out = append(out, fmt.Sprintf("rank %d: %s", r, p))
				}
			}
		case want[r] != nil:
			for _, p := range checkReply(frames[0], *want[r]) {
				out = append(out, fmt.Sprintf("rank %d: %s", r, p))
			}
		}
	}
	for r := len(want); r < len(got); r++ {
		if len(got[r]) > 0 {
			out = append(out, fmt.Sprintf("port of unknown rank %d: %d frames", r, len(got[r])))
		}
	}
	return out
}
