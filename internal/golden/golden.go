// Package golden checks that what a report command writes from a results
// file is what is checked in beside it, byte for byte.
package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Regenerate copies the files inputs (names in dir) into a temporary
// directory, runs write on that directory, and fails t for every file
// write leaves there that dir lacks or holds with other bytes. regen is
// the command that rewrites dir, for the failure's message. It returns
// the names of the files in the temporary directory, sorted.
func Regenerate(t *testing.T, dir string, inputs []string, regen string, write func(tmp string) error) []string {
	t.Helper()
	tmp := t.TempDir()
	for _, name := range inputs {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := write(tmp); err != nil {
		t.Fatalf("rewriting %s: %v", dir, err)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		names = append(names, e.Name())
		got, err := os.ReadFile(filepath.Join(tmp, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, e.Name()))
		switch {
		case err != nil:
			t.Errorf("%s: not checked in, but its results give it (run `%s`)", filepath.Join(dir, e.Name()), regen)
		case !bytes.Equal(got, want):
			t.Errorf("%s: its results give other bytes than the checked-in file (run `%s` and see the diff)", filepath.Join(dir, e.Name()), regen)
		}
	}
	return names
}
