package wirebytes

import (
	"encoding/binary"
	"net"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/switchml/switchml-go/internal/testenv"
	"github.com/switchml/switchml-go/wire"
)

// packet is a compatible SwitchML packet of 64 values.
func packet(t *testing.T, seq, pid uint32) []byte {
	t.Helper()
	h := wire.Header{Format: wire.FormatCompat, Seq: seq, PacketID: pid, Elements: 64}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, make([]byte, 4*64)...)
}

// segmentCmsg is the control message of a UDP_SEGMENT send of size-byte
// datagrams.
func segmentCmsg(size int) []byte {
	b := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return b
}

// TestCaptureOnLoopback sends datagrams on loopback, some as one
// segmentation-offloaded packet, and wants each counted once as the
// datagram it is, retransmissions apart, and nothing sent elsewhere.
func TestCaptureOnLoopback(t *testing.T) {
	testenv.NeedRoot(t, "to open an AF_PACKET socket")
	sink, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	elsewhere, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer elsewhere.Close()
	to := sink.LocalAddr().(*net.UDPAddr)
	c, err := StartCapture("lo", to.Port)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP("udp4", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(b []byte) {
		t.Helper()
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for pid := range uint32(3) {
		send(packet(t, 5, pid))
	}
	send(packet(t, 5, 1)) // a retransmission
	// Ten datagrams in one send: loopback carries them as one packet.
	var run []byte
	for pid := uint32(3); pid < 13; pid++ {
		run = append(run, packet(t, 5, pid)...)
	}
	if _, _, err := conn.WriteMsgUDP(run, segmentCmsg(len(packet(t, 5, 0))), nil); err != nil {
		t.Fatalf("a UDP_SEGMENT send: %v", err)
	}
	send(packet(t, 6, 13)) // the next call
	send(wire.AppendProbe(nil, 1))
	// To another port: not counted.
	other, err := net.DialUDP("udp4", nil, elsewhere.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Write(packet(t, 5, 100)); err != nil {
		t.Fatal(err)
	}
	calls, others, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	size := uint64(len(packet(t, 5, 0)))
	frame := size + ethernetHeader + 20 + 8
	want := []Call{
		{Seq: 5, All: Bytes{14, 14 * size, 14 * frame}, First: Bytes{13, 13 * size, 13 * frame}},
		{Seq: 6, All: Bytes{1, size, frame}, First: Bytes{1, size, frame}},
	}
	if len(calls) != len(want) {
		t.Fatalf("calls %+v, want %+v", calls, want)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
	if w := (Bytes{1, wire.ProbeLen, wire.ProbeLen + ethernetHeader + 28}); others != w {
		t.Errorf("other datagrams %+v, want the probe: %+v", others, w)
	}
}
