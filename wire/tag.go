package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"hash"
)

// Tags authenticate packets on a data plane that does not trust source
// addresses (the software switch with --auth). A tag is HMAC-SHA256 under
// the job's key, truncated to TagLen bytes, over a 4-byte context and the
// whole packet before the tag (header, flag included, and payload). The
// context binds the tag to its direction and to the lane and rank that send
// it, which the switch knows from the packet's source address: a packet
// from rank 1 replayed with rank 0's address, or a worker's request sent
// back to a worker as a result, fails the check. The key binds it to the
// job.
//
// HMAC-SHA256 is in Go's standard library, runs on the SHA extensions where
// the CPU has them, and stays secure whatever the packets hold. A GMAC
// (AES-GCM with no plaintext) would be cheaper per byte, but it fails
// catastrophically if a nonce ever repeats under one key, and retransmissions
// and several lanes make unique nonces a protocol of their own.

// Tag and key sizes.
const (
	// TagLen is the length of a packet's tag: 128 bits of HMAC-SHA256.
	TagLen = 16
	// KeyLen is the length of a job's key.
	KeyLen = 32
)

// AllRanks is the rank in the context of results, which the switch
// multicasts, one packet for every rank of a lane.
const AllRanks = 0xffff

// Directions of a tagged packet, the first byte of its context.
const (
	dirRequest = 1 // worker to switch
	dirResult  = 2 // switch to worker
)

// ErrKeyLen is NewTagger's answer to a key of the wrong length.
var ErrKeyLen = errors.New("wire: an authentication key must be 32 bytes")

// Tagger computes and checks tags under one job's key. It allocates nothing
// per packet. It is not safe for concurrent use: each lane and each switch
// loop holds its own.
type Tagger struct {
	mac hash.Hash
	ctx [4]byte
	sum [sha256.Size]byte
}

// NewTagger returns a Tagger for a KeyLen-byte key. The key is copied.
func NewTagger(key []byte) (*Tagger, error) {
	if len(key) != KeyLen {
		return nil, ErrKeyLen
	}
	return &Tagger{mac: hmac.New(sha256.New, key)}, nil
}

// compute leaves the MAC of body under the context in t.sum.
func (t *Tagger) compute(body []byte, dir byte, rank uint16, lane uint8) {
	t.mac.Reset()
	t.ctx = [4]byte{dir, lane, byte(rank >> 8), byte(rank)}
	t.mac.Write(t.ctx[:])
	t.mac.Write(body)
	t.mac.Sum(t.sum[:0])
}

// verify reports whether pkt ends in the tag of the rest of it.
func (t *Tagger) verify(pkt []byte, dir byte, rank uint16, lane uint8) bool {
	if len(pkt) < TagLen {
		return false
	}
	body, tag := pkt[:len(pkt)-TagLen], pkt[len(pkt)-TagLen:]
	t.compute(body, dir, rank, lane)
	return hmac.Equal(t.sum[:TagLen], tag)
}

// SealRequest appends the tag of a worker's packet to pkt, which holds the
// header (with Tagged set) and the payload. rank and lane are the sender's.
func (t *Tagger) SealRequest(pkt []byte, rank uint16, lane uint8) []byte {
	t.compute(pkt, dirRequest, rank, lane)
	return append(pkt, t.sum[:TagLen]...)
}

// VerifyRequest reports whether pkt, a whole tagged packet, carries the tag
// of a request from rank's lane.
func (t *Tagger) VerifyRequest(pkt []byte, rank uint16, lane uint8) bool {
	return t.verify(pkt, dirRequest, rank, lane)
}

// SealResult appends the tag of the switch's result for lane to pkt.
func (t *Tagger) SealResult(pkt []byte, lane uint8) []byte {
	t.compute(pkt, dirResult, AllRanks, lane)
	return append(pkt, t.sum[:TagLen]...)
}

// VerifyResult reports whether pkt, a whole tagged packet, carries the tag
// of the switch's result for lane.
func (t *Tagger) VerifyResult(pkt []byte, lane uint8) bool {
	return t.verify(pkt, dirResult, AllRanks, lane)
}
