package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
)

// Run runs the points Plan lists for o, one at a time: the rack ones on an
// emulated rack it builds (needs root), then the loopback ones. After every
// point it saves results.json under o.Out; at the end it writes summary.md
// and the plots there and copies the summary to o.Summary. A baseline that
// cannot run (no PyTorch, no OpenMPI) is skipped and named, not an error.
//
// When ctx ends, Run stops every process, tears the rack down and returns
// an error, keeping the points done so far in results.json.
func Run(ctx context.Context, o Options) error {
	o.fill()
	if err := o.check(); err != nil {
		return err
	}
	points := Plan(&o)
	if len(points) == 0 {
		return errors.New("benchmarks: the chosen modes, sweeps and systems give no point to run")
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("benchmarks: the switchml binary to run (set Options.Exe): %w", err)
		}
		o.Exe = exe
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "switchml-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	b := &driver{o: &o, exe: o.Exe, work: work, file: resultsFile{Options: o, Environment: Environment(), Fabric: map[string]any{}}}
	b.file.Environment["command"] = strings.Join(os.Args, " ")
	b.prepareBaselines(ctx, points)

	start := time.Now()
	for i, p := range points {
		if err := ctx.Err(); err != nil {
			break
		}
		if p.Mode == "rack" && b.rack == nil {
			if err := b.buildRack(ctx, points); err != nil {
				b.close()
				return err
			}
		}
		if p.Mode == "loopback" && b.rack != nil {
			b.closeRack()
		}
		if o.Starting != nil {
			o.Starting(i, len(points), p, time.Since(start))
		}
		fmt.Fprintf(o.Progress, "[%d/%d] %s ...", i+1, len(points), p)
		res := b.runPoint(ctx, i, p)
		if res.Error != "" {
			fmt.Fprintf(o.Progress, " FAILED after %.0f s: %s\n", res.WallS, firstLine(res.Error))
		} else {
			fmt.Fprintf(o.Progress, " median %.3f s (min %.3f, max %.3f), %.1f Mbit/s", res.MedianTAT, res.MinTAT, res.MaxTAT, res.GoodputMbit)
			if res.LinkEfficiency > 0 {
				fmt.Fprintf(o.Progress, ", efficiency %.3f", res.LinkEfficiency)
			}
			fmt.Fprintf(o.Progress, " [%.0f s, %s elapsed]\n", res.WallS, time.Since(start).Round(time.Second))
		}
		b.file.Results = append(b.file.Results, res)
		if err := b.file.save(o.Out); err != nil {
			b.close()
			return err
		}
	}
	b.close()
	b.file.Environment["loadavg_end"] = loadAvg()
	if err := b.file.save(o.Out); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted; the rack is torn down and the points done so far are in %s: %w", o.Out, err)
	}
	summary, err := writeReport(o.Out, &b.file)
	if err != nil {
		return err
	}
	fmt.Fprint(o.Summary, summary)
	fmt.Fprintf(o.Progress, "results in %s (%s)\n", o.Out, time.Since(start).Round(time.Second))
	return nil
}

// driver runs the points and keeps what they share: the rack, a switch and
// controller per topology, and the baselines' programs.
type driver struct {
	o         *Options
	exe, work string
	file      resultsFile
	rack      *rack.Rack
	rackFab   *harness.Fabric
	xdpFab    *harness.Fabric // the rack's switch on AF_XDP (switchml-afxdp)
	shmFab    *harness.Fabric // the loopback switch with shared-memory inboxes (switchml-shm)
	loopAuth  *harness.Fabric // the loopback switch and controller with --auth (switchml-auth)
	rackAuth  *harness.Fabric // the rack's switch and controller with --auth (switchml-auth)
	treeFab   *harness.Fabric
	loopFab   *harness.Fabric
	gloo      string // path of the PyTorch script, "" if Gloo is unavailable
	glooWhy   string
	mpi       string // path of the compiled MPI program
	mpiWhy    string
	probed    map[float64]bool
	densities map[string]*blockDensity // blockDensity's, per input

	// torchSML is the environment that gives the PyTorch script the
	// switchml backend (nil: torch-switchml cannot run, for torchSMLWhy).
	torchSML    []string
	torchSMLWhy string
}

