package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func init() {
	register("bench", "the benchmark suite: SwitchML against Gloo, a Go ring and OpenMPI on an emulated rack and on loopback; writes JSON, PNG plots and a Markdown summary", runBench)
}

// benchSystems are the systems the suite knows, in the order tables show them.
var benchSystems = []string{"switchml", "gloo", "ring", "mpi"}

// benchOptions are the parsed flags of switchml bench.
type benchOptions struct {
	Name     string    `json:"name"`
	Out      string    `json:"out"`
	Modes    []string  `json:"modes"`
	Systems  []string  `json:"systems"`
	Sweeps   []string  `json:"sweeps"`
	Workers  []int     `json:"workers"`
	Size     int64     `json:"size_bytes"`
	Sizes    []int64   `json:"sizes_bytes"`
	TuneSize int64     `json:"tune_size_bytes"`
	Rate     float64   `json:"rate_mbit"`
	Rates    []float64 `json:"rates_mbit"`

	BaseWorkers    int   `json:"base_workers"`
	PacketElements int   `json:"packet_elements"`
	PacketSweep    []int `json:"packet_elements_sweep"`
	Window         int   `json:"window"`
	Windows        []int `json:"window_sweep"`
	Lanes          int   `json:"lanes"`
	// SMLTimeout is SwitchML's retransmission timeout; zero keeps the
	// library's default.
	SMLTimeout time.Duration `json:"switchml_timeout_ns"`

	LoopbackWorkers int   `json:"loopback_workers"`
	LoopbackSize    int64 `json:"loopback_size_bytes"`

	Iters   int           `json:"iters"`
	Warmup  int           `json:"warmup"`
	Verify  bool          `json:"verify"`
	MTU     int           `json:"mtu"`
	Burst   int           `json:"tbf_burst_bytes"`
	Limit   int           `json:"tbf_limit_bytes"`
	Prefix  string        `json:"prefix"`
	Subnet  string        `json:"subnet"`
	Python  string        `json:"python"`
	Timeout time.Duration `json:"point_timeout_ns"`
	DryRun  bool          `json:"-"`
	Verbose bool          `json:"-"`
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
Example: switchml bench --sweeps workers --systems switchml,gloo,ring --workers 2,4,8 --size 64MiB --rate 200`

func runBench(ctx context.Context, args []string) error {
	fs := newFlags("bench", benchSynopsis)
	o := benchOptions{}
	fs.StringVar(&o.Name, "name", "", "run name; results go to benchmarks/results/<name> (default: the date and time)")
	fs.StringVar(&o.Out, "out", "", "output directory (default benchmarks/results/<name>)")
	modes := fs.String("modes", "rack,loopback", "topologies: rack (network namespaces), loopback (127.0.0.1)")
	systems := fs.String("systems", strings.Join(benchSystems, ","), "systems to run: switchml, gloo, ring, mpi (mpi runs on loopback only)")
	sweeps := fs.String("sweeps", "workers,sizes,rates,packet,window,loopback", "sweeps to run (see above)")
	workers := fs.String("workers", "2,4,8", "worker counts of the workers sweep")
	size := fs.String("size", "64MiB", "tensor size of the workers sweep and of the base point")
	sizes := fs.String("sizes", "1MiB,4MiB,16MiB,64MiB", "tensor sizes of the sizes sweep (up to 256MiB and beyond)")
	tuneSize := fs.String("tune-size", "16MiB", "tensor size of the rates, packet and window sweeps")
	fs.Float64Var(&o.Rate, "rate", 200, "rate of every rack port in Mbit/s, each direction")
	rates := fs.String("rates", "100,200,400", "port rates (Mbit/s) of the rates sweep")
	fs.IntVar(&o.BaseWorkers, "base-workers", 4, "workers in the sizes, rates, packet and window sweeps")
	fs.IntVar(&o.PacketElements, "packet-elements", 256, "SwitchML values per packet (256 = 1024-byte payloads)")
	packetSweep := fs.String("packet-sweep", "64,128,256", "values per packet of the packet sweep")
	fs.IntVar(&o.Window, "window", 64, "SwitchML packets in flight per lane")
	windowSweep := fs.String("window-sweep", "16,32,64", "windows of the window sweep")
	fs.IntVar(&o.Lanes, "lanes", 4, "SwitchML lanes per worker")
	fs.DurationVar(&o.SMLTimeout, "switchml-timeout", 0, "SwitchML retransmission timeout (default: the library's)")
	fs.IntVar(&o.LoopbackWorkers, "loopback-workers", 4, "workers of the loopback comparison")
	loopbackSize := fs.String("loopback-size", "64MiB", "tensor size of the loopback comparison")
	fs.IntVar(&o.Iters, "iters", 5, "timed repetitions per point (at least 5 for quoted results)")
	fs.IntVar(&o.Warmup, "warmup", 1, "untimed repetitions before the timed ones")
	fs.BoolVar(&o.Verify, "verify", true, "check every result (SwitchML on loopback is never verified, so its CPU time is the allreduce's alone)")
	fs.IntVar(&o.MTU, "mtu", 1500, "MTU of the rack's ports")
	fs.IntVar(&o.Burst, "tbf-burst", 0, "tbf bucket in bytes (default: derived from the rate, see package benchmarks/rack)")
	fs.IntVar(&o.Limit, "tbf-limit", 0, "tbf queue limit in bytes (default: derived from the rate)")
	fs.StringVar(&o.Prefix, "prefix", "smlb", "name prefix of the rack's namespaces; leftovers of a crashed run with it are removed first")
	fs.StringVar(&o.Subnet, "subnet", "10.213.0.0/24", "IPv4 subnet of the rack")
	fs.StringVar(&o.Python, "python", "/usr/bin/python3", "Python with PyTorch, for Gloo")
	fs.DurationVar(&o.Timeout, "point-timeout", 0, "give up on a point after this long (default: from the size and rate)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the points and exit")
	report := fs.String("report", "", "rewrite summary.md and the plots of an earlier run from its directory's results.json, and exit")
	fs.BoolVar(&o.Verbose, "v", false, "show every process's log")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *report != "" {
		return rewriteBenchReport(*report)
	}
	var err error
	bad := func(name string, e error) error {
		fmt.Fprintf(fs.Output(), "bad --%s: %v\n", name, e)
		return errUsage
	}
	if o.Modes, err = parseChoices(*modes, []string{"rack", "loopback"}); err != nil {
		return bad("modes", err)
	}
	if o.Systems, err = parseChoices(*systems, benchSystems); err != nil {
		return bad("systems", err)
	}
	if o.Sweeps, err = parseChoices(*sweeps, []string{"workers", "sizes", "rates", "packet", "window", "loopback"}); err != nil {
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
	if o.Size, err = parseBytes(*size); err != nil {
		return bad("size", err)
	}
	if o.TuneSize, err = parseBytes(*tuneSize); err != nil {
		return bad("tune-size", err)
	}
	if o.LoopbackSize, err = parseBytes(*loopbackSize); err != nil {
		return bad("loopback-size", err)
	}
	for _, s := range splitList(*sizes) {
		b, err := parseBytes(s)
		if err != nil {
			return bad("sizes", err)
		}
		o.Sizes = append(o.Sizes, b)
	}
	for _, s := range splitList(*rates) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			return bad("rates", fmt.Errorf("%q is not a positive rate in Mbit/s", s))
		}
		o.Rates = append(o.Rates, v)
	}
	if o.Rate <= 0 || o.Iters < 1 || o.Warmup < 0 || o.BaseWorkers < 1 || o.LoopbackWorkers < 1 || o.Lanes < 1 || o.Window < 1 {
		return bad("flags", errors.New("want --rate > 0, --iters >= 1, --warmup >= 0 and positive worker, lane and window counts"))
	}
	if o.Name == "" {
		o.Name = time.Now().Format("2006-01-02-150405")
	}
	if o.Out == "" {
		o.Out = filepath.Join("benchmarks", "results", o.Name)
	}

	points := planBench(&o)
	if len(points) == 0 {
		return bad("sweeps", errors.New("the chosen modes, sweeps and systems give no point to run"))
	}
	if o.DryRun {
		for i, p := range points {
			fmt.Printf("%3d  %s\n", i+1, p)
		}
		return nil
	}
	return runBenchPoints(ctx, &o, points)
}

// benchPoint is one configuration of one system.
type benchPoint struct {
	Mode           string  `json:"mode"`
	System         string  `json:"system"`
	Workers        int     `json:"workers"`
	Bytes          int64   `json:"bytes"`
	RateMbit       float64 `json:"rate_mbit,omitempty"`
	PacketElements int     `json:"packet_elements,omitempty"`
	Window         int     `json:"window,omitempty"`
	Lanes          int     `json:"lanes,omitempty"`
	// Sweeps names the sweeps this point belongs to.
	Sweeps []string `json:"sweeps"`
}

func (p benchPoint) key() string {
	return fmt.Sprintf("%s/%s/%d/%d/%g/%d/%d/%d", p.Mode, p.System, p.Workers, p.Bytes, p.RateMbit, p.PacketElements, p.Window, p.Lanes)
}

func (p benchPoint) String() string {
	s := fmt.Sprintf("%-8s %-8s n=%d %s", p.Mode, p.System, p.Workers, fmtBytes(p.Bytes))
	if p.RateMbit > 0 {
		s += fmt.Sprintf(" %gMbit/s", p.RateMbit)
	}
	if p.System == "switchml" {
		s += fmt.Sprintf(" k=%d W=%d L=%d", p.PacketElements, p.Window, p.Lanes)
	}
	return s
}

// planBench lists the points of the chosen sweeps, each once, rack points
// first and grouped by rate.
func planBench(o *benchOptions) []benchPoint {
	var points []benchPoint
	index := map[string]int{}
	add := func(sweep string, p benchPoint) {
		if !slices.Contains(o.Systems, p.System) || !slices.Contains(o.Modes, p.Mode) {
			return
		}
		if p.System == "mpi" && p.Mode == "rack" {
			return // mpirun would need a launcher across namespaces
		}
		if p.System == "switchml" {
			p.PacketElements = cmp0(p.PacketElements, o.PacketElements)
			p.Window = cmp0(p.Window, o.Window)
			p.Lanes = o.Lanes
		} else {
			p.PacketElements, p.Window, p.Lanes = 0, 0, 0
		}
		if p.Mode == "loopback" {
			p.RateMbit = 0
		}
		if i, ok := index[p.key()]; ok {
			if !slices.Contains(points[i].Sweeps, sweep) {
				points[i].Sweeps = append(points[i].Sweeps, sweep)
			}
			return
		}
		p.Sweeps = []string{sweep}
		index[p.key()] = len(points)
		points = append(points, p)
	}
	has := func(s string) bool { return slices.Contains(o.Sweeps, s) }
	for _, sys := range benchSystems {
		rack := benchPoint{Mode: "rack", System: sys, Workers: o.BaseWorkers, Bytes: o.Size, RateMbit: o.Rate}
		if has("workers") {
			for _, n := range o.Workers {
				p := rack
				p.Workers = n
				add("workers", p)
			}
		}
		if has("sizes") {
			for _, b := range o.Sizes {
				p := rack
				p.Bytes = b
				add("sizes", p)
			}
		}
		tune := rack
		tune.Bytes = o.TuneSize
		if has("rates") {
			for _, r := range o.Rates {
				p := tune
				p.RateMbit = r
				add("rates", p)
			}
		}
		if sys == "switchml" && has("packet") {
			for _, k := range o.PacketSweep {
				p := tune
				p.PacketElements = k
				add("packet", p)
			}
		}
		if sys == "switchml" && has("window") {
			for _, w := range o.Windows {
				p := tune
				p.Window = w
				add("window", p)
			}
		}
		if has("loopback") {
			add("loopback", benchPoint{Mode: "loopback", System: sys, Workers: o.LoopbackWorkers, Bytes: o.LoopbackSize})
		}
	}
	// Rack points by rate (fewer reshapes), then by system so that a
	// system's points run back to back, then in plan order.
	slices.SortStableFunc(points, func(a, b benchPoint) int {
		if a.Mode != b.Mode {
			return strings.Compare(b.Mode, a.Mode) // rack before loopback
		}
		if a.RateMbit != b.RateMbit {
			switch {
			case a.RateMbit == o.Rate:
				return -1
			case b.RateMbit == o.Rate:
				return 1
			case a.RateMbit < b.RateMbit:
				return -1
			default:
				return 1
			}
		}
		return 0
	})
	return points
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
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

// parseBytes reads sizes like 64MiB, 512KiB, 1GiB, 1000000 (bytes); the
// result is a whole number of float32 elements.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q: want a size like 64MiB, 512KiB or a number of bytes", s)
	}
	b := int64(v*float64(mult)) / 4 * 4
	if b < 4 {
		return 0, fmt.Errorf("%q is less than one float32", s)
	}
	return b, nil
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}
