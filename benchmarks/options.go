package benchmarks

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/internal/progress"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/transport/afxdp"
	"github.com/switchml/switchml-go/transport/shm"
)

// Systems are the systems the suite knows, in the order tables show them:
// torch-switchml is PyTorch over the switchml backend (python/), beside
// PyTorch over Gloo.
// switchml-tree is SwitchML through two levels of switches (leaves and a
// spine), on a rack built with RackLeaves.
// switchml-afxdp is SwitchML with the workers and the switch on AF_XDP
// sockets (rack only: loopback has no XDP path).
// switchml-shm is SwitchML with the workers and the switch exchanging
// packets through shared-memory inboxes (loopback only: on the rack it
// would bypass the emulated links).
// switchml-auth is SwitchML with an authenticated data plane: the switch,
// the controller and every worker run with --auth (a tag on every packet,
// checked by the switch), the workers with the extended header it needs.
// switchml-sparse is SwitchML in the block-sparse mode (allreduce
// --sparse): a worker sends only its blocks that hold values.
var Systems = []string{"switchml", "switchml-sparse", "switchml-auth", "switchml-afxdp", "switchml-shm", "switchml-tree", "torch-switchml", "gloo", "ring", "mpi"}

// DefaultSystems are those the default run compares; torch-switchml runs
// when named.
var DefaultSystems = []string{"switchml", "gloo", "ring", "mpi"}

// runsOnSwitch tells the systems whose workers join the suite's switch.
func runsOnSwitch(system string) bool {
	return system == "switchml" || system == "switchml-sparse" || system == "switchml-auth" || system == "switchml-afxdp" || system == "switchml-shm" || system == "switchml-tree" || system == "torch-switchml"
}

// systemTransport is the --transport a system's workers and switch run
// with, "" for the default (UDP).
func systemTransport(system string) string {
	switch system {
	case "switchml-afxdp":
		return afxdp.Name
	case "switchml-shm":
		return shm.Name
	}
	return ""
}

// systemAuth tells the systems whose switch, controller and workers run
// with --auth.
func systemAuth(system string) bool {
	return system == "switchml-auth"
}

// systemSparse tells the systems whose workers run in the block-sparse
// mode (--sparse).
func systemSparse(system string) bool {
	return system == "switchml-sparse"
}

// extendedHeader tells whether the workers of a SwitchML point run with
// the extended header: when asked for (Options.Extended), for packets the
// compatible header cannot carry, with --auth, whose tag needs it, and in
// the block-sparse mode, whose block keys it carries.
func extendedHeader(o *Options, p Point) bool {
	return o.Extended || p.PacketElements > 256 || systemAuth(p.System) || systemSparse(p.System)
}

// fillsDensity tells the systems whose workers generate their tensors
// with a share of empty blocks (allreduce --density); the others reduce
// a tensor of the same size, whose values do not change their cost.
func fillsDensity(system string) bool {
	return runsOnSwitch(system) && system != "torch-switchml"
}

// Modes are the topologies the suite runs on: the emulated rack (network
// namespaces, needs root) and loopback (127.0.0.1).
var Modes = []string{"rack", "loopback"}

// Sweeps are the sweeps the suite knows; each varies one factor around the
// base point.
// "jobs" (concurrent jobs on one switch, sharing the workers' ports),
// "density" (generated tensors with a share of empty blocks),
// "gradients" (recorded gradients read from files) and "collectives"
// (PyTorch's allreduce, reduce_scatter and all_gather over Gloo and over
// the switchml backend) run when named.
var Sweeps = []string{"workers", "sizes", "rates", "packet", "window", "loopback", "jobs", "density", "gradients", "collectives"}

// Collectives are the torch.distributed calls the collectives sweep
// times (torch_allreduce.py --op): all_reduce of a tensor of S bytes,
// reduce_scatter_tensor of S into S/n per rank, all_gather_into_tensor of
// S/n per rank into S.
var Collectives = []string{"all_reduce", "reduce_scatter", "all_gather"}