// prepareBaselines writes the Gloo script and compiles the MPI program, and
// notes why a baseline cannot run instead of failing the suite.
func (b *driver) prepareBaselines(ctx context.Context, points []Point) {
	need := func(sys string) bool {
		return slices.ContainsFunc(points, func(p Point) bool { return p.System == sys })
	}
	env := b.file.Environment
	if need("gloo") || need("torch-switchml") {
		script := filepath.Join(b.work, "torch_allreduce.py")
		out, err := exec.CommandContext(ctx, b.o.Python, "-c", "import torch, torch.distributed as d; print(torch.__version__, d.is_gloo_available())").Output()
		switch {
		case err != nil:
			b.glooWhy = fmt.Sprintf("%s cannot import torch: %v", b.o.Python, err)
		case !strings.Contains(string(out), "True"):
			b.glooWhy = "this PyTorch has no Gloo backend"
		default:
			env["torch"] = strings.Fields(string(out))[0]
			if err := os.WriteFile(script, TorchAllReduce, 0o644); err != nil {
				b.glooWhy = err.Error()
			} else {
				b.gloo = script
			}
		}
		if b.gloo != "" && need("gloo") {
			// The script is there for torch-switchml either way.
			b.glooWhy = glooReduces(ctx, b.o.Python, env["torch"], b.o.dtypeName(), b.work)
		}
	}
	if need("torch-switchml") {
		if b.gloo == "" {
			b.torchSMLWhy = b.glooWhy
		} else if b.torchSML, b.torchSMLWhy = switchmlBackend(ctx, b.o.Python, b.work); b.torchSMLWhy == "" {
			env["torch_switchml"] = strings.Join(b.torchSML, " ")
		}
	}
	if need("mpi") {
		src := filepath.Join(b.work, "allreduce.c")
		bin := filepath.Join(b.work, "mpi_allreduce")
		if _, err := exec.LookPath("mpicc"); err != nil {
			b.mpiWhy = "mpicc not found (apt-get install openmpi-bin libopenmpi-dev)"
		} else if _, err := exec.LookPath("mpirun"); err != nil {
			b.mpiWhy = "mpirun not found (apt-get install openmpi-bin)"
		} else if err := os.WriteFile(src, MPIAllReduce, 0o644); err != nil {
			b.mpiWhy = err.Error()
		} else if out, err := exec.CommandContext(ctx, "mpicc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
			b.mpiWhy = fmt.Sprintf("mpicc: %v: %s", err, out)
		} else {
			b.mpi = bin
			if v, err := exec.Command("mpirun", "--version").Output(); err == nil {
				env["mpirun"] = firstLine(string(v))
			}
		}
	}
	if skips := b.o.Skipped(); len(skips) > 0 {
		m := map[string]string{}
		for _, sk := range skips {
			m[sk.System] = sk.Why
			fmt.Fprintf(b.o.Progress, "%s skipped: %s\n", sk.System, sk.Why)
		}
		env["dtype_skipped"] = m
	}
	if b.glooWhy != "" && need("gloo") {
		env["gloo_skipped"] = b.glooWhy
		fmt.Fprintf(b.o.Progress, "gloo skipped: %s\n", b.glooWhy)
	}
	if b.torchSMLWhy != "" {
		env["torch_switchml_skipped"] = b.torchSMLWhy
		fmt.Fprintf(b.o.Progress, "torch-switchml skipped: %s\n", b.torchSMLWhy)
	}
	if b.mpiWhy != "" {
		env["mpi_skipped"] = b.mpiWhy
		fmt.Fprintf(b.o.Progress, "mpi skipped: %s\n", b.mpiWhy)
	}
}

// glooReduces says why python's Gloo cannot sum tensors of type dt
// (Debian's torch 1.13 has no bfloat16 in Gloo), or "" when it can: a
// one-rank group sums a small tensor of it.
func glooReduces(ctx context.Context, python string, torch any, dt, work string) string {
	if dt == "float32" {
		return ""
	}
	store := filepath.Join(work, "gloo-"+dt+".store")
	probe := `import sys, torch, torch.distributed as d
d.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
x = torch.ones(4, dtype=getattr(torch, sys.argv[2]))
d.all_reduce(x)
d.destroy_process_group()`
	out, err := exec.CommandContext(ctx, python, "-c", probe, store, dt).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("Gloo in PyTorch %v (%s) cannot all_reduce %s (%s); --python with a PyTorch whose Gloo can (2.x) runs it",
			torch, python, dt, lastLine(string(out), err))
	}
	return ""
}

// lastLine is the last line of a failed command's output (a Python
// exception's message), or its error when it printed nothing.
func lastLine(out string, err error) string {
	if lines := strings.Split(strings.TrimSpace(out), "\n"); lines[len(lines)-1] != "" {
		return strings.TrimSpace(lines[len(lines)-1])
	}
	return err.Error()
}

