package afxdp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/transport"
)

func TestChecksumKnownVector(t *testing.T) {
	// IPv4 header from RFC 1071 practice (Wikipedia's example): the
	// checksum of this header with a zero checksum field is 0xb861.
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := checksum(h, 0); got != 0xb861 {
		t.Fatalf("checksum = %#04x, want 0xb861", got)
	}
	binary.BigEndian.PutUint16(h[10:], 0xb861)
	if got := checksum(h, 0); got != 0 {
		t.Fatalf("checksum over a header with its checksum = %#04x, want 0", got)
	}
	// Odd length: the last byte is the high half of a word.
	if got, want := checksum([]byte{0x01, 0x02, 0x03}, 0), ^uint16(0x0102+0x0300); got != want {
		t.Fatalf("odd-length checksum = %#04x, want %#04x", got, want)
	}
}

func TestUDPChecksumKnownVector(t *testing.T) {
	// 10.0.0.1:1000 -> 10.0.0.2:2000, payload "hi": pseudo header sum
	// 0x0a00+0x0001+0x0a00+0x0002+0x0011+0x000a, header 0x03e8+0x07d0+0x000a,
	// payload 0x6869.
	seg := []byte{0x03, 0xe8, 0x07, 0xd0, 0x00, 0x0a, 0x00, 0x00, 'h', 'i'}
	var sum uint32 = 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 0x0011 + 0x000a + 0x03e8 + 0x07d0 + 0x000a + 0x6869
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	want := ^uint16(sum)
	if got := udpChecksum([]byte{10, 0, 0, 1}, []byte{10, 0, 0, 2}, seg); got != want {
		t.Fatalf("udpChecksum = %#04x, want %#04x", got, want)
	}
}

func buildFrame(t *testing.T, src, dst netip.AddrPort, payload []byte, udpSum bool) []byte {
	t.Helper()
	srcMAC := [6]byte{2, 0, 0, 0, 0, 1}
	dstMAC := [6]byte{2, 0, 0, 0, 0, 2}
	h := newHeader(srcMAC, src)
	f := make([]byte, headersLen+len(payload))
	copy(f[headersLen:], payload)
	h.build(f, dstMAC, dst, len(payload), 0x1234, udpSum)
	if !bytes.Equal(f[0:6], dstMAC[:]) || !bytes.Equal(f[6:12], srcMAC[:]) {
		t.Fatalf("MAC addresses = %x %x", f[0:6], f[6:12])
	}
	return f
}

func TestHeaderRoundTrip(t *testing.T) {
	src := netip.MustParseAddrPort("10.219.1.1:40000")
	dst := netip.MustParseAddrPort("10.219.1.2:5000")
	for _, n := range []int{0, 1, 64, 1472, 3000} {
		for _, sum := range []bool{false, true} {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*7 + n)
			}
			f := buildFrame(t, src, dst, payload, sum)
			ip := f[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
			if ip[0] != 0x45 || ip[8] != 64 || ip[9] != 17 || ip[6]&0x40 == 0 {
				t.Fatalf("IPv4 header fields wrong: % x", ip)
			}
			if got := int(binary.BigEndian.Uint16(ip[2:4])); got != 28+n {
				t.Fatalf("total length %d, want %d", got, 28+n)
			}
			if binary.BigEndian.Uint16(ip[4:6]) != 0x1234 {
				t.Fatalf("IPv4 id not set")
			}
			if checksum(ip, 0) != 0 {
				t.Fatalf("IPv4 header checksum does not verify")
			}
			udp := f[ethHeaderLen+ipv4HeaderLen:]
			if sum {
				// Verifying over the pseudo header gives 0.
				if binary.BigEndian.Uint16(udp[6:8]) == 0 {
					t.Fatalf("UDP checksum left 0")
				}
				var ps uint32 = uint32(ip[12])<<8 | uint32(ip[13])
				ps += uint32(ip[14])<<8 | uint32(ip[15])
				ps += uint32(ip[16])<<8 | uint32(ip[17])
				ps += uint32(ip[18])<<8 | uint32(ip[19])
				ps += 17 + uint32(len(udp))
				if c := checksum(udp, ps); c != 0 {
					t.Fatalf("UDP checksum does not verify (%#04x)", c)
				}
			} else if binary.BigEndian.Uint16(udp[6:8]) != 0 {
				t.Fatalf("UDP checksum %#04x, want 0", binary.BigEndian.Uint16(udp[6:8]))
			}
			p, ok := parse(f)
			if !ok {
				t.Fatalf("parse rejected a built frame of %d bytes", n)
			}
			if p.src != src || p.dstIP != dst.Addr().As4() || p.dstPort != dst.Port() {
				t.Fatalf("parse: src %v dst %v:%d, want %v %v", p.src, p.dstIP, p.dstPort, src, dst)
			}
			if !bytes.Equal(f[p.off:p.off+p.n], payload) {
				t.Fatalf("parse: payload differs")
			}
		}
	}
}

