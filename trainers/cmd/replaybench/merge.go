package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/switchml/switchml-go/trainers/internal/cli"
)

// loadReport reads a replay.json. A file written before runs were
// recorded gets its own command as its one run.
func loadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rep.Runs) == 0 {
		commit := rep.Commit
		if commit == "" {
			commit = "not recorded"
		}
		rep.Runs = []RunInfo{{Command: rep.Command, Commit: commit, Date: rep.Date}}
	}
	for _, p := range rep.Points {
		if p.Run < 0 || p.Run >= len(rep.Runs) {
			return nil, fmt.Errorf("%s: point %g Mbit/s %s %s names run %d of %d", path, p.RateMbit, p.Model, p.Backend, p.Run, len(rep.Runs))
		}
	}
	return &rep, nil
}

// Merge combines reports, in order: every run of every report is kept,
// and a later report's point replaces an earlier one's of the same rate,
// model and backend. The reports must have measured the same way
// (workers, timed and warm-up steps, bucket size, SwitchML settings, the
// recorded gradients), or
// the table would mix configurations without saying so.
func Merge(reps []*Report) (*Report, error) {
	if len(reps) == 0 {
		return nil, errors.New("nothing to merge")
	}
	first := reps[0]
	out := &Report{Workers: first.Workers, BucketElems: first.BucketElems, MaxBufferElems: first.MaxBufferElems, StepsTimed: first.StepsTimed,
		Warmup: first.Warmup, CPUs: first.CPUs, SwitchML: first.SwitchML, Gradients: first.Gradients}
	for k, r := range reps {
		for _, d := range []struct {
			what string
			a, b any
		}{
			{"workers", first.Workers, r.Workers},
			{"timed steps", first.StepsTimed, r.StepsTimed},
			{"warm-up steps", first.Warmup, r.Warmup},
			{"bucket values", first.BucketElems, r.BucketElems},
			{"largest buffer", first.MaxBufferElems, r.MaxBufferElems},
			{"switchml settings", first.SwitchML, r.SwitchML},
			{"recorded gradients", first.Gradients, r.Gradients},
		} {
			if d.a != d.b {
				return nil, fmt.Errorf("report %d has %s %v, report 1 has %v: merge only runs measured the same way", k+1, d.what, d.b, d.a)
			}
		}
		base := len(out.Runs)
		out.Runs = append(out.Runs, r.Runs...)
		for _, p := range r.Points {
			p.Run += base
			replaced := false
			for i := range out.Points {
				q := &out.Points[i]
				if q.RateMbit == p.RateMbit && q.Model == p.Model && q.Backend == p.Backend {
					*q, replaced = p, true
				}
			}
			if !replaced {
				out.Points = append(out.Points, p)
			}
		}
		for _, rate := range r.RatesMbit {
			if !slices.Contains(out.RatesMbit, rate) {
				out.RatesMbit = append(out.RatesMbit, rate)
			}
		}
	}
	last := out.Runs[len(out.Runs)-1]
	out.Date, out.Command, out.Commit = last.Date, last.Command, last.Commit
	return out, nil
}

// merge is `replaybench merge --out DIR FILE...`.
func merge(args []string) error {
	fs := cli.NewFlagSet("replaybench merge", "--out DIR RUN1/replay.json RUN2/replay.json...", "Combines runs into one table that names each run's command and commit; later runs' points replace earlier ones'.")
	out := fs.String("out", "", "directory to write the merged replay.json, replay.md and replay.png into")
	if err := cli.ParseArgs(fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return cli.Usagef("replaybench merge", "name --out and the runs' replay.json files")
	}
	var reps []*Report
	for _, path := range fs.Args() {
		r, err := loadReport(path)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	m, err := Merge(reps)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	models, backends, rates := m.axes()
	return writeReport(*out, m, models, backends, rates)
}
