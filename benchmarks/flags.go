package benchmarks

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/p4/softswitch"
)

// FlagsSynopsis is the usage text of the flags RegisterFlags adds, as
// `switchml bench --help` shows it.
const FlagsSynopsis = `[flags]

Builds the emulated rack (network namespaces, a bridge, veth ports shaped
with tbf), runs every system on it one point at a time, then the loopback
comparison, and writes results.json, summary.md and PNG plots under --out.
Each point is a warm-up and --iters timed allreduces of one tensor of
--dtype (float32 unless told; sizes stay in bytes); the TAT of a repetition
is the slowest worker's, and tables quote the median. --wire-bits sets the
width the SwitchML systems carry float values at; the systems that cannot
reduce --dtype (the Go ring and OpenMPI: float32 only) are skipped and named.

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
  density   --density shares of non-empty blocks in the generated tensors
            at --size and --base-workers (the SwitchML systems; the others
            run once: their cost does not depend on the values; not in
            the default run)
  gradients --gradients directories of recorded gradients (rank<r>.f32 for
            each of --base-workers ranks), every system at --rate (Gloo and
            torch-switchml read the files too, ring and mpi reduce a tensor
            of the same size; not in the default run)
  collectives --collective-ops through torch.distributed at --size,
            --base-workers and every --rates rate (gloo, torch-switchml):
            all_reduce of the tensor, reduce_scatter_tensor of it into a
            shard per rank, all_gather_into_tensor of the shards into it,
            with the bytes each rank's port sent and received (rack; not
            in the default run)
With --rack-leaves N the rack is a two-level tree and switchml-tree runs a
leaf switch per leaf under a spine; the other systems cross the same tree.
Example: switchml bench --sweeps workers --systems switchml,gloo,ring --workers 2,4,8 --size 64MiB --rate 200
Block-sparse: switchml bench --modes rack --sweeps density --systems switchml,switchml-sparse,gloo --base-workers 8 --density 0.001,0.01,0.1,0.5,1
Collectives: switchml bench --modes rack --sweeps collectives --systems gloo,torch-switchml --base-workers 8 --size 64MiB --rates 200,1000
16-bit wire: switchml bench --modes rack --sweeps workers --systems switchml,torch-switchml,gloo --workers 8 --dtype bfloat16`

// FlagError is a flag whose value RegisterFlags' check refused.
type FlagError struct {
	Flag string // without dashes
	Err  error
}

func (e *FlagError) Error() string { return fmt.Sprintf("bad --%s: %v", e.Flag, e.Err) }
func (e *FlagError) Unwrap() error { return e.Err }

// RegisterFlags adds a flag to fs for every option of a run, with o's
// values as defaults. Once fs has parsed its arguments, check sets the
// list and size options from their flags and refuses what no run can use,
// with a *FlagError naming the flag.
func (o *Options) RegisterFlags(fs *flag.FlagSet) (check func() error) {
	lists := o.registerListFlags(fs)
	fs.StringVar(&o.Name, "name", "", "run name; results go to benchmarks/results/<name> (default: the date and time)")
	fs.StringVar(&o.Out, "out", "", "output directory (default benchmarks/results/<name>)")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "rate of every rack port in Mbit/s, each direction")
	fs.IntVar(&o.BaseWorkers, "base-workers", o.BaseWorkers, "workers in the sizes, rates, packet and window sweeps")
	fs.IntVar(&o.PacketElements, "packet-elements", o.PacketElements, "SwitchML values per packet (256 = 1024-byte payloads)")
	fs.IntVar(&o.Window, "window", o.Window, "SwitchML packets in flight per lane")
	fs.IntVar(&o.Lanes, "lanes", o.Lanes, "SwitchML lanes per worker")
	fs.BoolVar(&o.Extended, "extended", o.Extended, "run every SwitchML system's workers with the extended header (switchml-auth and packets above 256 values always use it): compares switchml with switchml-auth on the same header")
	fs.IntVar(&o.SwitchShards, "switch-shards", 1, "data-plane shards of the software switch (switch --shards); a job needs as many lanes to use them all")
	fs.IntVar(&o.RackLeaves, "rack-leaves", 0, "build the rack as a two-level tree with this many leaves (2..8), each joined to the spine by a non-blocking trunk; every system crosses it, switchml-tree aggregates at the leaves")
	fs.StringVar(&o.DType, "dtype", o.DType, "element type of every tensor: "+strings.Join(DTypes, ", ")+"; sizes stay in bytes (64MiB of bfloat16 is 32Mi values). The Go ring and OpenMPI reduce float32 only: at another type they are skipped and named; the jobs sweep sums int32")
	fs.IntVar(&o.WireBits, "wire-bits", o.WireBits, "width the SwitchML systems carry float values at (allreduce --wire-bits; SWITCHML_WIRE_BITS for torch-switchml): 0 (the type's default: 16 bits for float16 and bfloat16, 32 for float32), 16 or 32")
	fs.DurationVar(&o.SMLTimeout, "switchml-timeout", o.SMLTimeout, "SwitchML retransmission timeout (default: the library's)")
	fs.IntVar(&o.LoopbackWorkers, "loopback-workers", o.LoopbackWorkers, "workers of the loopback comparison")
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
	fs.BoolVar(&o.Verbose, "v", false, "show every process's log")
	return func() error {
		if err := lists(); err != nil {
			return err
		}
		return o.checkFlags()
	}
}