// DTypes are the element types a run can reduce (--dtype): the tensor's
// size stays in bytes, so 64 MiB of bfloat16 is 32 Mi values. The Go ring
// and the MPI program reduce float32 only; at another type they are
// skipped and named (Options.Skipped).
var DTypes = []string{"float32", "float16", "bfloat16", "int32"}

// WireBits are the widths a run can ask the SwitchML systems to carry
// float values at (--wire-bits, switchml.Config.WireBits): 0 for the
// type's default (16 bits for float16 and bfloat16, 32 for float32), 16
// or 32.
var WireBits = []int{0, 16, 32}

// DefaultSweeps are those the default run makes.
var DefaultSweeps = []string{"workers", "sizes", "rates", "packet", "window", "loopback"}

// Options describe a run of the suite. They are recorded in results.json,
// which is why every field that shapes the numbers has a JSON name.
type Options struct {
	// Name names the run; the default is the date and time.
	Name string `json:"name"`
	// Out is where results go; the default is benchmarks/results/<Name>.
	Out     string   `json:"out"`
	Modes   []string `json:"modes"`
	Systems []string `json:"systems"`
	Sweeps  []string `json:"sweeps"`
	// Workers are the worker counts of the workers sweep.
	Workers []int `json:"workers"`
	// Size is the tensor size in bytes of the workers sweep and of the
	// base point; Sizes those of the sizes sweep; TuneSize that of the
	// rates, packet and window sweeps.
	Size     int64   `json:"size_bytes"`
	Sizes    []int64 `json:"sizes_bytes"`
	TuneSize int64   `json:"tune_size_bytes"`
	// Rate is every rack port's rate in Mbit/s, each direction; Rates are
	// those of the rates sweep.
	Rate  float64   `json:"rate_mbit"`
	Rates []float64 `json:"rates_mbit"`

	// BaseWorkers is the worker count of the sizes, rates, packet and
	// window sweeps.
	BaseWorkers    int   `json:"base_workers"`
	PacketElements int   `json:"packet_elements"`
	PacketSweep    []int `json:"packet_elements_sweep"`
	Window         int   `json:"window"`
	Windows        []int `json:"window_sweep"`
	Lanes          int   `json:"lanes"`
	// Extended runs every SwitchML system's workers with the extended
	// header (--extended), even where the compatible one would do: packet
	// sizes above 256 values and switchml-auth always use it, so this
	// compares plain SwitchML with switchml-auth on the same header.
	Extended bool `json:"extended,omitempty"`
	// JobCounts are the numbers of concurrent jobs of the jobs sweep: each
	// job has BaseWorkers ranks, one in every worker's namespace, so the
	// jobs share the ports; int32 tensors of TuneSize, checked exactly.
	JobCounts []int `json:"jobs_sweep,omitempty"`
	// Densities are the densities of the density sweep: the share of
	// each rank's blocks (of PacketElements values) that hold values in
	// the tensors the SwitchML systems generate, at the base point
	// (BaseWorkers, Size, Rate). The other systems' cost does not depend
	// on the values: they run once, with a tensor of the same size.
	Densities []float64 `json:"density_sweep,omitempty"`
	// Gradients are directories of recorded gradients (rank<r>.f32, raw
	// little-endian float32), one input of the gradients sweep each:
	// every system reduces rank r's file at BaseWorkers workers and Rate.
	Gradients []string `json:"gradients,omitempty"`
	// CollectiveOps are the calls of the collectives sweep (of
	// Collectives), each at BaseWorkers, Size and every rate of Rates, for
	// the systems that run PyTorch (gloo, torch-switchml).
	CollectiveOps []string `json:"collective_ops,omitempty"`
	// SparseCrossover, if set, is the switchml-sparse workers'
	// --sparse-crossover (above 1: never dense), to measure the sparse
	// mode where the library would send dense.
	SparseCrossover float64 `json:"sparse_crossover,omitempty"`
	// DType is the element type of every tensor (of DTypes; "" reads as
	// float32, as in runs recorded before there was a choice), the jobs
	// sweep's aside, which sums int32. Sizes stay in bytes.
	DType string `json:"dtype,omitempty"`
	// WireBits is the width the SwitchML systems' float values travel at
	// (allreduce --wire-bits; torch-switchml's SWITCHML_WIRE_BITS): 0 for
	// the type's default, 16 or 32. The other systems send their type.
	WireBits int `json:"wire_bits,omitempty"`
	// SMLTimeout is SwitchML's retransmission timeout; zero keeps the
	// library's default.
	SMLTimeout time.Duration `json:"switchml_timeout_ns"`
	// SwitchShards is the software switch's number of data-plane shards
	// (switch --shards; zero or one: one).
	SwitchShards int `json:"switch_shards,omitempty"`
	// RackLeaves, when 2 or more, builds the rack as a two-level tree
	// (rack.Config.Leaves) with non-blocking trunks: every system crosses
	// it, and switchml-tree aggregates at the leaves and the spine.
	RackLeaves int `json:"rack_leaves,omitempty"`

	LoopbackWorkers int   `json:"loopback_workers"`
	LoopbackSize    int64 `json:"loopback_size_bytes"`

	// Iters timed repetitions follow Warmup untimed ones at every point.
	Iters  int  `json:"iters"`
	Warmup int  `json:"warmup"`
	Verify bool `json:"verify"`
	// MTU, Burst and Limit shape the rack's ports (zero Burst and Limit:
	// derived from the rate, see rack.Shaping).
	MTU   int `json:"mtu"`
	Burst int `json:"tbf_burst_bytes"`
	Limit int `json:"tbf_limit_bytes"`
	// Prefix names the rack's namespaces; leftovers of a crashed run with
	// it are removed first.
	Prefix string `json:"prefix"`
	Subnet string `json:"subnet"`
	// Python runs the Gloo baseline and torch-switchml; it needs PyTorch.
	Python string `json:"python"`
	// Timeout bounds each point; zero derives it from the size and rate.
	Timeout time.Duration `json:"point_timeout_ns"`

	// Verbose echoes every process's log to stderr.
	Verbose bool `json:"-"`
	// Exe is the switchml binary the suite runs for the switch, the
	// controller and the SwitchML and ring workers; the default is this
	// program.
	Exe string `json:"-"`
	// Progress receives a line per point and what the suite skips
	// (default os.Stderr); Summary receives the Markdown summary at the
	// end (default os.Stdout).
	Progress io.Writer `json:"-"`
	Summary  io.Writer `json:"-"`
	// Starting, if set, hears of each point as it starts: its index, the
	// number of points, and the time since the suite's first point.
	Starting func(i, n int, p Point, elapsed time.Duration) `json:"-"`
}

