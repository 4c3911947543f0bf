package wirebytes

import (
	"encoding/binary"
	"testing"

	"github.com/switchml/switchml-go/wire"
)

// ipv4UDP is an IPv4 packet from 127.0.0.1:sport carrying payload.
func ipv4UDP(sport uint16, payload []byte) []byte {
	pkt := make([]byte, 28, 28+len(payload))
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:], uint16(28+len(payload)))
	pkt[9] = 17
	copy(pkt[12:], []byte{127, 0, 0, 1})
	copy(pkt[16:], []byte{127, 0, 0, 1})
	binary.BigEndian.PutUint16(pkt[20:], sport)
	binary.BigEndian.PutUint16(pkt[22:], wire.UDPPort)
	return append(pkt, payload...)
}

// TestTallyCountsDatagrams: a segmentation-offloaded packet counts as its
// datagrams, the last one shorter; a packet id a lane sent before is a
// retransmission, the same id from another lane or in another call is
// not; calls come in the order they started; what is no SwitchML packet
// counts apart.
func TestTallyCountsDatagrams(t *testing.T) {
	pkt := func(seq, pid uint32, elements int) []byte {
		h := wire.Header{Format: wire.FormatExtended, Seq: seq, PacketID: pid, Elements: elements}
		b, err := h.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return append(b, make([]byte, 4*elements)...)
	}
	full, short := len(pkt(0, 0, 100)), len(pkt(0, 0, 10))
	tl := newTally()
	// Call 9: lane 1000 sends ids 0..3 in one offloaded packet, the last
	// datagram shorter, then resends 2; lane 1001 sends 2 too.
	var run []byte
	for pid := range uint32(3) {
		run = append(run, pkt(9, pid, 100)...)
	}
	run = append(run, pkt(9, 3, 10)...)
	tl.addIPv4(ipv4UDP(1000, run), full)
	tl.addIPv4(ipv4UDP(1000, pkt(9, 2, 100)), 0)
	tl.addIPv4(ipv4UDP(1001, pkt(9, 2, 100)), 0)
	// Call 8 starts after 9 (the numbers wrap); id 0 again is new there.
	tl.addIPv4(ipv4UDP(1000, pkt(8, 0, 100)), 0)
	tl.addIPv4(ipv4UDP(1000, wire.AppendProbe(nil, 7)), 0)
	tl.addIPv4([]byte{0x60, 0, 0, 0}, 0) // not IPv4: not counted at all
	calls, other := tl.result()
	frame := func(n int) uint64 { return uint64(n + ethernetHeader + 28) }
	want := []Call{
		{Seq: 9,
			All:   Bytes{6, uint64(5*full + short), 5*frame(full) + frame(short)},
			First: Bytes{5, uint64(4*full + short), 4*frame(full) + frame(short)}},
		{Seq: 8, All: Bytes{1, uint64(full), frame(full)}, First: Bytes{1, uint64(full), frame(full)}},
	}
	if len(calls) != len(want) {
		t.Fatalf("calls %+v, want %+v", calls, want)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
	if w := (Bytes{1, wire.ProbeLen, frame(wire.ProbeLen)}); other != w {
		t.Errorf("other %+v, want the probe %+v", other, w)
	}
}
