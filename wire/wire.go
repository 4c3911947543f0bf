// Package wire encodes and decodes SwitchML packet headers.
//
// Two layouts exist. The compatible layout is the 10-byte header of the
// published Tofino program, so a worker speaking it can aggregate on a real
// switch. The extended layout is a versioned header understood only by our
// software switch: it carries a 32-bit sequence number, a wider slot index
// and an explicit element count, which lifts the limits of the compatible
// layout (fixed payload sizes, 8-bit sequence numbers, 14-bit slots).
//
// The first nibble of either header is the message type (1 compatible, 2
// extended), so a receiver can always tell them apart from the first byte.
// The low bit of the extended header's first byte says the packet is tagged:
// TagLen bytes of a keyed MAC follow the payload (see Tagger). The
// compatible header has no spare bit, so its packets cannot be tagged.
//
// Bit 1 of the extended header's first byte says the packet is sparse
// (the block-sparse mode): SparseFields more bytes follow the header, the
// block the packet is about and the sender's next non-zero block (see
// Header.Sparse, NextKey).
//
// Bit 3 of the first byte, in either layout, says the packet is a result:
// a switch sets it on every result it sends and never takes a packet that
// carries it as a contribution, so one switch's result cannot feed another
// switch's aggregation (see Header.Result). In the compatible layout it is
// the published header's unused bit, which the published Tofino program
// writes as zero: its results carry no mark, and workers accept results
// with or without one.
//
// Both headers are followed by the payload: Elements big-endian
// two's-complement int32 values. On the 16-bit wire each of them carries
// two values as the arithmetic pair a*2^16 + b (quant.QuantizePairsBE): the
// switch adds the words alike, and nothing in the header says the width,
// which every rank of a job agrees on at join. Parse validates the payload length; Append
// writes only the header so the caller can quantize straight into the bytes
// that follow it.
//
// The payload codec (ReadPayload, AddPayload, PutPayload, AppendPayload)
// lives here too, because the payload layout is part of the packet format
// and both ends convert it: the worker writes int32 tensors and reads their
// sums, the switch reads contributions, adds them up and writes the result.
// One codec, with one set of vector kernels on amd64, serves both. The
// float kernels of package quant write the same layout straight from floats.
package wire

import (
	"encoding/binary"
	"errors"
)

// UDPPort is the UDP destination port of aggregation packets. The switch
// accepts the 16 ports UDPPort..UDPPort+15.
const UDPPort = 48864

// Format selects the header layout.
type Format uint8

const (
	// FormatCompat is the 10-byte header of the published Tofino program.
	FormatCompat Format = 0
	// FormatExtended is the versioned header of our software switch.
	FormatExtended Format = 1
)

// String names the format for logs and flags.
func (f Format) String() string {
	switch f {
	case FormatCompat:
		return "compat"
	case FormatExtended:
		return "extended"
	}
	return "invalid"
}

// Header sizes and limits.
const (
	// CompatLen is the length of the compatible header.
	CompatLen = 10
	// ExtendedLen is the length of the extended header.
	ExtendedLen = 18
	// SparseLen is the length of a sparse extended header: ExtendedLen
	// and the Block and Next fields.
	SparseLen = ExtendedLen + 8
	// ExtendedVersion is the only extended header version defined.
	ExtendedVersion = 1
	// MaxCompatSlot is the largest slot the compatible pool index holds (14 bits).
	MaxCompatSlot = 1<<14 - 1
	// MaxExtendedSlot is the largest slot of the extended pool index (31 bits).
	MaxExtendedSlot = 1<<31 - 1
	// MaxElements is the largest element count of the extended header.
	MaxElements = 2048
	// MaxPacket is the largest packet either format can describe.
	MaxPacket = SparseLen + 4*MaxElements + TagLen
)

const (
	msgTypeCompat   = 1
	msgTypeExtended = 2
	setBitCompat    = 1 << 15
	setBitExtended  = 1 << 31
	// flagTagged, in the extended header's first byte, says a tag
	// follows the payload.
	flagTagged = 0x01
	// flagSparse, in the extended header's first byte, says the Block
	// and Next fields follow the header.
	flagSparse = 0x02
	// flagResult, in the first byte of either layout, marks a switch's
	// result.
	flagResult = 0x08
)

// Sparse mode constants. A sparse packet's Next field is a key that
// orders (block, exponent) pairs so that the smallest key names the
// smallest block and, among equal blocks, the largest exponent: the switch
// keeps the minimum over the workers' keys and so finds the next block
// anyone needs and the exponent that block must be quantized with.
const (
	// NoNext is the Next key of a sender with no non-zero block left.
	NoNext = ^uint32(0)
	// DirectoryBlock is the Block of a directory packet: its payload
	// holds one Next key per slot of the lane, and the switch keeps their
	// element-wise minimum instead of a sum.
	DirectoryBlock = ^uint32(0)
	// MaxSparseBlocks bounds the blocks of a sparse lane: a key holds the
	// block index in 24 bits.
	MaxSparseBlocks = 1<<24 - 1
)

