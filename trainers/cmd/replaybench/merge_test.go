package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testReport(command, commit string, points ...Point) *Report {
	return &Report{Command: command, Commit: commit, Runs: []RunInfo{{Command: command, Commit: commit}},
		Workers: 8, StepsTimed: 5, Warmup: 1, BucketElems: 100, SwitchML: "s", Points: points}
}

// Merging keeps every run's command and commit, points each point at the
// run that measured it, and lets a later run replace a point.
func TestMergeKeepsEveryRunsCommand(t *testing.T) {
	a := testReport("replaybench --rates 200", "aaa",
		Point{RateMbit: 200, Model: "ncf", Backend: "ring", StepS: 1},
		Point{RateMbit: 200, Model: "ncf", Backend: "switchml", StepS: 2})
	b := testReport("replaybench --rates 200 --models ncf --backends switchml", "bbb",
		Point{RateMbit: 200, Model: "ncf", Backend: "switchml", StepS: 3})
	m, err := Merge([]*Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Runs) != 2 || m.Runs[0].Command != a.Command || m.Runs[1].Command != b.Command ||
		m.Runs[0].Commit != "aaa" || m.Runs[1].Commit != "bbb" {
		t.Fatalf("runs %+v, want both commands and commits in order", m.Runs)
	}
	ring, sml := find(m, 200, "ncf", "ring"), find(m, 200, "ncf", "switchml")
	if ring == nil || sml == nil || len(m.Points) != 2 {
		t.Fatalf("points %+v", m.Points)
	}
	if ring.Run != 0 || sml.Run != 1 || sml.StepS != 3 {
		t.Errorf("ring from run %d, switchml from run %d with step %g; want runs 0 and 1, the later step 3", ring.Run, sml.Run, sml.StepS)
	}
	md := markdown(m, []string{"ncf"}, []string{"switchml", "ring"}, []float64{200})
	for _, want := range []string{a.Command, b.Command, "commit aaa", "commit bbb"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}

func TestMergeRefusesDifferentSettings(t *testing.T) {
	a := testReport("x", "aaa")
	b := testReport("y", "bbb")
	b.StepsTimed = 2
	if _, err := Merge([]*Report{a, b}); err == nil || !strings.Contains(err.Error(), "timed steps") {
		t.Fatalf("Merge = %v, want an error naming the timed steps", err)
	}
}

// A replay.json written before runs were recorded reads as one run with
// its own command.
func TestLoadOldReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replay.json")
	if err := os.WriteFile(path, []byte(`{"command":"replaybench --steps 2","workers":8,"points":[{"rate_mbit":200,"model":"ncf","backend":"ring"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := loadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 1 || r.Runs[0].Command != "replaybench --steps 2" || r.Runs[0].Commit != "not recorded" {
		t.Errorf("runs %+v", r.Runs)
	}
}

func TestProfilesTable(t *testing.T) {
	var sb strings.Builder
	if err := writeProfiles(&sb, "../../profiles"); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{"| resnet50 | 25,557,032 | 8 |", "| ugatit | 670,761,088 |", "derived from lstm"} {
		if !strings.Contains(out, want) {
			t.Errorf("profiles table lacks %q:\n%s", want, out)
		}
	}
	if err := writeProfiles(&sb, t.TempDir()); err == nil {
		t.Error("an empty directory gave no error")
	}
}