// DefaultOptions are the options of the default run, the one
// `switchml bench` makes without flags: every sweep of every system, on the
// rack at 200 Mbit/s and on loopback.
func DefaultOptions() Options {
	return Options{
		Modes:   slices.Clone(Modes),
		Systems: slices.Clone(DefaultSystems),
		Sweeps:  slices.Clone(DefaultSweeps),
		Workers: []int{2, 4, 8}, Size: 64 << 20, Sizes: []int64{1 << 20, 4 << 20, 16 << 20, 64 << 20}, TuneSize: 16 << 20,
		Rate: 200, Rates: []float64{100, 200, 400},
		JobCounts:     []int{1, 2, 4},
		Densities:     []float64{0.001, 0.01, 0.1, 0.5, 1},
		CollectiveOps: slices.Clone(Collectives),
		BaseWorkers:   4, PacketElements: 256, PacketSweep: []int{64, 128, 256}, Window: 64, Windows: []int{16, 32, 64}, Lanes: 4,
		LoopbackWorkers: 4, LoopbackSize: 64 << 20,
		DType: "float32",
		Iters: 5, Warmup: 1, Verify: true,
		MTU: 1500, Prefix: "smlb", Subnet: "10.213.0.0/24", Python: "/usr/bin/python3",
	}
}

