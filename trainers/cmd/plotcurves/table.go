package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// curve is one run: a file of epoch records.
type curve struct {
	path string
	recs []record
}

// label names a run's backend and, for a switch, the width its gradients
// travelled at: "exact", "switchml, 16-bit wire".
func (r curve) label() string {
	last := r.recs[len(r.recs)-1]
	if last.WireBits == 0 {
		return last.Backend
	}
	return fmt.Sprintf("%s, %d-bit wire", last.Backend, last.WireBits)
}

func (r curve) last() record { return r.recs[len(r.recs)-1] }

// writeTable writes the test accuracy of every run at each epoch and its
// final accuracy's difference, in points, to the run labelled ref with the
// same seed (the first run's label when ref is empty). With several seeds
// it adds, per label, the mean and the largest difference over the seeds.
func writeTable(w io.Writer, runs []curve, ref string) error {
	if len(runs) == 0 {
		return fmt.Errorf("no runs to tabulate")
	}
	if ref == "" {
		ref = runs[0].label()
	}
	refs := map[int64]record{}
	epochs := 0
	for _, r := range runs {
		if r.label() == ref {
			if _, dup := refs[r.last().Seed]; dup {
				return fmt.Errorf("%s: a second %q run of seed %d: give one reference run per seed", r.path, ref, r.last().Seed)
			}
			refs[r.last().Seed] = r.last()
		}
		epochs = max(epochs, len(r.recs))
	}
	var b strings.Builder
	b.WriteString("| run | seed |")
	for e := 1; e <= epochs; e++ {
		fmt.Fprintf(&b, " epoch %d |", e)
	}
	fmt.Fprintf(&b, " final test loss | final accuracy − %s (points) | file |\n|---|---:|", ref)
	b.WriteString(strings.Repeat("---:|", epochs))
	b.WriteString("---:|---:|---|\n")
	diffs := map[string][]float64{}
	var labels []string
	for _, r := range runs {
		last := r.last()
		base, ok := refs[last.Seed]
		if !ok {
			return fmt.Errorf("%s: no %q run of seed %d to compare with: add its file", r.path, ref, last.Seed)
		}
		fmt.Fprintf(&b, "| %s | %d |", r.label(), last.Seed)
		for e := 0; e < epochs; e++ {
			if e < len(r.recs) {
				fmt.Fprintf(&b, " %.2f%% |", 100*r.recs[e].TestAccuracy)
			} else {
				b.WriteString(" |")
			}
		}
		d := 100 * (last.TestAccuracy - base.TestAccuracy)
		fmt.Fprintf(&b, " %.4f | %+.2f | `%s` |\n", last.TestLoss, d, r.path)
		if !slices.Contains(labels, r.label()) {
			labels = append(labels, r.label())
		}
		diffs[r.label()] = append(diffs[r.label()], d)
	}
	if len(refs) > 1 {
		fmt.Fprintf(&b, "\n| run | seeds | mean final accuracy − %s (points) | largest \\|difference\\| |\n|---|---:|---:|---:|\n", ref)
		for _, l := range labels {
			var sum, worst float64
			for _, d := range diffs[l] {
				sum += d
				worst = max(worst, math.Abs(d))
			}
			fmt.Fprintf(&b, "| %s | %d | %+.2f | %.2f |\n", l, len(diffs[l]), sum/float64(len(diffs[l])), worst)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