// NextKey is the Next key of block b whose values have exponent exp
// (quant.MinExponent for unscaled types). b must be below MaxSparseBlocks.
func NextKey(b int, exp int8) uint32 {
	return uint32(b)<<8 | uint32(uint8(127-int(exp)))
}

// SplitKey is the inverse of NextKey; ok is false for NoNext.
func SplitKey(k uint32) (b int, exp int8, ok bool) {
	if k == NoNext {
		return 0, 0, false
	}
	return int(k >> 8), int8(127 - int(k&0xff)), true
}

// compatElements maps the compatible size code to the element count:
// 128, 256, 512 and 1024 payload bytes.
var compatElements = [4]int{32, 64, 128, 256}

// CompatSizeCode returns the size code of the compatible header for a
// payload of elements int32 values, and false if the compatible layout
// cannot describe that count.
func CompatSizeCode(elements int) (uint8, bool) {
	for code, n := range compatElements {
		if n == elements {
			return uint8(code), true
		}
	}
	return 0, false
}

// Errors returned by Parse and Append. They are sentinel values so that the
// switch can reject a malformed packet without allocating.
var (
	ErrShort          = errors.New("wire: packet shorter than its header")
	ErrMsgType        = errors.New("wire: unknown message type (first nibble must be 1 compat or 2 extended)")
	ErrReservedBits   = errors.New("wire: reserved header bits are set")
	ErrVersion        = errors.New("wire: unsupported extended header version")
	ErrSize           = errors.New("wire: element count not encodable (compat: 32, 64, 128 or 256; extended: 0..2048)")
	ErrPayloadShort   = errors.New("wire: payload shorter than the header's element count")
	ErrPayloadTrailer = errors.New("wire: trailing bytes after the payload")
	ErrSlot           = errors.New("wire: slot out of range for the format (compat: 14 bits, extended: 31 bits)")
	ErrSet            = errors.New("wire: set must be 0 or 1")
	ErrFormat         = errors.New("wire: unknown format")
	ErrTagCompat      = errors.New("wire: the compatible header cannot carry a tag (use the extended header)")
	ErrSparseCompat   = errors.New("wire: the compatible header cannot carry the sparse fields (use the extended header)")
)

// Header is a decoded aggregation header. The same type describes requests
// (worker to switch) and replies (switch to worker): the switch echoes Seq,
// PacketID, Slot and Set and puts the maximum exponent in Exp0.
type Header struct {
	Format Format
	// Seq says which allreduce call of the job the packet belongs to:
	// workers number their calls and match results by it, and the switch
	// tells a slot's successive uses apart by it (with PacketID). The
	// compatible layout carries only its low 8 bits (the published header
	// calls that byte the job number).
	Seq uint32
	// PacketID is opaque to the switch and echoed. The reference client
	// writes it in host order; we write it big-endian and never interpret
	// a peer's value.
	PacketID uint32
	Set      uint8  // 0 or 1
	Slot     uint32 // absolute pool slot; 14 bits in the compatible layout
	Exp0     int8   // exponent of the block whose data comes next
	Exp1     int8   // unused by the protocol, echoed by the switch
	// Elements is the number of int32 values following the header:
	// 32, 64, 128 or 256 in the compatible layout, 0..2048 extended.
	Elements int
	// Tagged says a TagLen-byte tag follows the payload (extended
	// layout only). Append writes the flag; the tag itself is appended
	// after the payload by Tagger.Seal.
	Tagged bool
	// Sparse marks a packet of the block-sparse mode (extended layout
	// only): Block and Next follow the header. Block is the lane's block
	// whose values the payload holds (DirectoryBlock for a directory); a
	// sender without values for it sends no payload. Next is the sender's
	// NextKey, or in a result the minimum over the workers' keys.
	Sparse      bool
	Block, Next uint32
	// Result marks a packet a switch sends to workers: a multicast
	// result or the answer to a retransmission. A switch refuses a
	// packet with the mark as a contribution, so results never loop
	// between switches whose workers tables name each other. Workers
	// send packets without it and accept results either way (the
	// published Tofino program does not set it). A leaf's partial sums
	// going up to its parent are contributions, without it.
	Result bool
}

// Len returns the header length in bytes for h.Format (0 for an unknown
// format).
func (h *Header) Len() int {
	switch h.Format {
	case FormatCompat:
		return CompatLen
	case FormatExtended:
		if h.Sparse {
			return SparseLen
		}
		return ExtendedLen
	}
	return 0
}

// PacketLen returns the length of the whole packet: header, payload and
// tag, if any.
func (h *Header) PacketLen() int {
	n := h.Len() + 4*h.Elements
	if h.Tagged {
		n += TagLen
	}
	return n
}

