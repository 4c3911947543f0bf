package wirebytes

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/internal/golden"
)

// TestCheckedInSummariesRegenerate: every run checked in under
// benchmarks/results holds the summary its capture.json gives, byte for
// byte.
func TestCheckedInSummariesRegenerate(t *testing.T) {
	root := filepath.Join("..", "results")
	var runs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == ResultsFile {
			runs = append(runs, filepath.Dir(path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatalf("no %s under %s: the checked-in capture is missing", ResultsFile, root)
	}
	for _, dir := range runs {
		rel := strings.TrimPrefix(dir, root+string(filepath.Separator))
		t.Run(rel, func(t *testing.T) {
			golden.Regenerate(t, dir, []string{ResultsFile}, "switchml wire-bytes --report benchmarks/results/"+rel, func(tmp string) error {
				_, err := Report(tmp)
				return err
			})
		})
	}
}

// TestReportRefusesWhatIsNoRun: a capture.json without its calls or its
// ranks' reports is refused, naming the case.
func TestReportRefusesWhatIsNoRun(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ json, want string }{
		{`{"workers": 0, "elements": 1, "iters": 1}`, "not a run"},
		{`{"workers": 2, "elements": 8, "warmup": 1, "iters": 2, "cases": [{"dtype": "bfloat16", "calls": [{}]}]}`, "bfloat16: 1 calls and 0 reports"},
		{`not json`, "invalid character"},
	} {
		if err := os.WriteFile(filepath.Join(dir, ResultsFile), []byte(c.json), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Report(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.json, err, c.want)
		}
	}
}
