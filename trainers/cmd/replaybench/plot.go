package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotSpeedups draws, per model, SwitchML's step-time speedup over Gloo and
// over the ring at each rate (missing points are drawn as 0).
func plotSpeedups(path string, rep *Report, models []string, rates []float64) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("SwitchML training speedup, profile replay, %d workers", rep.Workers)
	p.Y.Label.Text = "step time of baseline / step time of SwitchML"
	p.NominalX(models...)
	w := vg.Points(10)
	colors := []color.Color{
		color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 174, G: 199, B: 232, A: 255},
		color.RGBA{R: 214, G: 39, B: 40, A: 255}, color.RGBA{R: 255, G: 152, B: 150, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 152, G: 223, B: 138, A: 255},
	}
	nbars := 2 * len(rates)
	k := 0
	top := 1.0
	for _, rate := range rates {
		for _, base := range []string{"gloo", "ring"} {
			vals := make(plotter.Values, len(models))
			for i, m := range models {
				s, o := find(rep, rate, m, "switchml"), find(rep, rate, m, base)
				if s != nil && o != nil && s.StepS > 0 {
					vals[i] = o.StepS / s.StepS
					top = max(top, vals[i])
				}
			}
			bars, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return err
			}
			bars.Color = colors[k%len(colors)]
			bars.LineStyle.Width = 0
			bars.Offset = w * vg.Length(float64(k)-float64(nbars-1)/2)
			p.Add(bars)
			p.Legend.Add(fmt.Sprintf("vs %s, %g Mbit/s", base, rate), bars)
			k++
		}
	}
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(one)
	// Headroom above the tallest bar keeps the legend off the bars.
	p.Y.Min, p.Y.Max = 0, top*1.45
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}
