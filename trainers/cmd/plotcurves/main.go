// Command plotcurves draws test-accuracy curves from the JSON lines that
// `train --json` prints, one curve per file, and with --table writes their
// accuracies and how far each run ends from the reference run of its seed:
//
//	go run ./cmd/plotcurves --out curves.png --table summary.md exact.jsonl switchml.jsonl
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
	TestLoss     float64 `json:"test_loss"`
	StepS        float64 `json:"step_s"`
	WireBits     int     `json:"wire_bits"`
	Seed         int64   `json:"seed"`
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
	fs := cli.NewFlagSet("plotcurves", "[--out FILE.png] [--title TEXT] [--table FILE.md [--reference RUN]] RUN.jsonl...", "Test-accuracy curves, one per `train --json` output, in one PNG, and their table.")
	out := fs.String("out", "curves.png", "output PNG")
	title := fs.String("title", "Test accuracy per epoch", "plot title")
	table := fs.String("table", "", "also write a Markdown table of every run's test accuracy per epoch and its final difference, in points, to the reference run of the same seed")
	ref := fs.String("reference", "", "--table: the reference run's label, its backend (\"exact\") or backend and wire (\"switchml, 32-bit wire\"); default: the first file's")
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
	var runs []curve
	seeds := map[int64]bool{}
	for _, path := range fs.Args() {
		recs, err := read(path)
		if err != nil {
			return err
		}
		runs = append(runs, curve{path: path, recs: recs})
		seeds[recs[len(recs)-1].Seed] = true
	}
	for _, r := range runs {
		pts := make(plotter.XYs, len(r.recs))
		for i, e := range r.recs {
			pts[i] = plotter.XY{X: float64(e.Epoch), Y: 100 * e.TestAccuracy}
		}
		last := r.last()
		name := fmt.Sprintf("%s, %d workers: %.2f%%", r.label(), last.Workers, 100*last.TestAccuracy)
		if len(seeds) > 1 {
			name = fmt.Sprintf("%s, %d workers, seed %d: %.2f%%", r.label(), last.Workers, last.Seed, 100*last.TestAccuracy)
		}
		lines = append(lines, name, pts)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, *out); err != nil {
		return err
	}
	if *table == "" {
		return nil
	}
	f, err := os.Create(*table)
	if err != nil {
		return err
	}
	if err := writeTable(f, runs, *ref); err != nil {
		f.Close()
		return fmt.Errorf("--table: %w", err)
	}
	return f.Close()
}
