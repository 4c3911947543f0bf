package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/progress"
	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/p4/fabric"
)

func init() {
	register("bench", "the benchmark suite: SwitchML against Gloo, a Go ring and OpenMPI on an emulated rack and on loopback; writes JSON, PNG plots and a Markdown summary", runBench)
}

const benchSynopsis = `[flags]

Builds the emulated rack (network namespaces, a bridge, veth ports shaped
with tbf), runs every system on it one point at a time, then the loopback
comparison, and writes results.json, summary.md and PNG plots under --out.
Each point is a warm-up and --iters timed allreduces of one float32 tensor;
the TAT of a repetition is the slowest worker's, and tables quote the median.

Sweeps vary one factor around the base point (--base-workers, --size or
--tune-size, --rate, --packet-elements, --window):
  workers   --workers at --size          (all systems)
  sizes     --sizes at --base-workers    (all systems)
  rates     --rates at --tune-size       (all systems)
  packet    --packet-sweep at --tune-size (switchml)
  window    --window-sweep at --tune-size (switchml)
  loopback  --loopback-workers on 127.0.0.1 at --loopback-size, CPU per system
  jobs      --jobs concurrent jobs at --tune-size, int32, ranks sharing the
            ports (switchml, switchml-tree; not in the default run)
With --rack-leaves N the rack is a two-level tree and switchml-tree runs a
leaf switch per leaf under a spine; the other systems cross the same tree.
Example: switchml bench --sweeps workers --systems switchml,gloo,ring --workers 2,4,8 --size 64MiB --rate 200`

// benchCommand is what the flags of switchml bench ask for: a run, its
// plan alone (--dry-run), or a report rewritten from an earlier run
// (--report).
type benchCommand struct {
	opts   benchmarks.Options
	dryRun bool
	report string
	quiet  bool
}

