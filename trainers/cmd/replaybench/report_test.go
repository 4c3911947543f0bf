package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/switchml/switchml-go/internal/golden"
)

// Every checked-in replay's report and plot is what `replaybench report`
// writes from its replay.json.
func TestCheckedInReportsRegenerate(t *testing.T) {
	t.Chdir("../..")
	var dirs []string
	err := filepath.WalkDir("results/replay", func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "replay.json" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return err
	})
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no results/replay/**/replay.json: %v", err)
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			golden.Regenerate(t, dir, []string{"replay.json"}, "go run ./cmd/replaybench report "+dir, func(tmp string) error {
				return report([]string{tmp})
			})
		})
	}
}