// registerListFlags adds the flags whose values are lists or sizes; the
// function returned parses them into o.
func (o *Options) registerListFlags(fs *flag.FlagSet) func() error {
	modes := fs.String("modes", strings.Join(o.Modes, ","), "topologies: rack (network namespaces), loopback (127.0.0.1)")
	systems := fs.String("systems", strings.Join(o.Systems, ","), "systems to run: switchml, switchml-auth (switch, controller and workers with --auth), switchml-tree (two levels of switches; needs --rack-leaves), torch-switchml (PyTorch over the switchml backend), gloo, ring, mpi (mpi runs on loopback only)")
	sweeps := fs.String("sweeps", strings.Join(o.Sweeps, ","), "sweeps to run (see above)")
	workers := fs.String("workers", joinList(o.Workers, strconv.Itoa), "worker counts of the workers sweep")
	size := fs.String("size", FormatSize(o.Size), "tensor size of the workers sweep and of the base point")
	sizes := fs.String("sizes", joinList(o.Sizes, FormatSize), "tensor sizes of the sizes sweep (up to 256MiB and beyond)")
	tuneSize := fs.String("tune-size", FormatSize(o.TuneSize), "tensor size of the rates, packet and window sweeps")
	rates := fs.String("rates", joinList(o.Rates, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }), "port rates (Mbit/s) of the rates sweep")
	packetSweep := fs.String("packet-sweep", joinList(o.PacketSweep, strconv.Itoa), "values per packet of the packet sweep")
	windowSweep := fs.String("window-sweep", joinList(o.Windows, strconv.Itoa), "windows of the window sweep")
	jobCounts := fs.String("jobs", joinList(o.JobCounts, strconv.Itoa), "numbers of concurrent jobs of the jobs sweep")
	loopbackSize := fs.String("loopback-size", FormatSize(o.LoopbackSize), "tensor size of the loopback comparison")
	densities := fs.String("density", joinList(o.Densities, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }),
		"shares of each rank's blocks that hold values in the generated tensors, of the density sweep (each in (0, 1])")
	fs.Float64Var(&o.SparseCrossover, "sparse-crossover", o.SparseCrossover, "switchml-sparse workers' --sparse-crossover: the share of a tensor's blocks held from which its size goes dense (0: the library's default; above 1: never)")
	collectiveOps := fs.String("collective-ops", strings.Join(o.CollectiveOps, ","), "calls of the collectives sweep: "+strings.Join(Collectives, ", "))
	gradients := fs.String("gradients", strings.Join(o.Gradients, ","), "directories of recorded gradients of the gradients sweep, comma-separated: rank r reads DIR/rank<r>.f32 (raw little-endian float32)")
	return func() error {
		var errs []error
		set := func(flag string, err error) {
			if err != nil {
				errs = append(errs, &FlagError{Flag: flag, Err: err})
			}
		}
		set("modes", setList(&o.Modes, *modes, choice(Modes)))
		set("systems", setList(&o.Systems, *systems, choice(Systems)))
		set("sweeps", setList(&o.Sweeps, *sweeps, choice(Sweeps)))
		o.Modes, o.Systems, o.Sweeps = dedup(o.Modes), dedup(o.Systems), dedup(o.Sweeps)
		set("workers", setList(&o.Workers, *workers, atLeastOne))
		set("packet-sweep", setList(&o.PacketSweep, *packetSweep, atLeastOne))
		set("window-sweep", setList(&o.Windows, *windowSweep, atLeastOne))
		set("jobs", setList(&o.JobCounts, *jobCounts, atLeastOne))
		set("size", setValue(&o.Size, *size, ParseSize))
		set("tune-size", setValue(&o.TuneSize, *tuneSize, ParseSize))
		set("loopback-size", setValue(&o.LoopbackSize, *loopbackSize, ParseSize))
		set("sizes", setList(&o.Sizes, *sizes, ParseSize))
		set("rates", setList(&o.Rates, *rates, parseRate))
		set("density", setList(&o.Densities, *densities, parseDensity))
		set("gradients", setList(&o.Gradients, *gradients, func(s string) (string, error) { return s, nil }))
		set("collective-ops", setList(&o.CollectiveOps, *collectiveOps, choice(Collectives)))
		if len(errs) > 0 {
			return errs[0] // the first, as a person fixes them one by one
		}
		return nil
	}
}

