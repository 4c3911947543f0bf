package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/trainers/profile"
)

// The sparse table gives each backend's step and exposed communication,
// and switchml-sparse's speedup over each other backend of the model.
func TestSparseTableSpeedups(t *testing.T) {
	rep := testReport("replaybench --backends switchml,switchml-sparse,gloo", "aaa",
		Point{RateMbit: 200, Model: "ncf", Backend: "switchml", StepS: 3, ExposedCommS: 2.9, Gradients: "g/ncf",
			Switch: &SwitchStats{AllReduces: 12, SentBytes: 250e6}},
		Point{RateMbit: 200, Model: "ncf", Backend: "switchml-sparse", StepS: 1.5, ExposedCommS: 1.4, Gradients: "g/ncf",
			Switch: &SwitchStats{AllReduces: 12, DenseCalls: 2, SentBytes: 20e6}},
		Point{RateMbit: 200, Model: "ncf", Backend: "gloo", StepS: 6, ExposedCommS: 5.9, Gradients: "g/ncf"})
	rep.Gradients = "g"
	backends := []string{"switchml", "switchml-sparse", "gloo"}
	md := markdown(rep, []string{"ncf"}, backends, []float64{200})
	for _, want := range []string{
		"| ncf | recorded | switchml | 3.000 | 2.900 | 2.00x | 250.0 | 0 / 12 |",
		"| ncf | recorded | switchml-sparse | 1.500 | 1.400 | — | 20.0 | 2 / 12 |",
		"| ncf | recorded | gloo | 6.000 | 5.900 | 4.00x | — | — |",
		"recorded gradients of g/<model>",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if md := markdown(rep, []string{"ncf"}, []string{"switchml", "gloo"}, []float64{200}); strings.Contains(md, "switchml-sparse speedup") {
		t.Errorf("a table without switchml-sparse has its section:\n%s", md)
	}
}

// A model with recorded gradients that fit gets its directory, one whose
// files do not fit gets the reason, one without any replays constants.
func TestRecordedGradientsPerModel(t *testing.T) {
	dir := t.TempDir()
	p := func(name string, params int64) *profile.Profile {
		return &profile.Profile{Model: name, Parameters: params, Units: []profile.Unit{{Name: "a", Parameters: params}}}
	}
	profs := map[string]*profile.Profile{"fits": p("fits", 10), "short": p("short", 10), "none": p("none", 10)}
	for m, size := range map[string]int{"fits": 40, "short": 36} {
		md := filepath.Join(dir, m)
		if err := os.MkdirAll(md, 0o755); err != nil {
			t.Fatal(err)
		}
		meta := `{"model": "` + m + `", "elements": 10, "buckets": [10], "ranks": 2}`
		if err := os.WriteFile(filepath.Join(md, "meta.json"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			if err := os.WriteFile(profile.GradientsFile(md, r), make([]byte, size), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var log bytes.Buffer
	grads, errs := recordedGradients(dir, profs, 100, 2, &log)
	if grads["fits"] != filepath.Join(dir, "fits") || errs["fits"] != nil {
		t.Errorf("fits: directory %q, error %v", grads["fits"], errs["fits"])
	}
	if !errors.Is(errs["short"], profile.ErrGradientsMismatch) || !strings.Contains(errs["short"].Error(), "holds 36 bytes") {
		t.Errorf("short files: %v, want an error naming their size", errs["short"])
	}
	if _, ok := grads["none"]; ok || errs["none"] != nil || !strings.Contains(log.String(), "none: no recorded gradients") {
		t.Errorf("no directory: %q, %v, log %q; want constants, said in the log", grads["none"], errs["none"], log.String())
	}
	if g, e := recordedGradients("", profs, 100, 2, &log); len(g) != 0 || len(e) != 0 {
		t.Errorf("no --gradients: %v %v", g, e)
	}
}