// Append appends the header (not the payload) to b. It returns b unchanged
// and an error if a field cannot be represented in h.Format. In the
// compatible layout only the low 8 bits of Seq are written.
func (h *Header) Append(b []byte) ([]byte, error) {
	if h.Set > 1 {
		return b, ErrSet
	}
	switch h.Format {
	case FormatCompat:
		if h.Tagged {
			return b, ErrTagCompat
		}
		if h.Sparse {
			return b, ErrSparseCompat
		}
		code, ok := CompatSizeCode(h.Elements)
		if !ok {
			return b, ErrSize
		}
		if h.Slot > MaxCompatSlot {
			return b, ErrSlot
		}
		idx := uint16(h.Slot)
		if h.Set == 1 {
			idx |= setBitCompat
		}
		first := msgTypeCompat<<4 | code
		if h.Result {
			first |= flagResult
		}
		b = append(b, first, byte(h.Seq))
		b = binary.BigEndian.AppendUint32(b, h.PacketID)
		b = binary.BigEndian.AppendUint16(b, idx)
		return append(b, byte(h.Exp0), byte(h.Exp1)), nil
	case FormatExtended:
		if h.Elements < 0 || h.Elements > MaxElements {
			return b, ErrSize
		}
		if h.Slot > MaxExtendedSlot {
			return b, ErrSlot
		}
		idx := h.Slot
		if h.Set == 1 {
			idx |= setBitExtended
		}
		first := byte(msgTypeExtended << 4)
		if h.Tagged {
			first |= flagTagged
		}
		if h.Sparse {
			first |= flagSparse
		}
		if h.Result {
			first |= flagResult
		}
		b = append(b, first, ExtendedVersion)
		b = binary.BigEndian.AppendUint32(b, h.Seq)
		b = binary.BigEndian.AppendUint32(b, h.PacketID)
		b = binary.BigEndian.AppendUint32(b, idx)
		b = append(b, byte(h.Exp0), byte(h.Exp1))
		b = binary.BigEndian.AppendUint16(b, uint16(h.Elements))
		if h.Sparse {
			b = binary.BigEndian.AppendUint32(b, h.Block)
			b = binary.BigEndian.AppendUint32(b, h.Next)
		}
		return b, nil
	}
	return b, ErrFormat
}

// Parse decodes the header at the start of b and returns it with the
// payload, which aliases b and holds exactly 4*Elements bytes. A tagged
// packet must end in exactly TagLen bytes after the payload; Parse does not
// check the tag (Tagger.Verify does). Malformed
// input (short, unknown type or version, reserved bits set, bad size code,
// payload length not matching the element count) yields an error naming the
// problem; Parse never panics and never allocates.
func Parse(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < 1 {
		return h, nil, ErrShort
	}
	var hl int
	switch b[0] >> 4 {
	case msgTypeCompat:
		if len(b) < CompatLen {
			return h, nil, ErrShort
		}
		// Bit 3 of the first byte is the result mark and the size code
		// has only four values; anything else is not a packet we
		// understand.
		if b[0]&0x04 != 0 {
			return h, nil, ErrSize
		}
		idx := binary.BigEndian.Uint16(b[6:8])
		if idx&(1<<14) != 0 {
			return h, nil, ErrReservedBits
		}
		h = Header{
			Format:   FormatCompat,
			Seq:      uint32(b[1]),
			PacketID: binary.BigEndian.Uint32(b[2:6]),
			Set:      uint8(idx >> 15),
			Slot:     uint32(idx & MaxCompatSlot),
			Exp0:     int8(b[8]),
			Exp1:     int8(b[9]),
			Elements: compatElements[b[0]&3],
			Result:   b[0]&flagResult != 0,
		}
		hl = CompatLen
	case msgTypeExtended:
		if len(b) < ExtendedLen {
			return h, nil, ErrShort
		}
		if b[0]&0x0f&^(flagTagged|flagSparse|flagResult) != 0 {
			return h, nil, ErrReservedBits
		}
		if b[1] != ExtendedVersion {
			return h, nil, ErrVersion
		}
		idx := binary.BigEndian.Uint32(b[10:14])
		h = Header{
			Format:   FormatExtended,
			Seq:      binary.BigEndian.Uint32(b[2:6]),
			PacketID: binary.BigEndian.Uint32(b[6:10]),
			Set:      uint8(idx >> 31),
			Slot:     idx &^ setBitExtended,
			Exp0:     int8(b[14]),
			Exp1:     int8(b[15]),
			Elements: int(binary.BigEndian.Uint16(b[16:18])),
			Tagged:   b[0]&flagTagged != 0,
			Sparse:   b[0]&flagSparse != 0,
			Result:   b[0]&flagResult != 0,
		}
		if h.Elements > MaxElements {
			return Header{}, nil, ErrSize
		}
		hl = ExtendedLen
		if h.Sparse {
			if len(b) < SparseLen {
				return Header{}, nil, ErrShort
			}
			h.Block = binary.BigEndian.Uint32(b[18:22])
			h.Next = binary.BigEndian.Uint32(b[22:26])
			hl = SparseLen
		}
	default:
		return h, nil, ErrMsgType
	}
	n := hl + 4*h.Elements
	end := n
	if h.Tagged {
		end += TagLen
	}
	if len(b) < end {
		return Header{}, nil, ErrPayloadShort
	}
	if len(b) > end {
		return Header{}, nil, ErrPayloadTrailer
	}
	return h, b[hl:n:n], nil
}
