package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotScale draws each model's predicted speedup over the TCP ring against
// the number of workers at rate Gbit/s, line rate for every transport, with
// the paper's headline figures as dashed lines.
func plotScale(path string, rep *Report, models []string, ns []int, rate float64) error {
	const scenario = "line rate, vs TCP ring"
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Predicted SwitchML speedup over a TCP ring allreduce, both at line rate, %g Gbit/s, GPU compute", rate)
	p.X.Label.Text = "workers"
	p.Y.Label.Text = "ring step time / SwitchML step time"
	var lines []any
	top := 1.0
	for _, m := range models {
		var pts plotter.XYs
		for _, n := range ns {
			if q := find(rep, m, scenario, n, rate); q != nil {
				pts = append(pts, plotter.XY{X: float64(n), Y: q.Speedup})
				top = max(top, q.Speedup)
			}
		}
		if len(pts) > 0 {
			lines = append(lines, m, pts)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	for _, h := range []struct {
		y    float64
		name string
	}{{5.5, "paper: up to 5.5x over NCCL-TCP"}, {2.3, "paper: about 2.3x over NCCL-RDMA"}} {
		f := plotter.NewFunction(func(float64) float64 { return h.y })
		f.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		f.Color = color.Gray{Y: 120}
		p.Add(f)
		p.Legend.Add(h.name, f)
		top = max(top, h.y)
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(ticks(ns))
	p.Y.Min, p.Y.Max = 0.8, top*1.1
	// The legend sits to the right of the curves, which all stay low.
	p.Legend.Top = true
	p.Legend.XOffs = vg.Points(-10)
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

func ticks(ns []int) []plot.Tick {
	var t []plot.Tick
	for _, n := range ns {
		t = append(t, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	return t
}