func runBench(ctx context.Context, args []string) error {
	c, err := parseBenchFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	switch {
	case c.report != "":
		summary, err := benchmarks.Report(c.report)
		if err != nil {
			return err
		}
		fmt.Print(summary)
		return nil
	case c.dryRun:
		for i, p := range benchmarks.Plan(&c.opts) {
			fmt.Printf("%3d  %s\n", i+1, p)
		}
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
	if c.quiet {
		c.opts.Progress = io.Discard
	} else {
		c.opts.Progress = line
	}
	c.opts.Starting = func(i, n int, p benchmarks.Point, elapsed time.Duration) {
		began := time.Now()
		line.Show(func() string {
			// Points differ in size: the time left is a rough guess
			// from the points done so far.
			left := progress.Left(float64(i)/float64(n), elapsed)
			if left == "" {
				left = "time left unknown until a point is done"
			}
			return fmt.Sprintf("[%d/%d] %s: %s; %s", i+1, n, p, progress.Round(time.Since(began)), left)
		})
	}
	return benchmarks.Run(ctx, c.opts)
}

// parseBenchFlags parses the flags of switchml bench; what was wrong with
// them goes to out.
func parseBenchFlags(args []string, out io.Writer) (benchCommand, error) {
	fs := newFlags("bench", benchSynopsis)
	fs.SetOutput(out)
	c := benchCommand{opts: benchmarks.DefaultOptions()}
	o := &c.opts
	fs.StringVar(&o.Name, "name", "", "run name; results go to benchmarks/results/<name> (default: the date and time)")
	fs.StringVar(&o.Out, "out", "", "output directory (default benchmarks/results/<name>)")
	modes := fs.String("modes", strings.Join(o.Modes, ","), "topologies: rack (network namespaces), loopback (127.0.0.1)")
	systems := fs.String("systems", strings.Join(o.Systems, ","), "systems to run: switchml, switchml-auth (switch, controller and workers with --auth), switchml-tree (two levels of switches; needs --rack-leaves), torch-switchml (PyTorch over the switchml backend), gloo, ring, mpi (mpi runs on loopback only)")
	sweeps := fs.String("sweeps", strings.Join(o.Sweeps, ","), "sweeps to run (see above)")
	workers := fs.String("workers", joinList(o.Workers, strconv.Itoa), "worker counts of the workers sweep")
	size := fs.String("size", benchmarks.FormatSize(o.Size), "tensor size of the workers sweep and of the base point")
	sizes := fs.String("sizes", joinList(o.Sizes, benchmarks.FormatSize), "tensor sizes of the sizes sweep (up to 256MiB and beyond)")
	tuneSize := fs.String("tune-size", benchmarks.FormatSize(o.TuneSize), "tensor size of the rates, packet and window sweeps")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "rate of every rack port in Mbit/s, each direction")
	rates := fs.String("rates", joinList(o.Rates, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }), "port rates (Mbit/s) of the rates sweep")
	fs.IntVar(&o.BaseWorkers, "base-workers", o.BaseWorkers, "workers in the sizes, rates, packet and window sweeps")
	fs.IntVar(&o.PacketElements, "packet-elements", o.PacketElements, "SwitchML values per packet (256 = 1024-byte payloads)")
	packetSweep := fs.String("packet-sweep", joinList(o.PacketSweep, strconv.Itoa), "values per packet of the packet sweep")
	fs.IntVar(&o.Window, "window", o.Window, "SwitchML packets in flight per lane")
	windowSweep := fs.String("window-sweep", joinList(o.Windows, strconv.Itoa), "windows of the window sweep")
	jobCounts := fs.String("jobs", joinList(o.JobCounts, strconv.Itoa), "numbers of concurrent jobs of the jobs sweep")
	fs.IntVar(&o.Lanes, "lanes", o.Lanes, "SwitchML lanes per worker")
	fs.BoolVar(&o.Extended, "extended", o.Extended, "run every SwitchML system's workers with the extended header (switchml-auth and packets above 256 values always use it): compares switchml with switchml-auth on the same header")
	fs.IntVar(&o.SwitchShards, "switch-shards", 1, "data-plane shards of the software switch (switch --shards); a job needs as many lanes to use them all")
	fs.IntVar(&o.RackLeaves, "rack-leaves", 0, "build the rack as a two-level tree with this many leaves (2..8), each joined to the spine by a non-blocking trunk; every system crosses it, switchml-tree aggregates at the leaves")
	fs.DurationVar(&o.SMLTimeout, "switchml-timeout", o.SMLTimeout, "SwitchML retransmission timeout (default: the library's)")
	fs.IntVar(&o.LoopbackWorkers, "loopback-workers", o.LoopbackWorkers, "workers of the loopback comparison")
	loopbackSize := fs.String("loopback-size", benchmarks.FormatSize(o.LoopbackSize), "tensor size of the loopback comparison")
	fs.IntVar(&o.Iters, "iters", o.Iters, "timed repetitions per point (at least 5 for quoted results)")
	fs.IntVar(&o.Warmup, "warmup", o.Warmup, "untimed repetitions before the timed ones")
	fs.BoolVar(&o.Verify, "verify", o.Verify, "check every result (SwitchML on loopback is never verified, so its CPU time is the allreduce's alone)")
	fs.IntVar(&o.MTU, "mtu", o.MTU, "MTU of the rack's ports")
	fs.IntVar(&o.Burst, "tbf-burst", o.Burst, "tbf bucket in bytes (default: derived from the rate, see package benchmarks/rack)")
	fs.IntVar(&o.Limit, "tbf-limit", o.Limit, "tbf queue limit in bytes (default: derived from the rate)")
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "name prefix of the rack's namespaces; leftovers of a crashed run with it are removed first")
	fs.StringVar(&o.Subnet, "subnet", o.Subnet, "IPv4 subnet of the rack")
	fs.StringVar(&o.Python, "python", o.Python, "Python with PyTorch, for Gloo and torch-switchml")
	fs.DurationVar(&o.Timeout, "point-timeout", o.Timeout, "give up on a point after this long (default: from the size and rate)")
	fs.BoolVar(&c.dryRun, "dry-run", false, "print the points and exit")
	fs.StringVar(&c.report, "report", "", "rewrite summary.md and the plots of an earlier run from its directory's results.json, and exit")
	fs.BoolVar(&o.Verbose, "v", false, "show every process's log")
	fs.BoolVar(&c.quiet, "quiet", false, "print no progress (neither the line per point nor, on a terminal, the status line of the running point)")
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	if c.report != "" {
		return c, nil
	}
	bad := func(name string, e error) (benchCommand, error) {
		fmt.Fprintf(fs.Output(), "bad --%s: %v\n", name, e)
		return c, errUsage
	}
	var err error
	if o.Modes, err = parseChoices(*modes, benchmarks.Modes); err != nil {
		return bad("modes", err)
	}
	if o.Systems, err = parseChoices(*systems, benchmarks.Systems); err != nil {
		return bad("systems", err)
	}
	if o.Sweeps, err = parseChoices(*sweeps, benchmarks.Sweeps); err != nil {
		return bad("sweeps", err)
	}
	if o.Workers, err = parseInts(*workers, 1); err != nil {
		return bad("workers", err)
	}
	if o.PacketSweep, err = parseInts(*packetSweep, 1); err != nil {
		return bad("packet-sweep", err)
	}
	if o.Windows, err = parseInts(*windowSweep, 1); err != nil {
		return bad("window-sweep", err)
	}
	if o.JobCounts, err = parseInts(*jobCounts, 1); err != nil {
		return bad("jobs", err)
	}
	if o.Size, err = benchmarks.ParseSize(*size); err != nil {
		return bad("size", err)
	}
	if o.TuneSize, err = benchmarks.ParseSize(*tuneSize); err != nil {
		return bad("tune-size", err)
	}
	if o.LoopbackSize, err = benchmarks.ParseSize(*loopbackSize); err != nil {
		return bad("loopback-size", err)
	}
	if o.Sizes, err = parseList(*sizes, benchmarks.ParseSize); err != nil {
		return bad("sizes", err)
	}
	if o.Rates, err = parseList(*rates, parseRate); err != nil {
		return bad("rates", err)
	}
	if o.Rate <= 0 || o.Iters < 1 || o.Warmup < 0 || o.BaseWorkers < 1 || o.LoopbackWorkers < 1 || o.Lanes < 1 || o.Window < 1 {
		return bad("flags", errors.New("want --rate > 0, --iters >= 1, --warmup >= 0 and positive worker, lane and window counts"))
	}
	if o.SwitchShards < 1 || o.SwitchShards > fabric.MaxShards {
		return bad("switch-shards", fmt.Errorf("%d: want 1..%d", o.SwitchShards, fabric.MaxShards))
	}
	if o.RackLeaves != 0 && (o.RackLeaves < 2 || o.RackLeaves > rack.MaxLeaves) {
		return bad("rack-leaves", fmt.Errorf("%d: want 2..%d (0: a flat rack)", o.RackLeaves, rack.MaxLeaves))
	}
	if slices.Contains(o.Systems, "switchml-tree") && o.RackLeaves < 2 {
		return bad("systems", errors.New("switchml-tree runs on a tree: give --rack-leaves 2 or more"))
	}
	if len(benchmarks.Plan(o)) == 0 {
		return bad("sweeps", errors.New("the chosen modes, sweeps and systems give no point to run"))
	}
	return c, nil
}

func joinList[T any](vs []T, format func(T) string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = format(v)
	}
	return strings.Join(s, ",")
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseChoices(s string, allowed []string) ([]string, error) {
	var out []string
	for _, f := range splitList(s) {
		if !slices.Contains(allowed, f) {
			return nil, fmt.Errorf("%q: want a comma-separated list of %s", f, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// parseList reads a comma-separated list, each item with parse.
func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range splitList(s) {
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseRate(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive rate in Mbit/s", s)
	}
	return v, nil
}

func parseInts(s string, least int) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v < least {
			return nil, fmt.Errorf("%q: want integers of at least %d, comma-separated", f, least)
		}
		out = append(out, v)
	}
	return out, nil
}
