package benchmarks

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/internal/golden"
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
			regen := "switchml bench --report " + dir
			written := golden.Regenerate(t, dir, []string{"results.json"}, regen, func(tmp string) error {
				_, err := Report(tmp)
				return err
			})
			// No file beside them that Report would not write.
			if checkedIn := names(t, dir); !slices.Equal(written, checkedIn) {
				t.Errorf("%s holds %v; its results.json gives %v (run `%s`)", dir, checkedIn, written, regen)
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
