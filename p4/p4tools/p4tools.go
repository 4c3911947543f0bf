// Package p4tools finds the open-source P4 toolchain (p4c's BMv2 backend,
// BMv2 simple_switch_grpc and the Tofino compiler bf-p4c) and makes it
// runnable.
//
// The toolchain is a relocatable folder (bin/, lib/, share/, env.sh). Copies
// of it that passed through a medium without symbolic links hold, in place of
// each link, a small file with the link's target ("libbmpi.so.0.0.0"); the
// binaries then fail to load their libraries. Prepare therefore lays the
// folder out once in a cache directory with the links restored, and runs the
// tools from there.
package p4tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// EnvDir names the environment variable that points at a toolchain folder.
// Without it, Locate looks for shared/tools/p4 beside the checkout.
const EnvDir = "SWITCHML_P4_TOOLS"

// ErrAbsent reports that no toolchain folder was found. Tests skip on it;
// anything else is a failure.
var ErrAbsent = errors.New("p4tools: P4 toolchain not found")

// Tools is a prepared, runnable toolchain.
type Tools struct {
	// Source is the folder the toolchain was found in.
	Source string
	// Dir is the prepared copy the tools run from.
	Dir string

	idOnce sync.Once // identity, for the compile cache
	id     string
	idErr  error
}

// Locate returns the toolchain folder: $SWITCHML_P4_TOOLS if set, else the
// first shared/tools/p4 found beside the directory holding go.mod, or beside
// one of its parents (the layout where the checkout and shared/ are siblings).
func Locate() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		if !isToolchain(d) {
			return "", fmt.Errorf("p4tools: %s=%s holds no bin/p4c-bm2-ss: point it at the toolchain folder", EnvDir, d)
		}
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("p4tools: %w", err)
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			root = wd
			break
		}
		root = parent
	}
	for d := root; ; d = filepath.Dir(d) {
		cand := filepath.Join(filepath.Dir(d), "shared", "tools", "p4")
		if isToolchain(cand) {
			return cand, nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("%w: no shared/tools/p4 beside %s or its parents: set %s", ErrAbsent, root, EnvDir)
}

func isToolchain(d string) bool {
	st, err := os.Stat(filepath.Join(d, "bin", "p4c-bm2-ss"))
	return err == nil && !st.IsDir()
}

var (
	prepareOnce sync.Once
	prepared    *Tools
	prepareErr  error
)

// Prepare locates the toolchain and lays it out, once per process, under the
// user's cache directory (~/.cache/switchml/p4tools-<hash of the source>),
// with link stubs turned back into links. A later call, or a later process
// on the same machine, reuses the copy.
func Prepare() (*Tools, error) {
	prepareOnce.Do(func() {
		src, err := Locate()
		if err != nil {
			prepareErr = err
			return
		}
		prepared, prepareErr = prepareFrom(src)
	})
	return prepared, prepareErr
}

func prepareFrom(src string) (*Tools, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("p4tools: no cache directory to prepare the toolchain in: %w", err)
	}
	stamp, err := fingerprint(src)
	if err != nil {
		return nil, err
	}
	dst := filepath.Join(cache, "switchml", "p4tools-"+stamp)
	if _, err := os.Stat(filepath.Join(dst, ".complete")); err == nil {
		return &Tools{Source: src, Dir: dst}, nil
	}
	tmp := dst + fmt.Sprintf(".tmp%d", os.Getpid())
	_ = os.RemoveAll(tmp)
	if err := copyTree(src, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("p4tools: copy %s to %s: %w", src, tmp, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(src+"\n"), 0o644); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("p4tools: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.RemoveAll(tmp)
		if _, err2 := os.Stat(filepath.Join(dst, ".complete")); err2 == nil {
			return &Tools{Source: src, Dir: dst}, nil // another process won the race
		}
		return nil, fmt.Errorf("p4tools: %w", err)
	}
	return &Tools{Source: src, Dir: dst}, nil
}

// fingerprint names a prepared copy after the source's README and the sizes
// and times of its binaries, so a changed toolchain gets a fresh copy.
func fingerprint(src string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, src)
	if b, err := os.ReadFile(filepath.Join(src, "README.md")); err == nil {
		h.Write(b)
	}
	ents, err := os.ReadDir(filepath.Join(src, "bin"))
	if err != nil {
		return "", fmt.Errorf("p4tools: %w", err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return "", fmt.Errorf("p4tools: %w", err)
		}
		fmt.Fprintln(h, e.Name(), info.Size(), info.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// copyTree copies src to dst, keeping real links and turning link stubs (a
// small regular file whose whole content names a sibling that exists) into
// links.
func copyTree(src, dst string) error {
	return walkCopy(src, dst, func(p, out string, info fs.FileInfo) error {
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		}
		if target, ok := linkStub(p, info); ok {
			return os.Symlink(target, out)
		}
		return copyFile(p, out, info.Mode().Perm()|0o200)
	})
}

// walkCopy lays out under dst the folders under src, and hands each other
// entry to file with the path it takes under dst.
func walkCopy(src, dst string, file func(p, out string, info fs.FileInfo) error) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return file(p, out, info)
	})
}

func linkStub(p string, info fs.FileInfo) (string, bool) {
	if info.Size() == 0 || info.Size() > 255 {
		return "", false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", false
	}
	target := string(b)
	if strings.ContainsAny(target, "\n\x00 ") || filepath.IsAbs(target) || target == filepath.Base(p) {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
		return "", false
	}
	return target, true
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Bin returns the path of a tool in the prepared copy.
func (t *Tools) Bin(name string) string { return filepath.Join(t.Dir, "bin", name) }

// Env returns the process environment with the toolchain's variables set, as
// its env.sh sets them (without env.sh's package installation).
func (t *Tools) Env() []string {
	set := map[string]string{
		"PATH":                filepath.Join(t.Dir, "bin") + prepend(os.Getenv("PATH")),
		"LD_LIBRARY_PATH":     filepath.Join(t.Dir, "lib") + prepend(os.Getenv("LD_LIBRARY_PATH")),
		"PYTHONPATH":          filepath.Join(t.Dir, "lib", "python") + prepend(os.Getenv("PYTHONPATH")),
		"P4C_16_INCLUDE_PATH": filepath.Join(t.Dir, "share", "p4c", "p4include"),
		"P4_TOOLS_DIR":        t.Dir,
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

func prepend(rest string) string {
	if rest == "" {
		return ""
	}
	return ":" + rest
}

// Command returns a command that runs a tool of the prepared copy with the
// toolchain's environment.
func (t *Tools) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, t.Bin(name), args...)
	cmd.Env = t.Env()
	return cmd
}

// Run runs a tool and returns its combined output; the error carries the
// output's tail so that a compiler's message reaches the caller.
func (t *Tools) Run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := t.Command(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.Bytes(), 4000))
	}
	return out.Bytes(), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
