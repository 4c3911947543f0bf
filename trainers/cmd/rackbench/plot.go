package main

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotAccuracy draws each backend's test accuracy against the wall clock,
// with the target as a dashed line.
func plotAccuracy(path string, rep *AccuracyReport) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s on Fashion-MNIST, %d workers, %g Mbit/s per port", rep.Model, rep.Workers, rep.RateMbit)
	p.X.Label.Text = "wall clock since the ranks started (s)"
	p.Y.Label.Text = "test accuracy (%)"
	var lines []any
	lo := 100 * rep.Target
	for _, run := range rep.Runs {
		if len(run.Epochs) == 0 {
			continue
		}
		var pts plotter.XYs
		for _, p := range run.points() {
			pts = append(pts, plotter.XY{X: p.wallS, Y: 100 * p.accuracy})
			lo = min(lo, 100*p.accuracy)
		}
		name := run.Backend
		if run.TargetProgress > 0 {
			name = fmt.Sprintf("%s: %.0f%% after %.0f s", run.Backend, 100*rep.Target, run.TimeToTargetS)
		}
		lines = append(lines, name, pts)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	target := plotter.NewFunction(func(float64) float64 { return 100 * rep.Target })
	target.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(target)
	p.Legend.Add(fmt.Sprintf("target %.0f%%", 100*rep.Target), target)
	p.Legend.Top = false
	p.Y.Min = lo - 1
	p.X.Min = 0
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
