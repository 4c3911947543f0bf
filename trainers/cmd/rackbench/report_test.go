package main

import (
	"path/filepath"
	"testing"

	"github.com/switchml/switchml-go/internal/golden"
)

// Every checked-in rack run's report, table and plot is what `rackbench
// report` writes from its results file.
func TestCheckedInReportsRegenerate(t *testing.T) {
	t.Chdir("../..") // the profiles steps reports read are in trainers/profiles
	const dir = "results/rack-e2e"
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/*.json: %v", dir, err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	golden.Regenerate(t, dir, names, "go run ./cmd/rackbench report "+dir+"/*.json", func(tmp string) error {
		var paths []string
		for _, n := range names {
			paths = append(paths, filepath.Join(tmp, n))
		}
		return report(paths)
	})
}
