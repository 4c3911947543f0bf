package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/internal/progress"
)

func init() {
	register("bench", "the benchmark suite: SwitchML (dense and block-sparse) against Gloo, a Go ring and OpenMPI on an emulated rack and on loopback; writes JSON, PNG plots and a Markdown summary", runBench)
}

// benchCommand is what the flags of switchml bench ask for: a run, its
// plan alone (--dry-run), or a report rewritten from an earlier run
// (--report).
type benchCommand struct {
	opts   benchmarks.Options
	dryRun bool
	report string
	runs   string
	quiet  bool
}

func runBench(ctx context.Context, args []string) error {
	c, err := parseBenchFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	switch {
	case c.report != "", c.runs != "":
		write, dir := benchmarks.Report, c.report
		if c.runs != "" {
			write, dir = benchmarks.ReportRuns, c.runs
		}
		summary, err := write(dir)
		if err != nil {
			return err
		}
		fmt.Print(summary)
		return nil
	case c.dryRun:
		printPlan(os.Stdout, &c.opts)
		return nil
	}
	// The suite tears down what it built when ctx ends: main's context
	// ends on SIGINT and SIGTERM, and a closed terminal should not leave
	// a rack behind either.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	// Echoed process logs (-v) would write through the status line.
	line := progress.New(os.Stderr, c.quiet || c.opts.Verbose)
	defer line.Done()
	c.opts.ShowProgress(line, c.quiet)
	return benchmarks.Run(ctx, c.opts)
}

// parseBenchFlags parses the flags of switchml bench; what was wrong with
// them goes to out.
func parseBenchFlags(args []string, out io.Writer) (benchCommand, error) {
	fs := newFlags("bench", benchmarks.FlagsSynopsis)
	fs.SetOutput(out)
	c := benchCommand{opts: benchmarks.DefaultOptions()}
	check := c.opts.RegisterFlags(fs)
	fs.BoolVar(&c.dryRun, "dry-run", false, "print the points and exit")
	fs.StringVar(&c.report, "report", "", "rewrite summary.md and the plots of an earlier run from its directory's results.json, and exit")
	fs.StringVar(&c.runs, "report-runs", "", "write runs.md in a directory whose sub-folders are runs of the same points: per point, the median of the runs' TATs and speedups with their spread; and exit")
	fs.BoolVar(&c.quiet, "quiet", false, "print no progress (neither the line per point nor, on a terminal, the status line of the running point)")
	if err := parseFlags(fs, args); err != nil || c.report != "" || c.runs != "" {
		return c, err
	}
	if err := check(); err != nil {
		fmt.Fprintln(fs.Output(), err)
		return c, errUsage
	}
	return c, nil
}

// printPlan writes the points a run would make, one a line, then the
// chosen systems it would leave out and why (--dry-run).
func printPlan(w io.Writer, o *benchmarks.Options) {
	for i, p := range benchmarks.Plan(o) {
		fmt.Fprintf(w, "%3d  %s\n", i+1, p)
	}
	for _, s := range o.Skipped() {
		fmt.Fprintf(w, "     skipped: %s: %s\n", s.System, s.Why)
	}
}
