package jobcore

// Rank secrets: what proves that a call within a session comes from one of
// its ranks. A session id is no key: it names the session, and it reaches
// places (logs, operators' screens) that a secret must not.

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
	"google.golang.org/grpc/codes"
)

// RankSecretLen is the length of a rank's secret.
const RankSecretLen = 16

// rankKeys holds what a session's ranks prove themselves with. A session
// the controller started keeps one random master key and derives each
// rank's secret from it (so that an ended session's keys stay small
// however many ranks it had); a session taken over from the switch after a
// restart knows only each secret's hash, from the job's Claim.
type rankKeys struct {
	master []byte
	hashes [][32]byte
}

// drawKeys draws a session's master key from the core's Rand.
func (c *Core) drawKeys() *rankKeys {
	master := make([]byte, 0, 32)
	for range 4 {
		master = binary.LittleEndian.AppendUint64(master, c.cfg.Rand())
	}
	return &rankKeys{master: master}
}

// claimedKeys are the keys of a session taken over from the switch: the
// hashes of its ranks' secrets, from its Claim.
func claimedKeys(hashes [][32]byte) *rankKeys { return &rankKeys{hashes: hashes} }

// secret is rank's secret, or nil when it is not known (a session taken
// over from the switch knows only the hashes).
func (k *rankKeys) secret(rank uint32) []byte {
	if k == nil || k.master == nil {
		return nil
	}
	m := hmac.New(sha256.New, k.master)
	m.Write(binary.BigEndian.AppendUint32([]byte("switchml rank secret "), rank))
	return m.Sum(nil)[:RankSecretLen]
}

// hashes are the SHA-256 of the secrets of a session's world ranks, for
// its Claim.
func (k *rankKeys) hashesOf(world int) [][32]byte {
	if k.master == nil {
		return k.hashes
	}
	out := make([][32]byte, world)
	for r := range out {
		out[r] = sha256.Sum256(k.secret(uint32(r)))
	}
	return out
}

// check refuses a call of rank's that does not carry its secret.
func (k *rankKeys) check(rank uint32, got []byte) error {
	ok := false
	switch {
	case k == nil:
	case k.master != nil:
		ok = subtle.ConstantTimeCompare(k.secret(rank), got) == 1
	case rank < uint32(len(k.hashes)) && len(got) == RankSecretLen:
		h := sha256.Sum256(got)
		ok = subtle.ConstantTimeCompare(k.hashes[rank][:], h[:]) == 1
	}
	if !ok {
		return Refuse(codes.PermissionDenied, "rank %d's secret does not match: a call within a session carries the rank_secret the rank's registration was answered with", rank)
	}
	return nil
}

// drawKey draws a job's data-plane key from the core's Rand.
func (c *Core) drawKey() switchjob.Key {
	key := make(switchjob.Key, wire.KeyLen)
	for i := 0; i < len(key); i += 8 {
		binary.LittleEndian.PutUint64(key[i:], c.cfg.Rand())
	}
	return key
}
