package benchmarks

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// RunsFile is the name of the summary ReportRuns writes over several runs
// of the same points.
const RunsFile = "runs.md"

// ReportRuns summarises the runs in dir's sub-folders (each a run of the
// suite with its results.json, the same points run again): per point, the
// median over the runs of each system's median TAT with its spread, and the
// median over the runs of each system's speedup against every other system
// that ran beside it in the same run. The typical run, not the best one, is
// what a headline quotes. It writes dir/runs.md and returns it.
func ReportRuns(dir string) (string, error) {
	s, err := runsSummary(dir)
	if err != nil {
		return "", err
	}
	return s, os.WriteFile(filepath.Join(dir, RunsFile), []byte(s), 0o644)
}

// runsSummary is what ReportRuns writes.
func runsSummary(dir string) (string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*", "results.json"))
	if err != nil {
		return "", err
	}
	if len(paths) < 2 {
		return "", fmt.Errorf("%s holds %d runs (sub-folders with results.json): a summary over runs wants 2 or more", dir, len(paths))
	}
	slices.Sort(paths)
	type key struct {
		mode     string
		workers  int
		bytes    int64
		rate     float64
		dtype    string
		wireBits int // the run's --wire-bits: a SwitchML system beside Gloo at the same point
	}
	// tats[point][system][run] is the system's median TAT in that run (0: not run or failed).
	tats := map[key]map[string][]float64{}
	// wires[point][system] are the wire widths the system's workers
	// reported over the runs, each once.
	wires := map[key]map[string][]int{}
	var points []key
	var runs []string
	for i, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		var f resultsFile
		if err := json.Unmarshal(data, &f); err != nil {
			return "", fmt.Errorf("%s is not a results file of the suite: %w", path, err)
		}
		runs = append(runs, filepath.Base(filepath.Dir(path)))
		for _, r := range f.Results {
			if r.Error != "" || r.Op != "" || r.MedianTAT <= 0 || r.Jobs > 0 || len(r.JobResults) > 0 {
				continue // failed points, other collectives and job sweeps have summaries of their own
			}
			k := key{r.Mode, r.Workers, r.Bytes, r.RateMbit, r.dtypeName(), f.Options.WireBits}
			if tats[k] == nil {
				tats[k] = map[string][]float64{}
				wires[k] = map[string][]int{}
				points = append(points, k)
			}
			for _, b := range r.WireBitsUsed {
				if !slices.Contains(wires[k][r.System], b) {
					wires[k][r.System] = append(wires[k][r.System], b)
				}
			}
			if tats[k][r.System] == nil {
				tats[k][r.System] = make([]float64, len(paths))
			}
			tats[k][r.System][i] = r.MedianTAT
		}
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# %s: %d runs of the same points\n\n", filepath.Base(filepath.Clean(dir)), len(paths))
	p("Runs: %s. Each run's figure is its own median TAT (of its timed allreduces); here, the median over the runs and, in brackets, the smallest and largest. A speedup is taken within each run (baseline TAT / system TAT, both from that run), then its median over the runs. Written by `switchml bench --report-runs` with this folder.\n\n",
		strings.Join(runs, ", "))
	p("| point | system | runs | TAT (s), median (min-max) | baseline | its TAT (s) | speedup, median (min-max) |\n|---|---|---|---|---|---|---|\n")
	for _, k := range points {
		where := k.mode
		if k.rate > 0 {
			where = fmt.Sprintf("%s %gMbit/s", k.mode, k.rate)
		}
		what := FormatSize(k.bytes)
		if k.dtype != "float32" {
			what += " " + k.dtype
		}
		if k.wireBits != 0 {
			what += fmt.Sprintf(" wire=%d", k.wireBits)
		}
		systems := make([]string, 0, len(tats[k]))
		for s := range tats[k] {
			systems = append(systems, s)
		}
		slices.Sort(systems)
		for _, s := range systems {
			v := present(tats[k][s])
			for _, base := range systems {
				if base == s || !slices.Contains(baselines, base) {
					continue
				}
				var speedups []float64
				for i, t := range tats[k][s] {
					if bt := tats[k][base][i]; t > 0 && bt > 0 {
						speedups = append(speedups, bt/t)
					}
				}
				if len(speedups) == 0 {
					continue
				}
				p("| %s n=%d %s | %s | %d | %s | %s | %s | %s |\n", where, k.workers, what, withWire(s, wires[k][s]), len(v),
					MedianSpread(v, "%.3f"), base, MedianSpread(present(tats[k][base]), "%.3f"), MedianSpread(speedups, "%.2fx"))
			}
		}
	}
	return b.String(), nil
}

// withWire is a system's name with the wire widths its workers reported
// ("switchml, 16-bit wire"), where they reported any.
func withWire(system string, bits []int) string {
	if len(bits) == 0 {
		return system
	}
	slices.Sort(bits)
	return fmt.Sprintf("%s, %s-bit wire", system, strings.ReplaceAll(joinList(bits, strconv.Itoa), ",", "/"))
}

// baselines are the systems the others are measured against.
var baselines = []string{"gloo", "ring", "mpi"}

// present is v without its zeros (the runs a system did not finish).
func present(v []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return x <= 0 })
}

// MedianSpread formats the median of v and, in brackets, its smallest and largest.
func MedianSpread(v []float64, format string) string {
	s := slices.Sorted(slices.Values(v))
	return fmt.Sprintf(format+" ("+format+"-"+format+")", Median(s), s[0], s[len(s)-1])
}
