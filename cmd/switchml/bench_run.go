package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/rack"
)

// benchRun is one timed repetition of a point.
type benchRun struct {
	// TAT is the slowest worker's time: the result is on every worker.
	TAT      float64   `json:"tat_s"`
	RankTATs []float64 `json:"rank_tat_s"`
}

type benchCPU struct {
	User float64 `json:"user_s"`
	Sys  float64 `json:"sys_s"`
}

func (c benchCPU) total() float64 { return c.User + c.Sys }

// qdiscDelta is what one shaped port counted during a point.
type qdiscDelta struct {
	Worker     int    `json:"worker"`
	Direction  string `json:"direction"`
	Packets    uint64 `json:"packets"`
	Bytes      uint64 `json:"bytes"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
}

// benchResult is a point with everything measured on it.
type benchResult struct {
	benchPoint
	Runs      []benchRun `json:"runs"`
	MedianTAT float64    `json:"median_tat_s"`
	MinTAT    float64    `json:"min_tat_s"`
	MaxTAT    float64    `json:"max_tat_s"`
	// GoodputMbit is tensor bits over the median TAT, per worker.
	GoodputMbit float64 `json:"goodput_mbit"`
	// LinkEfficiency is GoodputMbit over the port rate (rack only).
	LinkEfficiency float64 `json:"link_efficiency,omitempty"`
	Verified       bool    `json:"verified"`
	Retransmits    uint64  `json:"retransmits"`
	// WorkerCPU is each worker's CPU time during its allreduce calls
	// (warm-up included), the same measure for every system.
	WorkerCPU []benchCPU `json:"worker_cpu"`
	// WorkerCPUPerOp is the workers' CPU seconds summed, per allreduce
	// (warm-up included in the count).
	WorkerCPUPerOp float64 `json:"worker_cpu_per_allreduce_s"`
	// SwitchCPU is the software switch's CPU time during the point.
	SwitchCPU      *benchCPU `json:"switch_cpu,omitempty"`
	SwitchCPUPerOp float64   `json:"switch_cpu_per_allreduce_s,omitempty"`
	// MachineBusy is the fraction of all CPUs busy during the point, and
	// MachineSoftirq the part of it spent in softirq (packet forwarding, tbf).
	MachineBusy    float64      `json:"machine_busy"`
	MachineSoftirq float64      `json:"machine_softirq"`
	Qdisc          []qdiscDelta `json:"qdisc,omitempty"`
	QdiscDrops     uint64       `json:"qdisc_drops"`
	WallS          float64      `json:"wall_s"`
	Error          string       `json:"error,omitempty"`
}

// benchFile is results.json.
type benchFile struct {
	Options     benchOptions   `json:"options"`
	Environment map[string]any `json:"environment"`
	Results     []benchResult  `json:"results"`
	Fabric      map[string]any `json:"switch_logs,omitempty"`
}

func runBenchPoints(ctx context.Context, o *benchOptions, points []benchPoint) error {
	// The driver tears down what it built on any exit, Ctrl-C included
	// (main's context ends on SIGINT and SIGTERM); SIGHUP too.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "switchml-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	b := &benchDriver{o: o, exe: exe, work: work, file: benchFile{Options: *o, Environment: benchEnvironment(), Fabric: map[string]any{}}}
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
		fmt.Fprintf(os.Stderr, "[%d/%d] %s ...", i+1, len(points), p)
		res := b.runPoint(ctx, i, p)
		if res.Error != "" {
			fmt.Fprintf(os.Stderr, " FAILED after %.0f s: %s\n", res.WallS, firstLine(res.Error))
		} else {
			fmt.Fprintf(os.Stderr, " median %.3f s (min %.3f, max %.3f), %.1f Mbit/s", res.MedianTAT, res.MinTAT, res.MaxTAT, res.GoodputMbit)
			if res.LinkEfficiency > 0 {
				fmt.Fprintf(os.Stderr, ", efficiency %.3f", res.LinkEfficiency)
			}
			fmt.Fprintf(os.Stderr, " [%.0f s, %s elapsed]\n", res.WallS, time.Since(start).Round(time.Second))
		}
		b.file.Results = append(b.file.Results, res)
		if err := b.save(); err != nil {
			b.close()
			return err
		}
	}
	b.close()
	b.file.Environment["loadavg_end"] = loadAvg()
	if err := b.save(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted; the rack is torn down and the points done so far are in %s: %w", o.Out, err)
	}
	summary, err := writeBenchReport(o.Out, &b.file)
	if err != nil {
		return err
	}
	fmt.Print(summary)
	fmt.Fprintf(os.Stderr, "results in %s (%s)\n", o.Out, time.Since(start).Round(time.Second))
	return nil
}

type benchDriver struct {
	o         *benchOptions
	exe, work string
	file      benchFile
	rack      *rack.Rack
	rackFab   *benchFabric
	loopFab   *benchFabric
	gloo      string // path of the Gloo script, "" if unavailable
	glooWhy   string
	mpi       string // path of the compiled MPI program
	mpiWhy    string
	probed    map[float64]bool
}

func (b *benchDriver) save() error {
	data, err := json.MarshalIndent(&b.file, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.o.Out, "results.json"), append(data, '\n'), 0o644)
}

func (b *benchDriver) close() {
	if b.loopFab != nil {
		b.file.Fabric["loopback"] = b.loopFab.stop()
		b.loopFab = nil
	}
	b.closeRack()
}

func (b *benchDriver) closeRack() {
	if b.rackFab != nil {
		b.file.Fabric["rack"] = b.rackFab.stop()
		b.rackFab = nil
	}
	if b.rack != nil {
		if err := b.rack.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "tearing down the rack: %v\n", err)
		}
		b.rack = nil
	}
}

// prepareBaselines writes the Gloo script and compiles the MPI program, and
// notes why a baseline cannot run instead of failing the suite.
func (b *benchDriver) prepareBaselines(ctx context.Context, points []benchPoint) {
	need := func(sys string) bool {
		return slices.ContainsFunc(points, func(p benchPoint) bool { return p.System == sys })
	}
	env := b.file.Environment
	if need("gloo") {
		script := filepath.Join(b.work, "gloo_allreduce.py")
		out, err := exec.CommandContext(ctx, b.o.Python, "-c", "import torch, torch.distributed as d; print(torch.__version__, d.is_gloo_available())").Output()
		switch {
		case err != nil:
			b.glooWhy = fmt.Sprintf("%s cannot import torch: %v", b.o.Python, err)
		case !strings.Contains(string(out), "True"):
			b.glooWhy = "this PyTorch has no Gloo backend"
		default:
			env["torch"] = strings.Fields(string(out))[0]
			if err := os.WriteFile(script, benchmarks.GlooAllReduce, 0o644); err != nil {
				b.glooWhy = err.Error()
			} else {
				b.gloo = script
			}
		}
	}
	if need("mpi") {
		src := filepath.Join(b.work, "allreduce.c")
		bin := filepath.Join(b.work, "mpi_allreduce")
		if _, err := exec.LookPath("mpicc"); err != nil {
			b.mpiWhy = "mpicc not found (apt-get install openmpi-bin libopenmpi-dev)"
		} else if _, err := exec.LookPath("mpirun"); err != nil {
			b.mpiWhy = "mpirun not found (apt-get install openmpi-bin)"
		} else if err := os.WriteFile(src, benchmarks.MPIAllReduce, 0o644); err != nil {
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
	if b.glooWhy != "" {
		env["gloo_skipped"] = b.glooWhy
		fmt.Fprintf(os.Stderr, "gloo skipped: %s\n", b.glooWhy)
	}
	if b.mpiWhy != "" {
		env["mpi_skipped"] = b.mpiWhy
		fmt.Fprintf(os.Stderr, "mpi skipped: %s\n", b.mpiWhy)
	}
}

func (b *benchDriver) buildRack(ctx context.Context, points []benchPoint) error {
	n := 0
	for _, p := range points {
		if p.Mode == "rack" {
			n = max(n, p.Workers)
		}
	}
	fmt.Fprintf(os.Stderr, "building the rack: %d workers, %g Mbit/s ports, MTU %d (namespaces %s*)\n", n, b.o.Rate, b.o.MTU, b.o.Prefix)
	r, err := rack.New(ctx, rack.Config{Workers: n, RateMbit: b.o.Rate, MTU: b.o.MTU, Prefix: b.o.Prefix,
		Subnet: b.o.Subnet, BurstBytes: b.o.Burst, LimitBytes: b.o.Limit})
	if err != nil {
		return err
	}
	b.rack = r
	b.probed = map[float64]bool{}
	b.file.Environment["rack"] = map[string]any{"workers": n, "mtu": b.o.MTU, "switch_ip": r.SwitchIP(), "prefix": b.o.Prefix}
	return nil
}

// setRate reshapes the rack and measures what a port delivers for UDP.
func (b *benchDriver) setRate(ctx context.Context, rate float64) error {
	if cur, _, _ := b.rack.Shape(); cur != rate {
		if err := b.rack.SetRate(rate); err != nil {
			return err
		}
	}
	if !b.probed[rate] {
		b.probed[rate] = true
		_, burst, limit := b.rack.Shape()
		probe, err := b.rack.MeasureUDP(ctx, 0, 1024+10, time.Second)
		entry := map[string]any{"rate_mbit": rate, "tbf_burst_bytes": burst, "tbf_limit_bytes": limit, "udp_probe": probe}
		if err != nil {
			entry["udp_probe_error"] = err.Error()
		}
		probes, _ := b.file.Environment["ports"].([]any)
		b.file.Environment["ports"] = append(probes, entry)
		fmt.Fprintf(os.Stderr, "ports at %g Mbit/s: tbf burst %d B, limit %d B; UDP probe %.1f Mbit/s of frames\n", rate, burst, limit, probe.FrameMbit)
	}
	return nil
}

func (b *benchDriver) pointTimeout(p benchPoint) time.Duration {
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

func (b *benchDriver) runPoint(ctx context.Context, idx int, p benchPoint) (res benchResult) {
	res.benchPoint = p
	start := time.Now()
	defer func() { res.WallS = time.Since(start).Seconds() }()
	fail := func(err error) benchResult {
		res.Error = err.Error()
		return res
	}
	switch {
	case p.System == "gloo" && b.gloo == "":
		return fail(errors.New("skipped: " + b.glooWhy))
	case p.System == "mpi" && b.mpi == "":
		return fail(errors.New("skipped: " + b.mpiWhy))
	}
	if p.Mode == "rack" {
		if err := b.setRate(ctx, p.RateMbit); err != nil {
			return fail(err)
		}
	}
	var fab *benchFabric
	if p.System == "switchml" {
		var err error
		if fab, err = b.fabric(ctx, p.Mode); err != nil {
			return fail(err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, b.pointTimeout(p))
	defer cancel()

	var q0 []rack.QdiscStats
	if p.Mode == "rack" {
		q0, _ = b.rack.Stats()
	}
	var sw0 benchCPU
	if fab != nil {
		sw0, _ = procCPU(fab.sw.cmd.Process.Pid)
	}
	m0 := readMachineCPU()

	reps, err := b.runSystem(pctx, idx, p, fab)

	m1 := readMachineCPU()
	res.MachineBusy, res.MachineSoftirq = m1.since(m0)
	if fab != nil {
		if sw1, ok := procCPU(fab.sw.cmd.Process.Pid); ok {
			d := benchCPU{User: sw1.User - sw0.User, Sys: sw1.Sys - sw0.Sys}
			res.SwitchCPU = &d
			res.SwitchCPUPerOp = d.total() / float64(b.o.Warmup+b.o.Iters)
		}
	}
	if p.Mode == "rack" {
		if q1, qerr := b.rack.Stats(); qerr == nil && len(q1) == len(q0) {
			for i := range q1 {
				d := qdiscDelta{Worker: q1[i].Worker, Direction: "download", Packets: q1[i].Packets - q0[i].Packets,
					Bytes: q1[i].Bytes - q0[i].Bytes, Drops: q1[i].Drops - q0[i].Drops, Overlimits: q1[i].Overlimits - q0[i].Overlimits}
				if q1[i].Up {
					d.Direction = "upload"
				}
				if d.Worker < p.Workers {
					res.Qdisc = append(res.Qdisc, d)
					res.QdiscDrops += d.Drops
				}
			}
		}
	}
	if err != nil {
		return fail(err)
	}
	res.Verified = true
	for r, rep := range reps {
		if len(rep.TATs) != b.o.Iters {
			return fail(fmt.Errorf("rank %d reported %d timings, want %d", r, len(rep.TATs), b.o.Iters))
		}
		res.Verified = res.Verified && rep.Verified
		res.Retransmits += rep.Retransmits
		res.WorkerCPU = append(res.WorkerCPU, rep.cpu)
		res.WorkerCPUPerOp += rep.cpu.total() / float64(b.o.Warmup+b.o.Iters)
	}
	for it := 0; it < b.o.Iters; it++ {
		run := benchRun{}
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
	res.MedianTAT, res.MinTAT, res.MaxTAT = median(tats), tats[0], tats[len(tats)-1]
	res.GoodputMbit = float64(p.Bytes*8) / res.MedianTAT / 1e6
	if p.RateMbit > 0 {
		res.LinkEfficiency = res.GoodputMbit / p.RateMbit
	}
	return res
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// rankReport is what the driver keeps of one worker's JSON report.
type rankReport struct {
	TATs        []float64
	Verified    bool
	Retransmits uint64
	cpu         benchCPU
}

// runSystem starts one process per rank (one mpirun for mpi) and collects
// their reports.
func (b *benchDriver) runSystem(ctx context.Context, idx int, p benchPoint, fab *benchFabric) ([]rankReport, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	elements := strconv.FormatInt(p.Bytes/4, 10)
	iters, warmup := strconv.Itoa(b.o.Iters), strconv.Itoa(b.o.Warmup)
	rackMode := p.Mode == "rack"
	command := func(rank int, name string, args ...string) *exec.Cmd {
		if rackMode {
			return b.rack.Command(ctx, b.rack.WorkerNS(rank), name, args...)
		}
		return exec.CommandContext(ctx, name, args...)
	}
	hostOf := func(rank int) string {
		if rackMode {
			return b.rack.WorkerIP(rank)
		}
		return "127.0.0.1"
	}
	var cmds []*exec.Cmd
	switch p.System {
	case "switchml":
		verify := b.o.Verify && rackMode
		for r := 0; r < p.Workers; r++ {
			args := []string{"allreduce", "--controller", fab.controller, "--job", fmt.Sprintf("p%d", idx),
				"--rank", strconv.Itoa(r), "--workers", strconv.Itoa(p.Workers), "--elements", elements, "--dtype", "float32",
				"--iters", iters, "--warmup", warmup, "--lanes", strconv.Itoa(p.Lanes), "--window", strconv.Itoa(p.Window),
				"--packet-elements", strconv.Itoa(p.PacketElements), fmt.Sprintf("--verify=%v", verify), "--json"}
			if b.o.SMLTimeout > 0 {
				args = append(args, "--timeout", b.o.SMLTimeout.String())
			}
			if p.PacketElements > 256 {
				args = append(args, "--extended")
			}
			if rackMode {
				args = append(args, "--bind", hostOf(r))
			}
			cmds = append(cmds, command(r, b.exe, args...))
		}
	case "ring":
		addrs := make([]string, p.Workers)
		for r := range addrs {
			port := 41000 + r
			if !rackMode {
				var err error
				if port, err = freePort("tcp"); err != nil {
					return nil, err
				}
			}
			addrs[r] = fmt.Sprintf("%s:%d", hostOf(r), port)
		}
		for r := 0; r < p.Workers; r++ {
			cmds = append(cmds, command(r, b.exe, "ring", "--rank", strconv.Itoa(r), "--workers", strconv.Itoa(p.Workers),
				"--addrs", strings.Join(addrs, ","), "--elements", elements, "--iters", iters, "--warmup", warmup,
				fmt.Sprintf("--verify=%v", b.o.Verify), "--json"))
		}
	case "gloo":
		port, ifname := 29500+idx%1000, "eth0"
		if !rackMode {
			var err error
			if port, err = freePort("tcp"); err != nil {
				return nil, err
			}
			ifname = "lo"
		}
		for r := 0; r < p.Workers; r++ {
			cmds = append(cmds, command(r, b.o.Python, b.gloo, "--rank", strconv.Itoa(r), "--world", strconv.Itoa(p.Workers),
				"--master-addr", hostOf(0), "--master-port", strconv.Itoa(port), "--ifname", ifname,
				"--elements", elements, "--iters", iters, "--warmup", warmup))
		}
	case "mpi":
		cmds = append(cmds, exec.CommandContext(ctx, "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(p.Workers),
			"--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", b.mpi, elements, iters, warmup))
	default:
		return nil, fmt.Errorf("unknown system %q", p.System)
	}
	outs, err := runAll(ctx, cancel, cmds, b.o.Verbose, p.System)
	if err != nil {
		return nil, err
	}
	if p.System == "mpi" {
		var m struct {
			TATs     []float64   `json:"tat_s"`
			Verified bool        `json:"verified"`
			CPU      [][]float64 `json:"cpu"`
		}
		if err := json.Unmarshal(lastJSONLine(outs[0]), &m); err != nil {
			return nil, fmt.Errorf("mpirun output: %v: %q", err, outs[0])
		}
		reps := make([]rankReport, p.Workers)
		for r := range reps {
			// mpi reports the slowest rank's time per repetition.
			reps[r] = rankReport{TATs: m.TATs, Verified: m.Verified}
			if r < len(m.CPU) && len(m.CPU[r]) == 2 {
				reps[r].cpu = benchCPU{User: m.CPU[r][0], Sys: m.CPU[r][1]}
			}
		}
		return reps, nil
	}
	reps := make([]rankReport, len(outs))
	for r, out := range outs {
		var j allreduceReport
		if err := json.Unmarshal(lastJSONLine(out), &j); err != nil {
			return nil, fmt.Errorf("rank %d output: %v: %q", r, err, out)
		}
		if j.Error != "" {
			return nil, fmt.Errorf("rank %d: %s", r, j.Error)
		}
		reps[r] = rankReport{TATs: j.TATs, Verified: j.Verified, Retransmits: j.Retransmits, cpu: benchCPU{User: j.CPUUserS, Sys: j.CPUSysS}}
		if j.CPULoopUserS != nil && j.CPULoopSysS != nil {
			reps[r].cpu = benchCPU{User: *j.CPULoopUserS, Sys: *j.CPULoopSysS}
		}
		if !b.o.Verify || (p.System == "switchml" && !rackMode) {
			reps[r].Verified = false
		}
	}
	return reps, nil
}

func lastJSONLine(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && l[0] == '{' {
			return l
		}
	}
	return nil
}

// runAll runs the commands together and returns their stdouts. When one
// fails, the others get 15 s to finish before they are stopped: a missing
// rank would otherwise keep them waiting until the point's timeout.
// The commands must have been made with a context that cancel ends.
func runAll(ctx context.Context, cancel context.CancelFunc, cmds []*exec.Cmd, verbose bool, name string) ([][]byte, error) {
	outs := make([]bytes.Buffer, len(cmds))
	logs := make([]*prefixWriter, len(cmds))
	for i, c := range cmds {
		logs[i] = &prefixWriter{name: fmt.Sprintf("%s %d", name, i), echo: verbose}
		c.Stdout, c.Stderr = &outs[i], logs[i]
		c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
		c.WaitDelay = 5 * time.Second
		if err := c.Start(); err != nil {
			for _, s := range cmds[:i] {
				s.Process.Kill()
				s.Wait()
			}
			return nil, fmt.Errorf("start %s: %w", strings.Join(c.Args, " "), err)
		}
	}
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	var once sync.Once
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Wait()
			if errs[i] != nil {
				once.Do(func() { time.AfterFunc(15*time.Second, cancel) })
			}
		}()
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			msg := strings.TrimSpace(logs[i].all.String())
			if j := lastJSONLine(outs[i].Bytes()); j != nil {
				var e struct {
					Error string `json:"error"`
				}
				if json.Unmarshal(j, &e) == nil && e.Error != "" {
					msg = e.Error
				}
			}
			failed = append(failed, fmt.Sprintf("%s %d: %v: %s", name, i, err, tail(msg, 600)))
		}
	}
	if len(failed) > 0 {
		if err := ctx.Err(); err != nil && len(failed) == len(cmds) {
			failed = append(failed, "(stopped: "+err.Error()+")")
		}
		return nil, errors.New(strings.Join(failed, "\n"))
	}
	res := make([][]byte, len(cmds))
	for i := range outs {
		res[i] = outs[i].Bytes()
	}
	return res, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// benchFabric is a software switch and a controller, kept up across the
// points of one topology.
type benchFabric struct {
	sw, ctl         *child
	swDone, ctlDone chan struct{}
	controller      string
}

func exited(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (b *benchDriver) fabric(ctx context.Context, mode string) (*benchFabric, error) {
	cur := &b.loopFab
	if mode == "rack" {
		cur = &b.rackFab
	}
	if f := *cur; f != nil {
		if !exited(f.swDone) && !exited(f.ctlDone) {
			return f, nil
		}
		b.file.Fabric[mode+"-crashed"] = f.stop()
		*cur = nil
	}
	var host, p4rt, ctl, dp string
	if mode == "rack" {
		host = b.rack.SwitchIP()
		dp, p4rt, ctl = host+":48864", "127.0.0.1:9559", host+":50051"
	} else {
		ports := make([]int, 3)
		for i, net := range []string{"udp", "tcp", "tcp"} {
			var err error
			if ports[i], err = freePort(net); err != nil {
				return nil, err
			}
		}
		dp, p4rt, ctl = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1]), fmt.Sprintf("127.0.0.1:%d", ports[2])
	}
	start := func(name string, args ...string) (*child, chan struct{}, error) {
		c := &child{name: name}
		if mode == "rack" {
			c.cmd = b.rack.Command(context.WithoutCancel(ctx), b.rack.SwitchNS(), b.exe, args...)
		} else {
			c.cmd = exec.Command(b.exe, args...)
		}
		c.log.name, c.log.echo = name, b.o.Verbose
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.log
		if err := c.cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("start %s: %w", name, err)
		}
		done := make(chan struct{})
		go func() {
			c.cmd.Wait()
			close(done)
		}()
		return c, done, nil
	}
	f := &benchFabric{controller: ctl}
	var err error
	if f.sw, f.swDone, err = start("switch", "switch", "--dataplane", dp, "--p4rt", p4rt, "--max-elements", "2048"); err != nil {
		return nil, err
	}
	if f.ctl, f.ctlDone, err = start("controller", "controller", "--target", p4rt, "--listen", ctl, "--dataplane", dp); err != nil {
		f.stop()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(f.ctl.logs(), "controller ready") {
		if time.Now().After(deadline) || exited(f.ctlDone) || ctx.Err() != nil {
			logs := f.stop()
			return nil, fmt.Errorf("the controller did not come up: %v", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	*cur = f
	return f, nil
}

// stop interrupts the switch and the controller and returns their last log
// lines (the switch logs its counters when it stops).
func (f *benchFabric) stop() map[string]string {
	for _, c := range []struct {
		*child
		done chan struct{}
	}{{f.ctl, f.ctlDone}, {f.sw, f.swDone}} {
		if c.child == nil {
			continue
		}
		c.cmd.Process.Signal(os.Interrupt)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
		}
	}
	out := map[string]string{}
	for _, c := range []*child{f.sw, f.ctl} {
		if c != nil {
			out[c.name] = tail(strings.TrimSpace(c.logs()), 2000)
		}
	}
	return out
}

// procCPU reads a process's CPU time from /proc/<pid>/stat.
func procCPU(pid int) (benchCPU, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return benchCPU{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return benchCPU{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return benchCPU{}, false
	}
	// Fields 14 and 15 of stat; f starts at field 3.
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return benchCPU{}, false
	}
	const clkTck = 100 // USER_HZ, fixed at 100 on Linux
	return benchCPU{User: u / clkTck, Sys: st / clkTck}, true
}

type machineCPU struct{ total, idle, softirq float64 }

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	f := strings.Fields(firstLine(string(b)))
	var m machineCPU
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		m.total += x
		switch i {
		case 3, 4: // idle, iowait
			m.idle += x
		case 6:
			m.softirq += x
		}
	}
	return m
}

// since returns the busy and softirq fractions of all CPUs between m0 and m.
func (m machineCPU) since(m0 machineCPU) (busy, softirq float64) {
	d := m.total - m0.total
	if d <= 0 {
		return 0, 0
	}
	return (d - (m.idle - m0.idle)) / d, (m.softirq - m0.softirq) / d
}

// benchEnvironment records what the numbers depend on.
func benchEnvironment() map[string]any {
	env := map[string]any{
		"time":   time.Now().UTC().Format(time.RFC3339),
		"go":     runtime.Version(),
		"cpus":   runtime.NumCPU(),
		"goarch": runtime.GOARCH,
	}
	env["loadavg_start"] = loadAvg()
	if h, err := os.Hostname(); err == nil {
		env["hostname"] = h
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		env["kernel"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				env["cpu"] = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		env["memory"] = strings.Join(strings.Fields(firstLine(string(b)))[1:], " ")
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		env["commit"] = strings.TrimSpace(string(out))
	}
	return env
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
