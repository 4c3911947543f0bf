package benchmarks

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every run checked in under results/ (and folders under it) is what its own results.json gives:
// summary.md and the plots, rewritten by Report, are byte for byte the
// files beside it, and there is no file Report would not write.
func TestCheckedInReportsRegenerate(t *testing.T) {
	var runs []string
	err := filepath.WalkDir("results", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "results.json" {
			runs = append(runs, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no results/**/results.json: the checked-in runs are missing")
	}
	for _, path := range runs {
		dir := filepath.Dir(path)
		t.Run(strings.TrimPrefix(dir, "results/"), func(t *testing.T) {
			tmp := t.TempDir()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, "results.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Report(tmp); err != nil {
				t.Fatalf("Report(%s): %v", dir, err)
			}
			written, checkedIn := names(t, tmp), names(t, dir)
			if !slices.Equal(written, checkedIn) {
				t.Errorf("%s holds %v; its results.json gives %v (run `switchml bench --report %s`)", dir, checkedIn, written, dir)
			}
			for _, name := range written {
				got, _ := os.ReadFile(filepath.Join(tmp, name))
				want, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: Report writes other bytes than the checked-in file (run `switchml bench --report %s` and see the diff)", filepath.Join(dir, name), dir)
				}
			}
		})
	}
}

// names lists the plain files of dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out
}
