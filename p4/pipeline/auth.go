package pipeline

import (
	"fmt"
	"slices"

	"github.com/switchml/switchml-go/wire"
)

// The key table of an authenticated data plane (Config.Auth): one key per
// job, by the switch's job id. Keys are written by the control plane and
// never read back: KeyedJobs says which jobs have one, not what it is.

// errNoAuth refuses keys on a switch that does not check tags.
var errNoAuth = fmt.Errorf("%w: this switch does not check tags (start it with Auth set)", ErrInvalid)

// jobKey is a job's key and its Taggers: index 0 for Process, index i for
// the Shard with id i, so that loops running at once never share one.
type jobKey struct {
	key [wire.KeyLen]byte
	tgs []*wire.Tagger
}

// newJobKey returns key's Taggers for every data-plane loop.
func (p *Pipeline) newJobKey(key []byte) (*jobKey, error) {
	if len(key) != wire.KeyLen {
		return nil, fmt.Errorf("%w: a job's key must be %d bytes, got %d", ErrInvalid, wire.KeyLen, len(key))
	}
	k := &jobKey{}
	copy(k.key[:], key)
	if err := k.grow(len(p.shards) + 1); err != nil {
		return nil, err
	}
	return k, nil
}

// grow makes Taggers up to n loops.
func (k *jobKey) grow(n int) error {
	for len(k.tgs) < n {
		tg, err := wire.NewTagger(k.key[:])
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		k.tgs = append(k.tgs, tg)
	}
	return nil
}

// InsertKey gives job jobID its key: from then on its packets must carry
// the key's tag.
func (p *Pipeline) InsertKey(jobID uint32, key []byte) error {
	if !p.cfg.Auth {
		return errNoAuth
	}
	if _, ok := p.keys[jobID]; ok {
		return fmt.Errorf("%w: key of job %d", ErrExists, jobID)
	}
	k, err := p.newJobKey(key)
	if err != nil {
		return err
	}
	p.keys[jobID] = k
	return nil
}

// ModifyKey replaces the key of job jobID.
func (p *Pipeline) ModifyKey(jobID uint32, key []byte) error {
	if !p.cfg.Auth {
		return errNoAuth
	}
	if _, ok := p.keys[jobID]; !ok {
		return fmt.Errorf("%w: key of job %d", ErrNotFound, jobID)
	}
	k, err := p.newJobKey(key)
	if err != nil {
		return err
	}
	p.keys[jobID] = k
	return nil
}

// DeleteKey removes the key of job jobID; its packets are dropped from then
// on (with Config.Auth every job needs a key).
func (p *Pipeline) DeleteKey(jobID uint32) error {
	if _, ok := p.keys[jobID]; !ok {
		return fmt.Errorf("%w: key of job %d", ErrNotFound, jobID)
	}
	delete(p.keys, jobID)
	return nil
}

// ClearKeys removes every key.
func (p *Pipeline) ClearKeys() { clear(p.keys) }

// KeyedJobs calls fn for every job with a key, in job order, until fn
// returns false.
func (p *Pipeline) KeyedJobs(fn func(jobID uint32) bool) {
	ids := make([]uint32, 0, len(p.keys))
	for id := range p.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !fn(id) {
			return
		}
	}
}

// Auth reports whether the switch checks tags (Config.Auth).
func (p *Pipeline) Auth() bool { return p.cfg.Auth }

// tagger returns the Tagger of job jobID for the loop with the given shard
// id (0: Process, or the only shard), nil if the job has no key.
func (p *Pipeline) tagger(jobID uint32, shard int32) *wire.Tagger {
	k := p.keys[jobID]
	if k == nil || int(shard) >= len(k.tgs) {
		return nil
	}
	return k.tgs[shard]
}

// growTaggers gives every key a Tagger for a shard added after it.
func (p *Pipeline) growTaggers() {
	for _, k := range p.keys {
		_ = k.grow(len(p.shards) + 1) // the key's length was checked when it came
	}
}
