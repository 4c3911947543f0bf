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

// The stretched replay multiplies the profile's compute by the CPUs the
// profile had over a rank's share: 2 CPUs against 1 thread on 2 CPUs among
// 4 ranks (half a CPU) is 4.
func TestStepsStretchedByCPUShare(t *testing.T) {
	rep := &StepsReport{CPUs: 2, Threads: 1, Points: []StepPoint{{
		RateMbit: 200, Workers: 4, Model: "resnet50", Backend: "ring", ProfileCPUs: 2,
		Measured: &Measured{StepS: 10, ComputeS: 6, CommS: 4},
		Replayed: &Replayed{StepS: 5.5, ComputeS: 1.5, CommS: 4},
	}}}
	if k := cpuShare(rep, rep.Points[0]); k != 4 {
		t.Fatalf("cpuShare = %g, want 4", k)
	}
	md := stepsMarkdown(rep)
	if want := "| 200 | 4 | resnet50 | ring | 10.000 | 6.000 | 4.0 | 6.000 | +0% | +0% |"; !strings.Contains(md, want) {
		t.Errorf("table lacks %q:\n%s", want, md)
	}
	rep.Points[0].ProfileCPUs = 0
	if md := stepsMarkdown(rep); strings.Contains(md, "stretched") {
		t.Errorf("a point without the profile's CPUs got a stretched row:\n%s", md)
	}
}
