package benchmarks

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every runs.md checked in under results/ is what its runs give.
func TestCheckedInRunsSummariesRegenerate(t *testing.T) {
	var found int
	err := filepath.WalkDir("results", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != RunsFile {
			return err
		}
		found++
		dir := filepath.Dir(path)
		want, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got, err := runsSummary(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		} else if got != string(want) {
			t.Errorf("%s: its runs give other bytes than the checked-in file (run `switchml bench --report-runs %s` and see the diff)", path, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no results/**/runs.md: the README's headline over several runs has lost its source")
	}
}

// The summary takes each system's speedup within a run, then the median over
// the runs, and its spread: never the best run.
func TestRunsSummaryIsTheTypicalRun(t *testing.T) {
	dir := t.TempDir()
	// Three runs at one point: switchml 1, 2, 4 s against gloo 3, 3, 3 s.
	for i, sm := range []float64{1, 2, 4} {
		run := filepath.Join(dir, "run"+string(rune('1'+i)))
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		f := resultsFile{Results: []result{
			{Point: Point{Mode: "rack", System: "switchml", Workers: 8, Bytes: 64 << 20, RateMbit: 200}, MedianTAT: sm},
			{Point: Point{Mode: "rack", System: "gloo", Workers: 8, Bytes: 64 << 20, RateMbit: 200}, MedianTAT: 3},
			{Point: Point{Mode: "rack", System: "ring", Workers: 8, Bytes: 64 << 20, RateMbit: 200}, Error: "failed"},
		}}
		b, err := json.Marshal(&f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, "results.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ReportRuns(dir)
	if err != nil {
		t.Fatal(err)
	}
	row := "| rack 200Mbit/s n=8 64MiB | switchml | 3 | 2.000 (1.000-4.000) | gloo | 3.000 (3.000-3.000) | 1.50x (0.75x-3.00x) |"
	if !strings.Contains(s, row) {
		t.Errorf("summary lacks the row\n%s\ngot:\n%s", row, s)
	}
	if strings.Contains(s, "| ring |") || strings.Contains(s, "| gloo | 3 |") {
		t.Errorf("a failed point or a baseline against itself has a row:\n%s", s)
	}
	if b, err := os.ReadFile(filepath.Join(dir, RunsFile)); err != nil || string(b) != s {
		t.Errorf("runs.md not written as returned: %v", err)
	}
	// One run is no spread.
	if _, err := ReportRuns(filepath.Join(dir, "run1")); err == nil {
		t.Error("a folder with no runs under it gave a summary")
	}
}