// checkFlags refuses option values no run can use, naming their flags.
func (o *Options) checkFlags() error {
	if o.Rate <= 0 || o.Iters < 1 || o.Warmup < 0 || o.BaseWorkers < 1 || o.LoopbackWorkers < 1 || o.Lanes < 1 || o.Window < 1 {
		return &FlagError{"flags", errors.New("want --rate > 0, --iters >= 1, --warmup >= 0 and positive worker, lane and window counts")}
	}
	if o.SwitchShards < 1 || o.SwitchShards > softswitch.MaxShards {
		return &FlagError{"switch-shards", fmt.Errorf("%d: want 1..%d", o.SwitchShards, softswitch.MaxShards)}
	}
	if o.RackLeaves != 0 && (o.RackLeaves < 2 || o.RackLeaves > rack.MaxLeaves) {
		return &FlagError{"rack-leaves", fmt.Errorf("%d: want 2..%d (0: a flat rack)", o.RackLeaves, rack.MaxLeaves)}
	}
	if slices.Contains(o.Systems, "switchml-tree") && o.RackLeaves < 2 {
		return &FlagError{"systems", errors.New("switchml-tree runs on a tree: give --rack-leaves 2 or more")}
	}
	if err := o.checkSparseFlags(); err != nil {
		return err
	}
	if err := o.checkDType(); err != nil {
		return err
	}
	if err := o.checkCollectives(); err != nil {
		return err
	}
	if len(Plan(o)) == 0 {
		if skips := o.Skipped(); len(skips) > 0 {
			var why []string
			for _, s := range skips {
				why = append(why, s.System+": "+s.Why)
			}
			return &FlagError{"systems", fmt.Errorf("no chosen system runs a point at --dtype %s --wire-bits %d (%s)", o.dtypeName(), o.WireBits, strings.Join(why, "; "))}
		}
		return &FlagError{"sweeps", errors.New("the chosen modes, sweeps and systems give no point to run")}
	}
	return nil
}

func joinList[T any](vs []T, format func(T) string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = format(v)
	}
	return strings.Join(s, ",")
}

// setList sets *dst to the comma-separated items of s, each read with
// parse; empty items are skipped.
func setList[T any](dst *[]T, s string, parse func(string) (T, error)) error {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	*dst = out
	return nil
}

func setValue[T any](dst *T, s string, parse func(string) (T, error)) error {
	v, err := parse(s)
	if err == nil {
		*dst = v
	}
	return err
}

// choice reads one of allowed.
func choice(allowed []string) func(string) (string, error) {
	return func(f string) (string, error) {
		if !slices.Contains(allowed, f) {
			return "", fmt.Errorf("%q: want a comma-separated list of %s", f, strings.Join(allowed, ", "))
		}
		return f, nil
	}
}

// dedup keeps the first of each item, in order.
func dedup(items []string) []string {
	var out []string
	for _, s := range items {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func atLeastOne(f string) (int, error) {
	v, err := strconv.Atoi(f)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%q: want integers of at least 1, comma-separated", f)
	}
	return v, nil
}

func parseDensity(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0 && v <= 1) {
		return 0, fmt.Errorf("%q is not a density: want a share of blocks above 0 and at most 1, like 0.01", s)
	}
	return v, nil
}

func parseRate(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive rate in Mbit/s", s)
	}
	return v, nil
}