// check rejects options no run can use; the CLI reports its flags' own
// mistakes before, naming the flags.
func (o *Options) check() error {
	if o.Rate <= 0 || o.Iters < 1 || o.Warmup < 0 || o.BaseWorkers < 1 || o.LoopbackWorkers < 1 || o.Lanes < 1 || o.Window < 1 {
		return errors.New("benchmarks: want Rate > 0, Iters >= 1, Warmup >= 0 and positive BaseWorkers, LoopbackWorkers, Lanes and Window")
	}
	for _, j := range o.JobCounts {
		if j < 1 {
			return fmt.Errorf("benchmarks: JobCounts %v: every count must be at least 1", o.JobCounts)
		}
	}
	if slices.Contains(o.Systems, "switchml-tree") && o.RackLeaves < 2 {
		return errors.New("benchmarks: switchml-tree runs on a rack built as a tree: set RackLeaves (--rack-leaves) to 2 or more")
	}
	if o.SwitchShards < 0 || o.SwitchShards > softswitch.MaxShards {
		return fmt.Errorf("benchmarks: SwitchShards %d, want 0..%d", o.SwitchShards, softswitch.MaxShards)
	}
	if o.SparseCrossover < 0 || math.IsNaN(o.SparseCrossover) {
		return fmt.Errorf("benchmarks: SparseCrossover %v: want 0 (the library's default) or a share above 0", o.SparseCrossover)
	}
	for _, d := range o.Densities {
		if !(d > 0 && d <= 1) {
			return fmt.Errorf("benchmarks: Densities %v: every density must be in (0, 1]", o.Densities)
		}
	}
	if err := o.checkDType(); err != nil {
		return fmt.Errorf("benchmarks: %s: %w", err.Flag, err.Err)
	}
	if err := o.checkCollectives(); err != nil {
		return fmt.Errorf("benchmarks: %s: %w", err.Flag, err.Err)
	}
	if slices.Contains(o.Sweeps, "gradients") {
		for _, dir := range o.Gradients {
			if _, err := checkGradients(dir, o.BaseWorkers); err != nil {
				return fmt.Errorf("benchmarks: %w", err)
			}
		}
	}
	return nil
}

