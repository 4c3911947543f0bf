package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/profile"
)

// profiles is `replaybench profiles`: the table of the captured profiles
// (batch, repetitions, threads, forward, backward and update per step),
// as the README shows it.
func profiles(args []string) error {
	fs := cli.NewFlagSet("replaybench profiles", "[--profiles DIR]", "Lists the captured profiles as a table.")
	dir := fs.String("profiles", "profiles", "directory of the profiles")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	return writeProfiles(os.Stdout, *dir)
}

func writeProfiles(w io.Writer, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no profiles (*.json) in %s", dir)
	}
	var ps []*profile.Profile
	for _, f := range files {
		p, err := profile.Load(f)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if (ps[i].DerivedFrom == "") != (ps[j].DerivedFrom == "") {
			return ps[i].DerivedFrom == ""
		}
		return ps[i].Model < ps[j].Model
	})
	fmt.Fprintln(w, "| model | parameters | batch | reps | threads / CPUs | units | forward (s) | backward (s) | update (s) | measured |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, p := range ps {
		when := strings.TrimSuffix(p.Date, "Z")
		if p.DerivedFrom != "" {
			when = "derived from " + p.DerivedFrom
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d / %d | %d | %.3f | %.3f | %.3f | %s |\n", p.Model, commas(p.Parameters),
			p.Batch, p.Reps, p.Threads, p.CPUs, len(p.Units), p.ForwardS, p.BackwardS, p.UpdateS, when)
	}
	return nil
}
