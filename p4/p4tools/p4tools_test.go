package p4tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyTreeRestoresLinkStubs(t *testing.T) {
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "bin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(src, "lib"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "lib", "libx.so.0.0.0"), []byte("\x7fELF real library"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "lib", "libx.so.0"), []byte("libx.so.0.0.0"), 0o644))
	// A small file whose content names nothing that exists stays a file.
	must(t, os.WriteFile(filepath.Join(src, "lib", "note"), []byte("missing.so"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "bin", "tool"), []byte("#!/bin/sh\necho ok\n"), 0o555))
	must(t, os.MkdirAll(filepath.Join(src, "share", "inc"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "inc"), []byte("share/inc"), 0o444))

	dst := filepath.Join(t.TempDir(), "out")
	must(t, copyTree(src, dst))

	for _, c := range []struct{ path, target string }{
		{"lib/libx.so.0", "libx.so.0.0.0"},
		{"inc", "share/inc"},
	} {
		got, err := os.Readlink(filepath.Join(dst, c.path))
		if err != nil || got != c.target {
			t.Errorf("%s: link %q, %v; want a link to %q", c.path, got, err, c.target)
		}
	}
	if st, err := os.Lstat(filepath.Join(dst, "lib", "note")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("lib/note: want a regular file, got %v, %v", st, err)
	}
	b, err := os.ReadFile(filepath.Join(dst, "lib", "libx.so.0"))
	if err != nil || string(b) != "\x7fELF real library" {
		t.Errorf("reading through the restored link: %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dst, "bin", "tool")); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("bin/tool lost its execute bit: %v, %v", st, err)
	}
}

func TestLocateHonoursEnv(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	if _, err := Locate(); err == nil || !strings.Contains(err.Error(), EnvDir) {
		t.Fatalf("Locate with an empty %s: %v, want an error naming it", EnvDir, err)
	}
}

// TestToolsRun runs each tool the project uses from the prepared copy.
func TestToolsRun(t *testing.T) {
	tools := ForTest(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"p4c-bm2-ss", []string{"--version"}, "Version"},
		{"simple_switch_grpc", []string{"--version"}, "1."},
		{"bf-p4c", []string{"--version"}, "p4c"},
	} {
		out, err := tools.Run(context.Background(), "", c.name, c.args...)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%s %v printed %q, want it to contain %q", c.name, c.args, out, c.want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
