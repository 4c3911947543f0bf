package benchmarks

import (
	"cmp"
	"fmt"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotSweep draws y against x for every system in rs.
func plotSweep(path, title, xlabel, ylabel string, rs []result, xf, yf func(result) float64, logX bool) error {
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = xlabel
	pl.Y.Label.Text = ylabel
	if logX {
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	pl.Legend.Top = true
	pl.Legend.Left = true
	var args []any
	for _, s := range systemsIn(rs) {
		var pts plotter.XYs
		for _, r := range rs {
			if r.System == s && r.Error == "" {
				pts = append(pts, plotter.XY{X: xf(r), Y: yf(r)})
			}
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		if len(pts) > 0 {
			args = append(args, systemNames[s], pts)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if err := plotutil.AddLinePoints(pl, args...); err != nil {
		return err
	}
	pl.Y.Min = 0
	return pl.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func plotSpeedup(path string, rs []result, o Options) error {
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("SwitchML speedup against workers (%s, %g Mbit/s ports)", FormatSize(o.Size), o.Rate)
	pl.X.Label.Text = "workers"
	pl.Y.Label.Text = "baseline TAT / SwitchML TAT"
	pl.Legend.Top = true
	pl.Legend.Left = true
	var args []any
	var ideal plotter.XYs
	for _, base := range []string{"gloo", "ring"} {
		var pts plotter.XYs
		for _, n := range values(rs, byWorkers) {
			sm, ok1 := one(rs, "switchml", byWorkers, n)
			b, ok2 := one(rs, base, byWorkers, n)
			if ok1 && ok2 {
				pts = append(pts, plotter.XY{X: float64(n), Y: b.MedianTAT / sm.MedianTAT})
			}
		}
		if len(pts) > 0 {
			args = append(args, "over "+systemNames[base], pts)
		}
	}
	for _, n := range values(rs, byWorkers) {
		ideal = append(ideal, plotter.XY{X: float64(n), Y: 2 * float64(n-1) / float64(n)})
	}
	if len(args) == 0 {
		return nil
	}
	args = append(args, "ideal over a line-rate ring, 2(n-1)/n", ideal)
	if err := plotutil.AddLinePoints(pl, args...); err != nil {
		return err
	}
	pl.Y.Min = 0
	return pl.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

// plotBars draws each system's median TAT on every input as grouped bars.
func plotBars(path, title, ylabel string, rs []result, ins []sparseInput) error {
	pl := plot.New()
	pl.Title.Text = title
	pl.Y.Label.Text = ylabel
	pl.Legend.Top = true
	systems := systemsIn(rs)
	width := vg.Points(120 / float64(max(len(systems), 1)))
	var names []string
	for _, in := range ins {
		names = append(names, in.label)
	}
	drawn := 0
	for i, s := range systems {
		vals := make(plotter.Values, len(ins))
		for j, in := range ins {
			if r, ok := in.of(s); ok {
				vals[j] = r.MedianTAT
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(systems)-1)/2)
		pl.Add(bars)
		pl.Legend.Add(systemNames[s], bars)
		drawn++
	}
	if drawn == 0 || len(ins) == 0 {
		return nil
	}
	pl.NominalX(names...)
	// Room for the outer bars beside each input's tick and for the
	// legend above the tallest bar.
	pl.X.Min, pl.X.Max = -0.5, float64(len(ins))-0.5
	pl.Y.Min, pl.Y.Max = 0, pl.Y.Max*1.25
	return pl.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
