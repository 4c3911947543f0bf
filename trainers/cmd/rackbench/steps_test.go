package main

import (
	"strings"
	"testing"
)

// The error column is (replayed - measured) / measured, for the step and
// for the allreduce alone.
func TestStepsTableErrors(t *testing.T) {
	rep := &StepsReport{StepsTimed: 5, Warmup: 1, Points: []StepPoint{{
		RateMbit: 200, Workers: 4, Model: "ncf", Backend: "ring", Batch: 1024,
		Measured: &Measured{StepS: 2, ComputeS: 1, CommS: 1},
		Replayed: &Replayed{StepS: 1.5, ComputeS: 0.3, CommS: 1.2},
	}, {RateMbit: 200, Workers: 4, Model: "lstm", Backend: "ring", Error: "rank 2: exit status 1"}}}
	md := stepsMarkdown(rep)
	for _, want := range []string{"| 2.000 | 1.000 | 1.000 | 1.500 | 0.300 | 1.200 | -25% | +20% |", "failed: rank 2: exit status 1"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}
