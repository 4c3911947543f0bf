// Command plotcurves draws test-accuracy curves from the JSON lines that
// `train --json` prints, one curve per file:
//
//	go run ./cmd/plotcurves --out curves.png exact.jsonl switchml.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/switchml/switchml-go/trainers/internal/cli"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type record struct {
	Kind         string  `json:"kind"`
	Epoch        int     `json:"epoch"`
	Backend      string  `json:"backend"`
	Workers      int     `json:"workers"`
	Model        string  `json:"model"`
	TestAccuracy float64 `json:"test_accuracy"`
	StepS        float64 `json:"step_s"`
}

func read(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(t, "{") {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(t), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if r.Kind == "eval" {
			// An evaluation within an epoch (train --eval-every).
			continue
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no epoch records", path)
	}
	return out, sc.Err()
}

func main() {
	cli.Exit("plotcurves", run(os.Args[1:]))
}

func run(args []string) error {
	fs := cli.NewFlagSet("plotcurves", "[--out FILE.png] [--title TEXT] RUN.jsonl...", "Test-accuracy curves, one per `train --json` output, in one PNG.")
	out := fs.String("out", "curves.png", "output PNG")
	title := fs.String("title", "Test accuracy per epoch", "plot title")
	if err := cli.ParseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return cli.Usagef("plotcurves", "name the runs: the JSON lines of train --json, one file per run")
	}
	p := plot.New()
	p.Title.Text = *title
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = "test accuracy (%)"
	p.Legend.Top = false
	p.Legend.Left = false
	var lines []any
	for _, path := range fs.Args() {
		recs, err := read(path)
		if err != nil {
			return err
		}
		pts := make(plotter.XYs, len(recs))
		for i, r := range recs {
			pts[i] = plotter.XY{X: float64(r.Epoch), Y: 100 * r.TestAccuracy}
		}
		last := recs[len(recs)-1]
		name := fmt.Sprintf("%s, %d workers: %.2f%%", last.Backend, last.Workers, 100*last.TestAccuracy)
		lines = append(lines, name, pts)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, *out)
}
