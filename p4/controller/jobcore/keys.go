package jobcore

// Rank secrets: what proves that a call within a session comes from one of
// its ranks. A session id is no key: it names the session, and it reaches
// places (logs, operators' screens) that a secret must not.

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"

	"github.com/switchml/switchml-go/wire"
	"google.golang.org/grpc/codes"
)

// RankSecretLen is the length of a rank's secret.
const RankSecretLen = 16

// rankKeys holds what a session's ranks prove themselves with. A session
// the controller started keeps one random master key and derives each
// rank's secret from it (so that an ended session's keys stay small
// however many ranks it had); a session taken over from the switch learns
// each rank's secret from the rank's first Watch.
type rankKeys struct {
	master  []byte
	learned map[uint32][]byte
}

// drawKeys draws a session's master key from the core's Rand.
func (c *Core) drawKeys() *rankKeys {
	master := make([]byte, 0, 32)
	for range 4 {
		master = binary.LittleEndian.AppendUint64(master, c.cfg.Rand())
	}
	return &rankKeys{master: master}
}

// learnedKeys are the keys of a session taken over from the switch, whose
// ranks bring their secrets back one by one.
func learnedKeys() *rankKeys { return &rankKeys{learned: map[uint32][]byte{}} }

// secret is rank's secret, or nil when it is not known (yet).
func (k *rankKeys) secret(rank uint32) []byte {
	if k == nil {
		return nil
	}
	if k.master == nil {
		return k.learned[rank]
	}
	m := hmac.New(sha256.New, k.master)
	m.Write(binary.BigEndian.AppendUint32([]byte("switchml rank secret "), rank))
	return m.Sum(nil)[:RankSecretLen]
}

// known reports whether rank's secret is known.
func (k *rankKeys) known(rank uint32) bool { return k.secret(rank) != nil }

// check refuses a call of rank's that does not carry its secret.
func (k *rankKeys) check(rank uint32, got []byte) error {
	want := k.secret(rank)
	if want == nil || subtle.ConstantTimeCompare(want, got) != 1 {
		return Refuse(codes.PermissionDenied, "rank %d's secret does not match: a call within a session carries the rank_secret the rank's registration was answered with", rank)
	}
	return nil
}

// learn keeps the secret a rank of a session taken over from the switch
// brought back.
func (k *rankKeys) learn(rank uint32, secret []byte) error {
	if len(secret) != RankSecretLen {
		return Invalid("rank_secret of %d bytes, want %d (the one the rank's registration was answered with)", len(secret), RankSecretLen)
	}
	k.learned[rank] = append([]byte(nil), secret...)
	return nil
}

// Key is a job's data-plane key. It prints as a placeholder, so that
// logging a placement never shows it.
type Key []byte

// String hides the key.
func (k Key) String() string {
	if k == nil {
		return "none"
	}
	return "[secret]"
}

// Format hides the key from every fmt verb.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// drawKey draws a job's data-plane key from the core's Rand.
func (c *Core) drawKey() Key {
	key := make(Key, wire.KeyLen)
	for i := 0; i < len(key); i += 8 {
		binary.LittleEndian.PutUint64(key[i:], c.cfg.Rand())
	}
	return key
}