func TestParseVariants(t *testing.T) {
	src := netip.MustParseAddrPort("192.0.2.1:1111")
	dst := netip.MustParseAddrPort("192.0.2.2:2222")
	payload := []byte("payload!")
	base := buildFrame(t, src, dst, payload, false)

	// Ethernet padding after a short datagram is not payload.
	padded := append(append([]byte(nil), base...), make([]byte, 60)...)
	if p, ok := parse(padded); !ok || p.n != len(payload) {
		t.Fatalf("padded frame: ok %v n %d", ok, p.n)
	}

	// One 802.1Q tag.
	tagged := append([]byte(nil), base[:12]...)
	tagged = append(tagged, 0x81, 0x00, 0x00, 0x05)
	tagged = append(tagged, base[12:]...)
	if p, ok := parse(tagged); !ok || !bytes.Equal(tagged[p.off:p.off+p.n], payload) || p.src != src {
		t.Fatalf("VLAN frame: ok %v", ok)
	}

	// IPv4 options (IHL 6).
	opt := append([]byte(nil), base[:ethHeaderLen+ipv4HeaderLen]...)
	opt = append(opt, 1, 1, 1, 0) // NOP NOP NOP EOL
	opt = append(opt, base[ethHeaderLen+ipv4HeaderLen:]...)
	ip := opt[ethHeaderLen:]
	ip[0] = 0x46
	binary.BigEndian.PutUint16(ip[2:4], uint16(24+8+len(payload)))
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:12], checksum(ip[:24], 0))
	if p, ok := parse(opt); !ok || !bytes.Equal(opt[p.off:p.off+p.n], payload) {
		t.Fatalf("frame with IPv4 options: ok %v", ok)
	}

	bad := func(name string, mut func(f []byte) []byte) {
		t.Helper()
		f := mut(append([]byte(nil), base...))
		if _, ok := parse(f); ok {
			t.Errorf("%s: parse accepted it", name)
		}
	}
	fixSum := func(f []byte) {
		ip := f[ethHeaderLen : ethHeaderLen+ipv4HeaderLen]
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:12], checksum(ip, 0))
	}
	bad("ARP", func(f []byte) []byte { f[12], f[13] = 0x08, 0x06; return f })
	bad("truncated Ethernet", func(f []byte) []byte { return f[:10] })
	bad("truncated IPv4", func(f []byte) []byte { return f[:ethHeaderLen+10] })
	bad("IPv6 version", func(f []byte) []byte { f[14] = 0x65; fixSum(f); return f })
	bad("IHL 4", func(f []byte) []byte { f[14] = 0x44; fixSum(f); return f })
	bad("TCP", func(f []byte) []byte { f[14+9] = 6; fixSum(f); return f })
	bad("more fragments", func(f []byte) []byte { f[14+6] = 0x20; fixSum(f); return f })
	bad("fragment offset", func(f []byte) []byte { f[14+6], f[14+7] = 0x40, 0x01; fixSum(f); return f })
	bad("bad header checksum", func(f []byte) []byte { f[14+10] ^= 0xff; return f })
	bad("total length past the frame", func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[16:18], uint16(len(f)))
		fixSum(f)
		return f
	})
	bad("UDP length past the IPv4 packet", func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[38:40], uint16(9+len(payload)))
		return f
	})
	bad("UDP length below its header", func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[38:40], 7)
		return f
	})
}

func TestRxQueue(t *testing.T) {
	q := newRxQueue(4)
	for round := 0; round < 3; round++ {
		for i := 0; i < 4; i++ {
			if !q.push(rxEntry{frame: uint64(round*10 + i)}) {
				t.Fatalf("round %d: push %d refused", round, i)
			}
		}
		if q.push(rxEntry{frame: 99}) {
			t.Fatalf("push into a full queue accepted")
		}
		if q.count.Load() != 4 {
			t.Fatalf("count %d, want 4", q.count.Load())
		}
		for i := 0; i < 2; i++ {
			e, ok := q.pop()
			if !ok || e.frame != uint64(round*10+i) {
				t.Fatalf("round %d: pop %d = %v %v", round, i, e.frame, ok)
			}
		}
		// Wrap around: two more after two out.
		q.push(rxEntry{frame: 1000})
		q.push(rxEntry{frame: 1001})
		want := []uint64{uint64(round*10 + 2), uint64(round*10 + 3), 1000, 1001}
		for _, w := range want {
			e, ok := q.pop()
			if !ok || e.frame != w {
				t.Fatalf("round %d: pop = %v %v, want %d", round, e.frame, ok, w)
			}
		}
		if _, ok := q.pop(); ok || q.count.Load() != 0 {
			t.Fatalf("queue not empty after popping everything")
		}
	}
}

// fakeRing lays rings over ordinary memory: the producer and consumer
// both live in the test.
func fakeRing(size uint32, entry int) (ring, []byte) {
	mem := make([]byte, 64+int(size)*entry)
	return ringAt(mem, 0, 8, 16, size), mem
}

