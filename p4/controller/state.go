package controller

// The controller's state file (--state): the claims of the jobs it placed,
// kept where a restarted controller finds them, so that a job found on the
// switch goes back only to ranks that prove themselves by its claim. A
// claim holds hashes, never a secret: see jobcore.Claim, and "Controller
// restarts" in docs/design.md for what reading the file gives.

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"github.com/switchml/switchml-go/secure"
)

// stateVersion is the format of the state file this controller writes.
const stateVersion = 1

// stateFile keeps the claims of the jobs on the switch in a file.
type stateFile struct {
	path, target string

	mu      sync.Mutex // guards claims and version
	claims  map[uint32]jobcore.Claim
	version uint64 // counts changes to claims

	writeMu sync.Mutex // one write at a time; guards written
	written uint64     // the version the file holds
}

// stateDoc is the file's content.
type stateDoc struct {
	Version int          `json:"version"`
	Target  string       `json:"target"`
	Jobs    []stateClaim `json:"jobs"`
}

// stateClaim is a jobcore.Claim as the file holds it: hashes in hex.
type stateClaim struct {
	JobID    uint32   `json:"job_id"`
	Job      string   `json:"job"`
	Session  uint64   `json:"session"`
	Owner    string   `json:"token_sha256"`
	Client   string   `json:"client"`
	Ranks    []string `json:"rank_secret_sha256"`
	PoolBase uint32   `json:"pool_base"`
	PoolSize uint32   `json:"pool_size"`
	World    int      `json:"world"`
}

func hashFrom(s string) ([32]byte, error) {
	var h [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("hash %q is not 64 hex digits", s)
	}
	copy(h[:], b)
	return h, nil
}

func (sc stateClaim) claim() (jobcore.Claim, error) {
	c := jobcore.Claim{JobID: sc.JobID, Job: sc.Job, Session: sc.Session, Client: sc.Client,
		PoolBase: sc.PoolBase, PoolSize: sc.PoolSize, World: sc.World}
	var err error
	if c.Owner, err = hashFrom(sc.Owner); err != nil {
		return c, fmt.Errorf("job id %d: token_sha256: %w", sc.JobID, err)
	}
	c.Ranks = make([][32]byte, len(sc.Ranks))
	for r, h := range sc.Ranks {
		if c.Ranks[r], err = hashFrom(h); err != nil {
			return c, fmt.Errorf("job id %d: rank %d: %w", sc.JobID, r, err)
		}
	}
	return c, nil
}

func stateClaimOf(c jobcore.Claim) stateClaim {
	sc := stateClaim{JobID: c.JobID, Job: c.Job, Session: c.Session, Owner: hex.EncodeToString(c.Owner[:]), Client: c.Client,
		PoolBase: c.PoolBase, PoolSize: c.PoolSize, World: c.World, Ranks: make([]string, len(c.Ranks))}
	for r, h := range c.Ranks {
		sc.Ranks[r] = hex.EncodeToString(h[:])
	}
	return sc
}

// openState reads the state file at path (none there yet: no claims), kept
// for the switch at target, and checks that nobody but this user can
// change it: whoever can write it can make up claims. Claims kept for
// another switch are dropped, and the file is rewritten without them at
// the next change.
func openState(path, target string) (*stateFile, []jobcore.Claim, error) {
	f := &stateFile{path: path, target: target, claims: map[uint32]jobcore.Claim{}}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("controller: state file: %w", err)
	}
	if err := checkPrivate(filepath.Dir(path), true); err != nil {
		return nil, nil, err
	}
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("controller: state file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, nil, field.Errorf("{State} %s: not a regular file (%v): give it a path of its own", path, info.Mode().Type())
	}
	if err := checkPrivate(path, false); err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("controller: state file: %w", err)
	}
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil || doc.Version != stateVersion {
		if err == nil {
			err = fmt.Errorf("version %d, want %d", doc.Version, stateVersion)
		}
		return nil, nil, fmt.Errorf("controller: state file %s is not one this controller writes (%v): move it away to start without the jobs it records (they end when their grace runs out)", path, err)
	}
	if doc.Target != target {
		return f, nil, nil
	}
	var claims []jobcore.Claim
	for _, sc := range doc.Jobs {
		c, err := sc.claim()
		if err != nil {
			return nil, nil, fmt.Errorf("controller: state file %s: %w: move it away to start without the jobs it records", path, err)
		}
		claims = append(claims, c)
		f.claims[c.JobID] = c
	}
	return f, claims, nil
}

// checkPrivate refuses a file or folder that another user owns, or that
// others may write (or, for a file, read).
func checkPrivate(path string, dir bool) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("controller: state file: %w", err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Geteuid() {
		return field.Errorf("{State} %s: belongs to user %d, not to this controller's (%d): whoever can change it can make up claims on running jobs; give it a path this user owns", path, st.Uid, os.Geteuid())
	}
	mask, want := fs.FileMode(0o077), "600"
	if dir {
		mask, want = 0o022, "go-w"
	}
	if info.Mode().Perm()&mask != 0 {
		return fmt.Errorf("controller: state file: %s has mode %04o: others could read or change the claims on running jobs; chmod %s it", path, info.Mode().Perm(), want)
	}
	return nil
}

// set keeps a job's claim, forget drops one; flush writes them.
func (f *stateFile) set(c jobcore.Claim) {
	f.mu.Lock()
	f.claims[c.JobID] = c
	f.version++
	f.mu.Unlock()
}

func (f *stateFile) forget(id uint32) {
	f.mu.Lock()
	if _, ok := f.claims[id]; ok {
		delete(f.claims, id)
		f.version++
	}
	f.mu.Unlock()
}

// flush writes the claims if the file does not hold them yet
// (secure.WritePrivateFile: a crash leaves the old claims or the new).
func (f *stateFile) flush() error {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	f.mu.Lock()
	v := f.version
	if f.written == v {
		f.mu.Unlock()
		return nil
	}
	doc := stateDoc{Version: stateVersion, Target: f.target, Jobs: make([]stateClaim, 0, len(f.claims))}
	for _, id := range slices.Sorted(maps.Keys(f.claims)) {
		doc.Jobs = append(doc.Jobs, stateClaimOf(f.claims[id]))
	}
	f.mu.Unlock()
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	if err := secure.WritePrivateFile(f.path, b); err != nil {
		return fmt.Errorf("controller: writing the state file: %w", err)
	}
	f.written = v
	return nil
}
