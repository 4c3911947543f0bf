package wirebytes

import (
	"encoding/binary"

	"github.com/switchml/switchml-go/wire"
)

// ethernetHeader is the bytes a datagram's Ethernet frame adds on a cable
// (destination, source, type; no preamble, FCS or gap): loopback has no
// cable, and the frame bytes count what one would carry.
const ethernetHeader = 14

// Bytes counts datagrams and their bytes.
type Bytes struct {
	Datagrams uint64 `json:"datagrams"`
	// Payload is the UDP payload: the SwitchML header and its values.
	Payload uint64 `json:"payload_bytes"`
	// Frames adds the Ethernet, IPv4 and UDP headers of each datagram.
	Frames uint64 `json:"frame_bytes"`
}

func (b *Bytes) add(payload, frame int) {
	b.Datagrams++
	b.Payload += uint64(payload)
	b.Frames += uint64(frame)
}

// Call is what the workers sent for one allreduce call: the packets whose
// header carries its sequence number.
type Call struct {
	// Seq is the call's sequence number as the header carries it (the
	// compatible header keeps its low 8 bits).
	Seq uint32 `json:"seq"`
	// All counts every datagram, First only a packet's first
	// transmission: a retransmission carries the packet id of a packet
	// its lane sent before.
	All   Bytes `json:"all"`
	First Bytes `json:"first"`
}

// firstKey names 64 consecutive packet ids of one lane (its address and
// port) in one call.
type firstKey struct {
	src   [6]byte
	seq   uint32
	block uint32
}

// tally counts the datagrams of one capture, call by call in the order
// their first packets came.
type tally struct {
	calls []*Call
	bySeq map[uint32]*Call
	seen  map[firstKey]uint64 // bit i of block b: packet id 64b+i was sent
	// other counts the datagrams that are no SwitchML packet (the
	// controller's probes of the data-plane address).
	other Bytes
}

func newTally() *tally {
	return &tally{bySeq: map[uint32]*Call{}, seen: map[firstKey]uint64{}}
}

// addIPv4 counts one IPv4 packet sent to the data-plane port. With UDP
// segmentation offload, loopback carries a run of datagrams as one packet
// of gsoSize-byte segments (the last may be shorter): each is counted as
// the datagram it would be on a cable. gsoSize 0 is one datagram.
func (t *tally) addIPv4(pkt []byte, gsoSize int) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return
	}
	ihl := int(pkt[0]&0x0f) * 4
	if total := int(binary.BigEndian.Uint16(pkt[2:4])); total >= ihl && total < len(pkt) {
		pkt = pkt[:total]
	}
	if ihl < 20 || len(pkt) < ihl+8 {
		return
	}
	var src [6]byte
	copy(src[:4], pkt[12:16])
	copy(src[4:], pkt[ihl:ihl+2])
	payload := pkt[ihl+8:]
	if gsoSize <= 0 {
		gsoSize = len(payload)
	}
	for len(payload) > 0 {
		seg := payload[:min(gsoSize, len(payload))]
		payload = payload[len(seg):]
		t.addDatagram(src, seg, ethernetHeader+ihl+8+len(seg))
	}
}

// addDatagram counts one datagram from src of frame bytes on a cable.
func (t *tally) addDatagram(src [6]byte, dgram []byte, frame int) {
	h, _, err := wire.Parse(dgram)
	if err != nil {
		t.other.add(len(dgram), frame)
		return
	}
	c := t.bySeq[h.Seq]
	if c == nil {
		c = &Call{Seq: h.Seq}
		t.bySeq[h.Seq] = c
		t.calls = append(t.calls, c)
	}
	c.All.add(len(dgram), frame)
	k := firstKey{src: src, seq: h.Seq, block: h.PacketID / 64}
	bit := uint64(1) << (h.PacketID % 64)
	if t.seen[k]&bit == 0 {
		t.seen[k] |= bit
		c.First.add(len(dgram), frame)
	}
}

// result returns the calls in the order they started and the other
// datagrams.
func (t *tally) result() ([]Call, Bytes) {
	calls := make([]Call, len(t.calls))
	for i, c := range t.calls {
		calls[i] = *c
	}
	return calls, t.other
}
