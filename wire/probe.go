package wire

import "encoding/binary"

// A probe asks whether a software switch serves a data-plane address: the
// controller sends one before it hands the address out, and the switch
// answers it to the sender with the same bytes and the answer bit set. Its
// message type, 15, is neither header's, so a P4 switch drops it (it has
// no table entry for the sender), and Parse refuses it.
//
// Layout (ProbeLen bytes): 0xF0 (request) or 0xF1 (answer), the six bytes
// "SWMLPR", and a big-endian 64-bit nonce that the answer repeats.
const ProbeLen = 16

const (
	probeRequest = 0xF0
	probeAnswer  = 0xF1
)

var probeMagic = [6]byte{'S', 'W', 'M', 'L', 'P', 'R'}

// AppendProbe appends a probe request carrying nonce to b.
func AppendProbe(b []byte, nonce uint64) []byte {
	b = append(b, probeRequest)
	b = append(b, probeMagic[:]...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint64(b, nonce)
}

// IsProbe reports whether pkt is a probe request.
func IsProbe(pkt []byte) bool {
	return len(pkt) == ProbeLen && pkt[0] == probeRequest && [6]byte(pkt[1:7]) == probeMagic && pkt[7] == 0
}

// AppendProbeAnswer appends the answer to the probe request pkt to b.
// pkt must be a probe request (IsProbe).
func AppendProbeAnswer(b, pkt []byte) []byte {
	b = append(b, probeAnswer)
	return append(b, pkt[1:ProbeLen]...)
}

// ProbeAnswer returns the nonce of a probe answer, and false for anything
// else.
func ProbeAnswer(pkt []byte) (nonce uint64, ok bool) {
	if len(pkt) != ProbeLen || pkt[0] != probeAnswer || [6]byte(pkt[1:7]) != probeMagic || pkt[7] != 0 {
		return 0, false
	}
	return binary.BigEndian.Uint64(pkt[8:]), true
}