func TestRingsWrapAround(t *testing.T) {
	const size = 8
	r, mem := fakeRing(size, 8)
	prod := addrRing{r, addrsAt(mem, 64, size)}
	cons := addrRing{r, addrsAt(mem, 64, size)} // the other side's view of the same ring
	next, want := uint64(0), uint64(0)
	for round := 0; round < 50; round++ {
		// Start near the 32-bit wrap of the free-running indices.
		if round == 0 {
			*prod.producer, *prod.consumer = 1<<32-5, 1<<32-5
			prod.cachedProd, prod.cachedCons = 1<<32-5, 1<<32-5
			cons.cachedProd, cons.cachedCons = 1<<32-5, 1<<32-5
		}
		k := round%size + 1
		for i := 0; i < k; i++ {
			if !prod.push(next) {
				t.Fatalf("round %d: push %d refused with %d free", round, i, prod.free(1))
			}
			next++
		}
		if round%3 == 0 {
			// Fill it up: pushes beyond the size are refused.
			for prod.push(next) {
				next++
			}
			if prod.free(1) != 0 {
				t.Fatalf("full ring reports room")
			}
		}
		if cons.available(size) != 0 {
			t.Fatalf("entries visible before publish")
		}
		prod.publish()
		n := cons.available(size)
		if uint64(n) != next-want {
			t.Fatalf("round %d: available %d, want %d", round, n, next-want)
		}
		for i := uint32(0); i < n; i++ {
			if got := cons.at(i); got != want {
				t.Fatalf("round %d: entry %d = %d, want %d", round, i, got, want)
			}
			want++
		}
		cons.release(n)
		if prod.free(size) != size {
			t.Fatalf("round %d: ring not empty after release", round)
		}
	}

	// Descriptor rings: slots written past the producer, read in order.
	dr, dmem := fakeRing(size, 16)
	p := descRing{dr, descsAt(dmem, 64, size)}
	c := descRing{dr, descsAt(dmem, 64, size)}
	for round := 0; round < 20; round++ {
		k := uint32(round%size + 1)
		if p.free(k) < k {
			t.Fatalf("descriptor ring full")
		}
		for i := uint32(0); i < k; i++ {
			*p.slot(i) = xdpDesc{Addr: uint64(round*100) + uint64(i), Len: uint32(i)}
		}
		p.advance(k)
		p.publish()
		n := c.available(3)
		if n != min(k, 3) {
			t.Fatalf("available(3) = %d with %d published", n, k)
		}
		got := uint32(0)
		for got < k {
			n := c.available(3)
			for i := uint32(0); i < n; i++ {
				d := c.at(i)
				if d.Addr != uint64(round*100)+uint64(got+i) || d.Len != got+i {
					t.Fatalf("round %d: descriptor %d = %+v", round, got+i, d)
				}
			}
			c.release(n)
			got += n
		}
	}
	if *r.flags != 0 || prod.needWakeup() {
		t.Fatalf("flags set")
	}
	*r.flags = ringNeedWakeup
	if !prod.needWakeup() {
		t.Fatalf("need_wakeup flag not seen")
	}
}

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.Frames != DefaultFrames || o.FrameSize != DefaultFrameSize || o.Batch != transport.DefaultBatch || o.Mode != Auto {
		t.Fatalf("defaults = %+v, %v", o, err)
	}
	o, err = Options{Frames: 1000, FrameSize: 3000, Batch: 1000}.withDefaults()
	if err != nil || o.Frames != 1024 || o.FrameSize != 4096 || o.Batch != 256 {
		t.Fatalf("rounded = %+v, %v", o, err)
	}
	if _, err := (Options{Queue: -1}).withDefaults(); err == nil {
		t.Fatalf("negative queue accepted")
	}
	if _, err := (Options{Mode: 7}).withDefaults(); err == nil {
		t.Fatalf("unknown mode accepted")
	}
}

func TestListenOrUDPFallsBackOnLoopback(t *testing.T) {
	var logs []string
	logf := func(format string, args ...any) {
		logs = append(logs, strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
	c, err := ListenOrUDP(netip.MustParseAddrPort("127.0.0.1:0"), Options{}, transport.Options{}, logf)
	if err != nil {
		t.Fatalf("ListenOrUDP: %v", err)
	}
	defer c.Close()
	if _, ok := c.(*transport.Conn); !ok {
		t.Fatalf("ListenOrUDP on loopback returned %T, want *transport.Conn", c)
	}
	if len(logs) != 1 || !strings.HasPrefix(logs[0], "afxdp: ") || !strings.HasSuffix(logs[0], "; using UDP sockets") || strings.HasPrefix(logs[0], "afxdp: afxdp:") {
		t.Fatalf("log lines = %q", logs)
	}
	t.Logf("fallback logged: %s", logs[0])

	// The fallback works: a datagram to itself comes back.
	msg := []transport.Message{{Buf: []byte("ping"), Addr: c.LocalAddr()}}
	if n, err := c.WriteBatch(msg); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	in := []transport.Message{{Buf: make([]byte, 64)}}
	n, err := c.ReadBatch(in, time.Now().Add(5*time.Second))
	if n != 1 || err != nil || string(in[0].Buf[:in[0].N]) != "ping" {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}

	// Not IPv4: refused with a reason.
	if _, err := Listen(netip.MustParseAddrPort("[::1]:0"), Options{}); err == nil {
		t.Fatalf("Listen on an IPv6 address succeeded")
	}
}