// ShowProgress sends the line per point to line, or nowhere if quiet, and
// shows the running point on line with a guess of the time left.
func (o *Options) ShowProgress(line *progress.Line, quiet bool) {
	o.Progress = line
	if quiet {
		o.Progress = io.Discard
	}
	o.Starting = func(i, n int, p Point, elapsed time.Duration) {
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
}

// fill sets the defaults of the fields the zero value leaves unusable.
func (o *Options) fill() {
	if o.Name == "" {
		o.Name = time.Now().Format("2006-01-02-150405")
	}
	if o.Out == "" {
		o.Out = filepath.Join("benchmarks", "results", o.Name)
	}
	if o.Progress == nil {
		o.Progress = os.Stderr
	}
	if o.Summary == nil {
		o.Summary = os.Stdout
	}
}

// Point is one configuration of one system.
type Point struct {
	Mode           string  `json:"mode"`
	System         string  `json:"system"`
	Workers        int     `json:"workers"`
	Bytes          int64   `json:"bytes"`
	RateMbit       float64 `json:"rate_mbit,omitempty"`
	PacketElements int     `json:"packet_elements,omitempty"`
	Window         int     `json:"window,omitempty"`
	Lanes          int     `json:"lanes,omitempty"`
	// Jobs, in the jobs sweep, is the number of jobs running at once
	// (their ranks in the same namespaces); 0 elsewhere.
	Jobs int `json:"jobs,omitempty"`
	// Density, in the density sweep, is the share of each rank's blocks
	// that hold values in the generated tensors; 0 elsewhere, and for
	// the systems whose cost does not depend on the values.
	Density float64 `json:"density,omitempty"`
	// Gradients, in the gradients sweep, is the directory of recorded
	// gradients every rank reads its tensor from.
	Gradients string `json:"gradients,omitempty"`
	// Op, in the collectives sweep, is the call timed other than an
	// allreduce: reduce_scatter or all_gather (Collectives), of the same
	// tensor of Bytes; empty for an allreduce.
	Op string `json:"op,omitempty"`
	// DType is the tensor's element type (of DTypes; "" reads as
	// float32): Bytes over its size is the number of values.
	DType string `json:"dtype,omitempty"`
	// WireBits is the width the point asked the SwitchML system to carry
	// float values at (Options.WireBits); 0 for the type's default and
	// for the systems that send their type as it is.
	WireBits int `json:"wire_bits,omitempty"`
	// Sweeps names the sweeps this point belongs to.
	Sweeps []string `json:"sweeps"`
}

// dtypeName is the point's element type, float32 where none is recorded.
func (p Point) dtypeName() string { return cmp.Or(p.DType, "float32") }

// elements is the number of values in the point's tensor of Bytes.
func (p Point) elements() int64 { return p.Bytes / int64(dtypeSize(p.dtypeName())) }

func (p Point) key() string {
	return fmt.Sprintf("%s/%s/%d/%d/%g/%d/%d/%d/%d/%g/%s/%s/%s/%d", p.Mode, p.System, p.Workers, p.Bytes, p.RateMbit, p.PacketElements, p.Window, p.Lanes, p.Jobs, p.Density, p.Gradients, p.Op,
		p.dtypeName(), p.WireBits)
}

func (p Point) String() string {
	s := fmt.Sprintf("%-8s %-8s n=%d %s", p.Mode, p.System, p.Workers, FormatSize(p.Bytes))
	if p.RateMbit > 0 {
		s += fmt.Sprintf(" %gMbit/s", p.RateMbit)
	}
	if runsOnSwitch(p.System) {
		s += fmt.Sprintf(" k=%d W=%d L=%d", p.PacketElements, p.Window, p.Lanes)
	}
	if p.Jobs > 0 {
		s += fmt.Sprintf(" jobs=%d", p.Jobs)
	}
	if p.Density > 0 {
		s += fmt.Sprintf(" density=%g", p.Density)
	}
	if p.Gradients != "" {
		s += " gradients=" + filepath.Base(p.Gradients)
	}
	if p.Op != "" {
		s += " op=" + p.Op
	}
	if d := p.dtypeName(); d != "float32" {
		s += " " + d
	}
	if p.WireBits != 0 {
		s += fmt.Sprintf(" wire=%d", p.WireBits)
	}
	return s
}

// Plan lists the points of the chosen sweeps, each once, rack points first
// and grouped by rate.
func Plan(o *Options) []Point {
	pl := &planner{o: o, index: map[string]int{}}
	for _, sys := range Systems {
		pl.system(sys)
	}
	// Rack points by rate (fewer reshapes), then by system so that a
	// system's points run back to back, then in plan order.
	slices.SortStableFunc(pl.points, func(a, b Point) int {
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
	return pl.points
}

// planner gathers the points of a plan, each once, with every sweep that
// asked for it.
type planner struct {
	o      *Options
	points []Point
	index  map[string]int
}

func (pl *planner) has(sweep string) bool { return slices.Contains(pl.o.Sweeps, sweep) }

// system adds one system's points of every chosen sweep.
func (pl *planner) system(sys string) {
	o := pl.o
	rack := Point{Mode: "rack", System: sys, Workers: o.BaseWorkers, Bytes: o.Size, RateMbit: o.Rate}
	tune := rack
	tune.Bytes = o.TuneSize
	vary := func(sweep string, base Point, values []int, set func(*Point, int)) {
		if !pl.has(sweep) {
			return
		}
		for _, v := range values {
			p := base
			set(&p, v)
			pl.add(sweep, p)
		}
	}
	vary("workers", rack, o.Workers, func(p *Point, n int) { p.Workers = n })
	if pl.has("sizes") {
		for _, b := range o.Sizes {
			p := rack
			p.Bytes = b
			pl.add("sizes", p)
		}
	}
	if pl.has("rates") {
		for _, r := range o.Rates {
			p := tune
			p.RateMbit = r
			pl.add("rates", p)
		}
	}
	if sys == "switchml" {
		vary("packet", tune, o.PacketSweep, func(p *Point, k int) { p.PacketElements = k })
		vary("window", tune, o.Windows, func(p *Point, w int) { p.Window = w })
	}
	if pl.has("loopback") {
		pl.add("loopback", Point{Mode: "loopback", System: sys, Workers: o.LoopbackWorkers, Bytes: o.LoopbackSize})
	}
	if sys == "switchml" || sys == "switchml-tree" {
		vary("jobs", tune, o.JobCounts, func(p *Point, j int) { p.Jobs = j })
	}
	if pl.has("density") {
		for _, d := range o.Densities {
			p := rack
			if fillsDensity(sys) {
				p.Density = d
			}
			pl.add("density", p) // once for the others: their cost does not depend on the values
		}
	}
	if pl.has("gradients") {
		for _, dir := range o.Gradients {
			p := rack
			p.Gradients, p.Bytes = dir, gradientBytes(dir)
			pl.add("gradients", p)
		}
	}
	if pl.has("collectives") && runsTorch(sys) {
		for _, r := range o.Rates {
			for _, op := range o.CollectiveOps {
				p := rack
				p.RateMbit, p.Op = r, op
				if op == "all_reduce" {
					p.Op = "" // the allreduce the other sweeps time
				}
				pl.add("collectives", p)
			}
		}
	}
}

// runsTorch tells the systems that run torch_allreduce.py.
func runsTorch(system string) bool { return system == "gloo" || system == "torch-switchml" }

// checkCollectives refuses a collectives sweep no run can make: an
// unknown call, or a tensor that does not split into a whole number of
// float32 values per rank. The error names the flag to fix.
func (o *Options) checkCollectives() *FlagError {
	if !slices.Contains(o.Sweeps, "collectives") {
		return nil
	}
	if len(o.CollectiveOps) == 0 {
		return &FlagError{"collective-ops", fmt.Errorf("the collectives sweep needs at least one of %s", strings.Join(Collectives, ", "))}
	}
	for _, op := range o.CollectiveOps {
		if !slices.Contains(Collectives, op) {
			return &FlagError{"collective-ops", fmt.Errorf("%q: want %s", op, strings.Join(Collectives, ", "))}
		}
	}
	dt := o.dtypeName()
	if size := int64(dtypeSize(dt)) * int64(o.BaseWorkers); o.Size%size != 0 {
		return &FlagError{"size", fmt.Errorf("the collectives sweep splits the %d-byte tensor into %d shards of %s: want a multiple of %d bytes",
			o.Size, o.BaseWorkers, dt, size)}
	}
	return nil
}

// runs says whether a point can run: its system and mode are chosen, and
// the system runs in that mode.
func (pl *planner) runs(p Point) bool {
	o := pl.o
	switch {
	case !slices.Contains(o.Systems, p.System) || !slices.Contains(o.Modes, p.Mode):
		return false
	case p.System == "mpi" && p.Mode == "rack":
		return false // mpirun would need a launcher across namespaces
	case p.System == "switchml-afxdp" && p.Mode != "rack":
		return false // the loopback device has no XDP path: AF_XDP needs the rack's ports
	case p.System == "switchml-shm" && p.Mode != "loopback":
		return false // shared memory between namespaces would bypass the rack's links
	case p.System == "switchml-tree" && (p.Mode != "rack" || o.RackLeaves < 2 || p.Workers < o.RackLeaves):
		return false // a tree needs the rack's leaves, and a worker under each
	case o.unable(p.System) != "":
		return false // named in Skipped
	}
	return true
}

// unable says why a system cannot reduce the run's type at its wire
// width, or "" when it can. Gloo's types depend on the PyTorch it runs
// with: the run asks it (see prepareBaselines).
func (o *Options) unable(system string) string {
	dt := o.dtypeName()
	switch {
	case system == "ring" && dt != "float32":
		return fmt.Sprintf("the Go ring (switchml ring) reduces float32 only, not %s", dt)
	case system == "mpi" && dt != "float32":
		return fmt.Sprintf("the MPI program reduces MPI_FLOAT (float32) only, not %s", dt)
	case systemSparse(system) && o.WireBits == dtype.WireNarrow:
		return "the block-sparse mode sends 32-bit values: --wire-bits 16 does not apply to it"
	}
	return ""
}

// Skip is a chosen system that a run leaves out, and why.
type Skip struct {
	System, Why string
}

// Skipped lists the chosen systems that cannot run at the options' type
// and wire width (Options.DType, Options.WireBits), in the order of
// Systems: Plan leaves their points out, and the summary names them.
func (o *Options) Skipped() []Skip {
	var out []Skip
	for _, s := range Systems {
		if why := o.unable(s); why != "" && slices.Contains(o.Systems, s) {
			out = append(out, Skip{s, why})
		}
	}
	return out
}

// dtypeName is the run's element type, float32 where none is set.
func (o *Options) dtypeName() string { return cmp.Or(o.DType, "float32") }

// dtypeSize is the bytes of one value of a type of DTypes (4 for one the
// suite does not know; check refuses those).
func dtypeSize(name string) int {
	if c, err := dtype.ByName(name); err == nil {
		return c.Size()
	}
	return 4
}

// checkDType refuses a type or wire width no run can use, and a type
// the chosen sweeps cannot take; the error names the flag to fix.
func (o *Options) checkDType() *FlagError {
	dt := o.dtypeName()
	if !slices.Contains(DTypes, dt) {
		return &FlagError{"dtype", fmt.Errorf("%q: want one of %s", dt, strings.Join(DTypes, ", "))}
	}
	if !slices.Contains(WireBits, o.WireBits) {
		return &FlagError{"wire-bits", fmt.Errorf("%d: want 0 (the type's default: 16 bits for float16 and bfloat16, 32 for float32), 16 or 32", o.WireBits)}
	}
	if dt != "float32" && slices.Contains(o.Sweeps, "gradients") && len(o.Gradients) > 0 {
		return &FlagError{"dtype", fmt.Errorf("the gradients sweep reduces recorded float32 files, not %s: run it at --dtype float32", dt)}
	}
	return nil
}

// add puts a point of sweep in the plan, with the suite's knobs where the
// point leaves them, or names the sweep on the same point already there.
func (pl *planner) add(sweep string, p Point) {
	if !pl.runs(p) {
		return
	}
	o := pl.o
	p.DType = o.dtypeName()
	if p.Jobs > 0 {
		p.DType = "int32" // each job's sums checked exactly
	}
	if runsOnSwitch(p.System) {
		p.PacketElements = cmp0(p.PacketElements, o.PacketElements)
		p.Window = cmp0(p.Window, o.Window)
		p.Lanes = o.Lanes
		p.WireBits = o.WireBits
	} else {
		p.PacketElements, p.Window, p.Lanes, p.WireBits = 0, 0, 0, 0
	}
	if p.Mode == "loopback" {
		p.RateMbit = 0
	}
	if i, ok := pl.index[p.key()]; ok {
		if !slices.Contains(pl.points[i].Sweeps, sweep) {
			pl.points[i].Sweeps = append(pl.points[i].Sweeps, sweep)
		}
		return
	}
	p.Sweeps = []string{sweep}
	pl.index[p.key()] = len(pl.points)
	pl.points = append(pl.points, p)
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// ParseSize reads sizes like 64MiB, 512KiB, 1GiB, 1000000 (bytes); the
// result is a whole number of float32 elements.
func ParseSize(s string) (int64, error) {
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

// FormatSize writes a size in bytes as ParseSize reads it, in the largest
// binary unit that divides it.
func FormatSize(b int64) string {
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
