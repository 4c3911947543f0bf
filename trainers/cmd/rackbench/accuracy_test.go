package main

import (
	"strings"
	"testing"

	"github.com/switchml/switchml-go/trainers/train"
)

func epoch(n int, acc, epochS, wallS float64) Epoch {
	return Epoch{EpochResult: train.EpochResult{Epoch: n, TestAccuracy: acc, EpochS: epochS}, WallS: wallS}
}

func TestReachedTakesTheFirstEpochAtTarget(t *testing.T) {
	run := AccuracyRun{Backend: "ring", Epochs: []Epoch{epoch(1, 0.85, 10, 12), epoch(2, 0.881, 11, 24), epoch(3, 0.87, 10, 35), epoch(4, 0.89, 10, 46)}}
	run.reached(0.88)
	if run.TargetEpoch != 2 || run.TargetProgress != 2 || run.TimeToTargetS != 24 || run.TrainToTargetS != 21 {
		t.Errorf("reached at epoch %d (%g) after %g s wall, %g s training; want epoch 2, 24 s, 21 s", run.TargetEpoch, run.TargetProgress, run.TimeToTargetS, run.TrainToTargetS)
	}
	// An evaluation half way through epoch 2 reaches it first: 10 s of
	// epoch 1 and 5 s into epoch 2.
	run.Evals = []Eval{{EvalResult: train.EvalResult{Kind: "eval", Epoch: 2, Step: 5, Steps: 10, Progress: 1.5, TestAccuracy: 0.885, ElapsedS: 5}, WallS: 18}}
	run.reached(0.88)
	if run.TargetEpoch != 2 || run.TargetProgress != 1.5 || run.TimeToTargetS != 18 || run.TrainToTargetS != 15 {
		t.Errorf("reached at epoch %d (%g) after %g s wall, %g s training; want epoch 2 (1.5), 18 s, 15 s", run.TargetEpoch, run.TargetProgress, run.TimeToTargetS, run.TrainToTargetS)
	}
	run.Evals = nil
	run.reached(0.95)
	if run.TargetEpoch != 0 {
		t.Errorf("0.95 reached at epoch %d, want never", run.TargetEpoch)
	}
}

func TestAccuracyTableShowsTheLargestDifference(t *testing.T) {
	rep := &AccuracyReport{Model: "cnn", Workers: 4, RateMbit: 200, Target: 0.88, Runs: []AccuracyRun{
		{Backend: "switchml", Epochs: []Epoch{epoch(1, 0.861, 10, 12), epoch(2, 0.884, 10, 22)}},
		{Backend: "ring", Epochs: []Epoch{epoch(1, 0.857, 12, 14), epoch(2, 0.880, 12, 26)}},
	}}
	for i := range rep.Runs {
		rep.Runs[i].reached(rep.Target)
	}
	md := accuracyMarkdown(rep)
	for _, want := range []string{"| 1 | 86.10 | 12.0 | 85.70 | 14.0 | 0.40 | +0.40 |", "| switchml | 2 | 22.0 | 20.0 |", "| ring | 2 | 26.0 | 24.0 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}

func TestSameAccuraciesComparesEveryLine(t *testing.T) {
	a := []byte(`{"kind":"eval","epoch":1,"step":5,"test_accuracy":0.8}
{"epoch":1,"test_accuracy":0.85}
`)
	if err := sameAccuracies(a, a); err != nil {
		t.Fatal(err)
	}
	b := []byte(`{"kind":"eval","epoch":1,"step":5,"test_accuracy":0.81}
{"epoch":1,"test_accuracy":0.85}
`)
	if err := sameAccuracies(a, b); err == nil || !strings.Contains(err.Error(), "step 5") {
		t.Errorf("sameAccuracies = %v, want the difference at step 5", err)
	}
}
