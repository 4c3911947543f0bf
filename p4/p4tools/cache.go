package p4tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EnvCompileCache names the environment variable that turns the compile
// cache off ("off") or moves it (a folder).
const EnvCompileCache = "SWITCHML_P4_COMPILE_CACHE"

// maxCached is how many compiler runs the cache keeps (a bf-p4c run with -g
// leaves about 65 MB); the least recently used go first.
const maxCached = 12

// RunCached runs a compiler as Run does, in dir, and keeps what the run
// left: its output, its exit status and every file it wrote under dir. A
// later run of the same tool of the same toolchain, with the same
// arguments on input files of the same contents, restores all of that into
// its own dir instead of compiling again. inputs are the run's input files
// (the program source); arguments that name dir or an input are compared
// with those names taken out, so that runs in different folders share
// results. A failed compile is kept too (it fails the same way again); a
// run that was cancelled or could not start is not.
//
// The cache lives in ~/.cache/switchml/p4compile; $SWITCHML_P4_COMPILE_CACHE
// moves it, or turns it off with "off". cached reports a restored run.
func (t *Tools) RunCached(ctx context.Context, dir string, inputs []string, name string, args ...string) (out []byte, cached bool, err error) {
	root, on := compileCacheDir()
	if !on {
		out, err := t.Run(ctx, dir, name, args...)
		return out, false, err
	}
	key, err := t.compileKey(dir, inputs, name, args)
	if err != nil {
		return nil, false, err
	}
	entry := filepath.Join(root, key)
	if out, code, ok := restore(entry, dir); ok {
		if code != 0 {
			return out, true, fmt.Errorf("%s %s: exit status %d (restored from the compile cache %s)\n%s",
				name, strings.Join(args, " "), code, entry, tail(out, 4000))
		}
		return out, true, nil
	}
	out, err = t.Run(ctx, dir, name, args...)
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || ctx.Err() != nil || exit.ExitCode() < 0 {
			return out, false, err // not the compiler's verdict: keep nothing
		}
		code = exit.ExitCode()
	}
	// A cache that cannot be written costs time, never a result.
	_ = store(root, entry, dir, inputs, out, code)
	return out, false, err
}

// compileCacheDir returns the cache's folder and whether it is on.
func compileCacheDir() (string, bool) {
	switch v := os.Getenv(EnvCompileCache); v {
	case "off", "0":
		return "", false
	case "":
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", false
		}
		return filepath.Join(cache, "switchml", "p4compile"), true
	default:
		return v, true
	}
}

// compileKey hashes what decides a compiler's result: the toolchain (by
// content, see identity), the tool, the arguments with dir and the inputs'
// paths taken out, and the inputs' contents.
func (t *Tools) compileKey(dir string, inputs []string, name string, args []string) (string, error) {
	id, err := t.identity()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "toolchain %s\ntool %s\n", id, name)
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("p4tools: %w", err)
	}
	repl := []string{absDir, "$DIR"}
	for i, in := range inputs {
		abs, err := filepath.Abs(in)
		if err != nil {
			return "", fmt.Errorf("p4tools: %w", err)
		}
		repl = append(repl, abs, "$IN"+strconv.Itoa(i))
	}
	r := strings.NewReplacer(repl...)
	for _, a := range args {
		fmt.Fprintf(h, "arg %q\n", r.Replace(a))
	}
	for i, in := range inputs {
		b, err := os.ReadFile(in)
		if err != nil {
			return "", fmt.Errorf("p4tools: compile input: %w", err)
		}
		fmt.Fprintf(h, "input %d %d\n", i, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// identity names the toolchain by what it holds, not where: its README and
// the name and size of every file in it. A copy of the same toolchain in
// another folder (a fresh clone with shared/ laid beside it) has the same
// identity, and so finds the compiles an earlier run kept.
func (t *Tools) identity() (string, error) {
	t.idOnce.Do(func() {
		src := t.Source
		if src == "" {
			src = t.Dir
		}
		h := sha256.New()
		if b, err := os.ReadFile(filepath.Join(src, "README.md")); err == nil {
			h.Write(b)
		}
		t.idErr = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(src, p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), info.Size())
			return nil
		})
		if t.idErr != nil {
			t.idErr = fmt.Errorf("p4tools: reading the toolchain %s: %w", src, t.idErr)
		}
		t.id = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return t.id, t.idErr
}

// An entry is a folder: output (the compiler's combined output), status
// (its exit status) and files/ (what it wrote under its folder).
func restore(entry, dir string) (out []byte, code int, ok bool) {
	st, err := os.ReadFile(filepath.Join(entry, "status"))
	if err != nil {
		return nil, 0, false
	}
	if code, err = strconv.Atoi(strings.TrimSpace(string(st))); err != nil {
		return nil, 0, false
	}
	if out, err = os.ReadFile(filepath.Join(entry, "output")); err != nil {
		return nil, 0, false
	}
	if err := copyFiles(filepath.Join(entry, "files"), dir, nil); err != nil {
		return nil, 0, false
	}
	now := time.Now()
	_ = os.Chtimes(entry, now, now) // recently used: kept longest
	return out, code, true
}

func store(root, entry, dir string, inputs []string, out []byte, code int) error {
	skip := map[string]bool{}
	for _, in := range inputs {
		if abs, err := filepath.Abs(in); err == nil {
			skip[abs] = true
		}
	}
	tmp := entry + fmt.Sprintf(".tmp%d", os.Getpid())
	_ = os.RemoveAll(tmp)
	err := copyFiles(dir, filepath.Join(tmp, "files"), skip)
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "output"), out, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "status"), []byte(strconv.Itoa(code)+"\n"), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, entry)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	prune(root, maxCached)
	return nil
}

// copyFiles copies the folders and regular files under src to dst, less
// the files whose absolute paths skip holds.
func copyFiles(src, dst string, skip map[string]bool) error {
	return walkCopy(src, dst, func(p, out string, info fs.FileInfo) error {
		if !info.Mode().IsRegular() {
			return nil
		}
		if abs, err := filepath.Abs(p); err != nil || skip[abs] {
			return err
		}
		return copyFile(p, out, info.Mode().Perm()|0o200)
	})
}

// prune removes the least recently used entries beyond keep.
func prune(root string, keep int) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type aged struct {
		name string
		mod  int64
	}
	var all []aged
	for _, e := range ents {
		if !e.IsDir() || strings.Contains(e.Name(), ".tmp") {
			continue
		}
		if info, err := e.Info(); err == nil {
			all = append(all, aged{e.Name(), info.ModTime().UnixNano()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod > all[j].mod })
	for i := keep; i < len(all); i++ {
		_ = os.RemoveAll(filepath.Join(root, all[i].name))
	}
}