func (b *driver) pointTimeout(p Point) time.Duration {
	if b.o.Timeout > 0 {
		return b.o.Timeout
	}
	rate := p.RateMbit
	if rate == 0 {
		rate = 200
	}
	one := float64(p.Bytes*8) / (rate * 1e6) * 2
	return time.Duration((float64(b.o.Warmup+b.o.Iters)*one*4+120)*float64(time.Second)) + 2*time.Minute
}

func (b *driver) runPoint(ctx context.Context, idx int, p Point) (res result) {
	res.Point = p
	start := time.Now()
	defer func() { res.WallS = time.Since(start).Seconds() }()
	fail := func(err error) result {
		res.Error = err.Error()
		return res
	}
	if why := b.missing(p.System); why != "" {
		return fail(errors.New("skipped: " + why))
	}
	if p.Mode == "rack" {
		if err := b.setRate(ctx, p.RateMbit); err != nil {
			return fail(err)
		}
	}
	var fab *harness.Fabric
	var switchPIDs []int // the switch, or every switch of a tree
	if runsOnSwitch(p.System) {
		var err error
		if fab, switchPIDs, err = b.switches(ctx, p); err != nil {
			return fail(err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, b.pointTimeout(p))
	defer cancel()

	var q0 []rack.QdiscStats
	if p.Mode == "rack" {
		q0, _ = b.rack.Stats()
	}
	var sw0 cpuTime
	if fab != nil {
		sw0 = procsCPU(switchPIDs)
	}
	m0 := readMachineCPU()

	reps, err := b.runSystem(pctx, idx, p, fab)

	m1 := readMachineCPU()
	res.MachineBusy, res.MachineSoftirq = m1.since(m0)
	if fab != nil {
		if sw1 := procsCPU(switchPIDs); sw1.User+sw1.Sys > 0 {
			d := cpuTime{User: sw1.User - sw0.User, Sys: sw1.Sys - sw0.Sys}
			res.SwitchCPU = &d
			res.SwitchCPUPerOp = d.total() / float64(b.o.Warmup+b.o.Iters)
		}
	}
	if p.Mode == "rack" {
		if q1, qerr := b.rack.Stats(); qerr == nil && len(q1) == len(q0) {
			res.Qdisc, res.QdiscDrops = qdiscDeltas(q0, q1, p.Workers)
		}
	}
	if err != nil {
		return fail(err)
	}
	if err := b.gather(&res, reps, fab); err != nil {
		return fail(err)
	}
	res.BlockDensity = b.blockDensity(p)
	return res
}

// missing says why a baseline a point needs is not here, or "".
func (b *driver) missing(system string) string {
	switch {
	case system == "gloo" && (b.gloo == "" || b.glooWhy != ""):
		return b.glooWhy
	case system == "torch-switchml" && b.torchSML == nil:
		return b.torchSMLWhy
	case system == "mpi" && b.mpi == "":
		return b.mpiWhy
	}
	return ""
}

// switches starts the point's switch side and returns it with the
// process ids of its switches (the switch, or every switch of a tree).
func (b *driver) switches(ctx context.Context, p Point) (*harness.Fabric, []int, error) {
	fab, err := b.fabric(ctx, p.Mode, p.System)
	if err != nil {
		return nil, nil, err
	}
	sw, _ := fab.Procs()
	pids := []int{sw.Cmd().Process.Pid}
	for _, l := range fab.LeafProcs() {
		pids = append(pids, l.Cmd().Process.Pid)
	}
	return fab, pids, nil
}

// qdiscDeltas is what the rack's shaped queues of the first workers
// passed and dropped between two readings.
func qdiscDeltas(q0, q1 []rack.QdiscStats, workers int) (ds []qdiscDelta, drops uint64) {
	for i := range q1 {
		d := qdiscDelta{Worker: q1[i].Worker, Direction: "download", Packets: q1[i].Packets - q0[i].Packets,
			Bytes: q1[i].Bytes - q0[i].Bytes, Drops: q1[i].Drops - q0[i].Drops, Overlimits: q1[i].Overlimits - q0[i].Overlimits}
		if q1[i].Up {
			d.Direction = "upload"
		}
		if q1[i].Trunk() {
			d.Direction = "trunk-" + d.Direction
		}
		if d.Worker < workers {
			ds = append(ds, d)
			drops += d.Drops
		}
	}
	return ds, drops
}

// gather puts the ranks' reports together into the point's result: its
// repetitions (the slowest rank's time of each), their median, minimum and
// maximum, goodput, CPU and counts.
func (b *driver) gather(res *result, reps []rankReport, fab *harness.Fabric) error {
	p := res.Point
	res.Verified = true
	for r, rep := range reps {
		if len(rep.TATs) != b.o.Iters {
			return fmt.Errorf("rank %d reported %d timings, want %d", r, len(rep.TATs), b.o.Iters)
		}
		res.Verified = res.Verified && rep.Verified
		res.Retransmits += rep.Retransmits
		res.Packets += rep.Packets
		if rep.Transport != "" {
			res.Transports = append(res.Transports, rep.Transport)
		}
		if rep.WireBits != 0 && !slices.Contains(res.WireBitsUsed, rep.WireBits) {
			res.WireBitsUsed = append(res.WireBitsUsed, rep.WireBits)
		}
		res.WorkerCPU = append(res.WorkerCPU, rep.cpu)
		if rep.bytes != nil {
			res.RankBytes = append(res.RankBytes, *rep.bytes)
		}
		res.WorkerCPUPerOp += rep.cpu.total() / float64(b.o.Warmup+b.o.Iters)
	}
	if systemTransport(p.System) != "" && fab != nil {
		res.Transports = append(res.Transports, "switch:"+switchTransport(fab.Logs()["switch"]))
	}
	for it := 0; it < b.o.Iters; it++ {
		run := repetition{}
		for _, rep := range reps {
			run.RankTATs = append(run.RankTATs, rep.TATs[it])
			run.TAT = max(run.TAT, rep.TATs[it])
		}
		res.Runs = append(res.Runs, run)
	}
	tats := make([]float64, len(res.Runs))
	for i, r := range res.Runs {
		tats[i] = r.TAT
	}
	sort.Float64s(tats)
	res.MedianTAT, res.MinTAT, res.MaxTAT = Median(tats), tats[0], tats[len(tats)-1]
	res.GoodputMbit = float64(p.Bytes*8) / res.MedianTAT / 1e6
	if p.RateMbit > 0 {
		res.LinkEfficiency = res.GoodputMbit / p.RateMbit
	}
	if p.Jobs > 0 && len(reps) == p.Jobs*p.Workers {
		jobStats(res, reps, p)
	}
	return nil
}

// jobStats splits a jobs-sweep point's ranks (job-major) into its jobs.
func jobStats(res *result, reps []rankReport, p Point) {
	first, last := math.Inf(1), math.Inf(-1)
	latestStart, earliestEnd := math.Inf(-1), math.Inf(1)
	var sum, sumSq, bits float64
	for j := 0; j < p.Jobs; j++ {
		ranks := reps[j*p.Workers : (j+1)*p.Workers]
		jr := jobResult{Verified: true}
		tats := make([]float64, len(ranks[0].TATs))
		start, end := math.Inf(1), math.Inf(-1)
		for _, rep := range ranks {
			for it, v := range rep.TATs {
				if it < len(tats) {
					tats[it] = max(tats[it], v)
				}
			}
			start, end = min(start, rep.start), max(end, rep.end)
			jr.Verified = jr.Verified && rep.Verified
		}
		sort.Float64s(tats)
		jr.MedianTAT = Median(tats)
		jr.GoodputMbit = float64(p.Bytes*8) / jr.MedianTAT / 1e6
		jr.Start, jr.End = start, end
		first, last = min(first, start), max(last, end)
		latestStart, earliestEnd = max(latestStart, start), min(earliestEnd, end)
		sum += jr.GoodputMbit
		sumSq += jr.GoodputMbit * jr.GoodputMbit
		bits += float64(len(tats)) * float64(p.Bytes*8)
		res.JobResults = append(res.JobResults, jr)
	}
	for i := range res.JobResults {
		res.JobResults[i].Start -= first
		res.JobResults[i].End -= first
	}
	res.Fairness = sum * sum / (float64(p.Jobs) * sumSq)
	if last > first {
		// What the ports carried: every job's timed calls over the span
		// from the first one's start to the last one's end (barriers
		// and the checks between calls included, so a lower bound).
		res.AggregateGoodputMbit = bits / (last - first) / 1e6
		res.Overlap = max(0, earliestEnd-latestStart) / (last - first)
	}
	if p.RateMbit > 0 {
		res.LinkEfficiency = res.AggregateGoodputMbit / p.RateMbit
	}
}

// Median is the median of sorted values (at least one).
func Median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
