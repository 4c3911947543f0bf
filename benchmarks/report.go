package benchmarks

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/wire"
)

var systemNames = map[string]string{"switchml": "SwitchML", "switchml-sparse": "SwitchML sparse", "switchml-auth": "SwitchML (--auth)", "switchml-afxdp": "SwitchML (AF_XDP)", "switchml-shm": "SwitchML (shared memory)", "switchml-tree": "SwitchML (2 levels)", "torch-switchml": "PyTorch-SwitchML", "gloo": "Gloo", "ring": "Ring (Go)", "mpi": "OpenMPI"}

// resultIndex finds results by their sweep and coordinates.
type resultIndex struct {
	f *resultsFile
}

func (x resultIndex) in(sweep, mode string) []result {
	var out []result
	for _, r := range x.f.Results {
		if r.Mode == mode && slices.Contains(r.Sweeps, sweep) {
			out = append(out, r)
		}
	}
	return out
}

// one returns the successful result of system among rs where key(r) == v.
func one[T comparable](rs []result, system string, key func(result) T, v T) (result, bool) {
	for _, r := range rs {
		if r.System == system && key(r) == v && r.Error == "" {
			return r, true
		}
	}
	return result{}, false
}

// values lists the distinct key values among rs, sorted.
func values[T int | int64 | float64](rs []result, key func(result) T) []T {
	var out []T
	for _, r := range rs {
		if !slices.Contains(out, key(r)) {
			out = append(out, key(r))
		}
	}
	slices.Sort(out)
	return out
}

func systemsIn(rs []result) []string {
	var out []string
	for _, s := range Systems {
		if slices.ContainsFunc(rs, func(r result) bool { return r.System == s }) {
			out = append(out, s)
		}
	}
	return out
}

func byWorkers(r result) int   { return r.Workers }
func byBytes(r result) int64   { return r.Bytes }
func byRate(r result) float64  { return r.RateMbit }
func byPacket(r result) int    { return r.PacketElements }
func byWindow(r result) int    { return r.Window }
func bySystem(r result) string { return r.System }

// systemTable writes a table with one row per value of key: each system's
// TAT and metric, then Gloo's and the ring's TAT over SwitchML's, and
// Gloo's over PyTorch-SwitchML's when it ran (the gain of a PyTorch user
// who changes the backend's name).
func systemTable[T int | int64 | float64](p func(string, ...any), rs []result, keyHeader, metricHeader, metricFormat string,
	metric func(result) float64, key func(result) T, label func(T) string) {
	systems := systemsIn(rs)
	torch := slices.Contains(systems, "torch-switchml")
	p("| %s |", keyHeader)
	for _, s := range systems {
		p(" %s TAT (s) | %s %s |", systemNames[s], systemNames[s], metricHeader)
	}
	p(" Gloo / SwitchML | Ring / SwitchML |")
	if torch {
		p(" Gloo / PyTorch-SwitchML |")
	}
	p("\n|---|")
	for range systems {
		p("---|---|")
	}
	p("---|---|")
	if torch {
		p("---|")
	}
	p("\n")
	for _, v := range values(rs, key) {
		p("| %s |", label(v))
		for _, s := range systems {
			r, ok := one(rs, s, key, v)
			p(" %s | %s |", cell(r, ok), cellf(r, ok, metricFormat, metric(r)))
		}
		sm, okS := one(rs, "switchml", key, v)
		gl, okG := one(rs, "gloo", key, v)
		rg, okR := one(rs, "ring", key, v)
		p(" %s | %s |", ratio(gl, sm, okG, okS), ratio(rg, sm, okR, okS))
		if torch {
			ts, okT := one(rs, "torch-switchml", key, v)
			p(" %s |", ratio(gl, ts, okG, okT))
		}
		p("\n")
	}
}

func cell(r result, ok bool) string { return cellf(r, ok, "%.3f", r.MedianTAT) }

func cellf(r result, ok bool, format string, v float64) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func ratio(base, ours result, ok1, ok2 bool) string {
	if !ok1 || !ok2 || ours.MedianTAT == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", base.MedianTAT/ours.MedianTAT)
}

// Report regenerates summary.md and the plots of an earlier run from
// dir/results.json, and returns the summary.
func Report(dir string) (string, error) {
	path := filepath.Join(dir, "results.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w (want the directory of a run: it holds results.json)", err)
	}
	var f resultsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return "", fmt.Errorf("%s is not a results file of the suite: %w", path, err)
	}
	for i := range f.Results {
		// A jobs-sweep point's job count has no key of its own in the
		// file: "jobs" holds the jobs' results, one each.
		if r := &f.Results[i]; r.Jobs == 0 && len(r.JobResults) > 0 {
			r.Jobs = len(r.JobResults)
		}
	}
	return writeReport(dir, &f)
}

// writeReport writes summary.md and the plots, and returns the summary.
func writeReport(dir string, f *resultsFile) (string, error) {
	w := &reportWriter{dir: dir, f: f, x: resultIndex{f}, o: f.Options, env: f.Environment}
	w.header()
	goals(&w.b, w.x, w.o)
	torchTable(&w.b, f.Results)
	for _, section := range []func() error{w.workersSweep, w.jobsSweep, w.sizesSweep, w.ratesSweep, w.knobSweeps, w.collectivesSweep} {
		if err := section(); err != nil {
			return "", err
		}
	}
	if err := w.sparse(); err != nil {
		return "", err
	}
	w.loopback()
	w.cpuPerByte()
	authTable(w.p, f.Results, w.o)
	w.limits()
	w.failures()
	s := w.b.String()
	return s, os.WriteFile(filepath.Join(dir, "summary.md"), []byte(s), 0o644)
}

// reportWriter builds a run's summary.md, a section at a time, and writes
// the plots beside it.
type reportWriter struct {
	dir string
	f   *resultsFile
	x   resultIndex
	o   Options
	env map[string]any
	b   strings.Builder
}

func (w *reportWriter) p(format string, args ...any) { fmt.Fprintf(&w.b, format, args...) }

// header is the run's environment, method and rack ports.
func (w *reportWriter) header() {
	p, o, env := w.p, w.o, w.env
	p("# Allreduce benchmark: %s\n\n", o.Name)
	p("Run %v on %v (%v CPUs, Linux %v, %v), commit %.12v.\n", env["time"], env["cpu"], env["cpus"], env["kernel"], env["go"], env["commit"])
	p("Command: `%v`\n\n", env["command"])
	p("Load average (all users of this shared machine) at the start: %v, at the end: %v.\n\n", env["loadavg_start"], env["loadavg_end"])
	tensor := "one float32 tensor"
	if dt := o.dtypeName(); dt != "float32" {
		tensor = fmt.Sprintf("one %s tensor (%d bytes a value: sizes are in bytes)", dt, dtypeSize(dt))
	}
	p("Every figure is the median of %d timed allreduces after %d warm-up, of "+tensor+"; the TAT of a repetition is the slowest worker's (all start together after a barrier). "+
		"Goodput = tensor bits / TAT; link efficiency = goodput / port rate. Speedup = baseline TAT / SwitchML TAT. "+
		"Rack: one network namespace per worker, veth ports to a bridge in the switch's namespace, each port shaped by tbf in both directions. "+
		"SwitchML runs the software switch and the controller in the switch's namespace. All files: results.json (every repetition, per-worker times, CPU, tbf counters).\n\n", o.Iters, o.Warmup)
	if ports, ok := env["ports"].([]any); ok {
		p("| port rate | tbf burst | tbf limit | UDP probe (frames) |\n|---|---|---|---|\n")
		for _, e := range ports {
			m, _ := e.(map[string]any)
			var frame any = "–"
			switch probe := m["udp_probe"].(type) {
			case rack.UDPProbe:
				frame = fmt.Sprintf("%.1f", probe.FrameMbit)
			case map[string]any: // read back from results.json
				frame = fmt.Sprintf("%.1f", probe["frame_mbit"])
			}
			p("| %v Mbit/s | %v B | %v B | %v Mbit/s |\n", plain(m["rate_mbit"]), plain(m["tbf_burst_bytes"]), plain(m["tbf_limit_bytes"]), frame)
		}
		p("\n")
	}
	w.wireTable()
}

// wireTable says what each system reduced: the element type and, for the
// SwitchML systems, the wire width asked for and the widths the workers
// reported; and which systems the type left out. Runs recorded before
// the suite had a choice of type say neither, and have no table.
func (w *reportWriter) wireTable() {
	p, o, rs := w.p, w.o, w.f.Results
	skipped, _ := w.env["dtype_skipped"].(map[string]any) // as read back from results.json
	if m, ok := w.env["dtype_skipped"].(map[string]string); ok {
		skipped = map[string]any{}
		for k, v := range m {
			skipped[k] = v
		}
	}
	if o.DType == "" && o.WireBits == 0 && len(skipped) == 0 && !slices.ContainsFunc(rs, func(r result) bool { return len(r.WireBitsUsed) > 0 }) {
		return
	}
	asked := "0 (the type's default: 16 bits for float16 and bfloat16, 32 for float32)"
	if o.WireBits != 0 {
		asked = strconv.Itoa(o.WireBits)
	}
	p("## Data type and wire width\n\n")
	p("--dtype %s, --wire-bits %s. The SwitchML systems carry float values at the width asked for (int32 always at 32 bits, the block-sparse mode at 32); "+
		"the width used is what the workers reported (PyTorch-SwitchML: what the library's counters show, under 3 bytes sent per value reduced being 16 bits). "+
		"The other systems send their type as it is.\n\n", o.dtypeName(), asked)
	p("| system | dtype | wire bits asked | wire bits used |\n|---|---|---|---|\n")
	for _, s := range systemsIn(rs) {
		var dtypes []string
		var used []string
		for _, r := range rs {
			if r.System != s {
				continue
			}
			if d := r.dtypeName(); !slices.Contains(dtypes, d) {
				dtypes = append(dtypes, d)
			}
			for _, b := range r.WireBitsUsed {
				if v := strconv.Itoa(b); !slices.Contains(used, v) {
					used = append(used, v)
				}
			}
		}
		ask, use := "–", "– (its type)"
		if runsOnSwitch(s) {
			ask, use = strconv.Itoa(o.WireBits), "not reported"
			if len(used) > 0 {
				use = strings.Join(used, ", ")
			}
		}
		p("| %s | %s | %s | %s |\n", systemNames[s], strings.Join(dtypes, ", "), ask, use)
	}
	for _, s := range Systems {
		if why, ok := skipped[s]; ok {
			p("| %s | skipped: %v | | |\n", systemNames[s], why)
		}
	}
	p("\n")
}

// tatHeader writes a table's header rows: the leading columns, one TAT
// column per system, then the trailing columns.
func tatHeader(p func(string, ...any), systems, lead, tail []string) {
	cols := slices.Clone(lead)
	for _, s := range systems {
		cols = append(cols, systemNames[s]+" TAT (s)")
	}
	cols = append(cols, tail...)
	p("| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
}

// workersSweep is the rack's TAT against workers, with its plots.
func (w *reportWriter) workersSweep() error {
	p, o, x, dir := w.p, w.o, w.x, w.dir
	if rs := x.in("workers", "rack"); len(rs) > 0 {
		p("## Rack: TAT against workers (%s, %g Mbit/s ports, SwitchML k=%d, W=%d, %d lanes)\n\n", FormatSize(o.Size), o.Rate, o.PacketElements, o.Window, o.Lanes)
		systems := systemsIn(rs)
		tatHeader(p, systems, []string{"workers"}, []string{"SwitchML efficiency", "Gloo / SwitchML", "Ring / SwitchML",
			"ideal ring / SwitchML", "SwitchML retransmits", "tbf drops"})
		for _, n := range values(rs, byWorkers) {
			sm, okS := one(rs, "switchml", byWorkers, n)
			gl, okG := one(rs, "gloo", byWorkers, n)
			rg, okR := one(rs, "ring", byWorkers, n)
			p("| %d |", n)
			for _, s := range systems {
				r, ok := one(rs, s, byWorkers, n)
				p(" %s |", cell(r, ok))
			}
			p(" %s | %s | %s | %.2fx | %s | %s |\n", cellf(sm, okS, "%.3f", sm.LinkEfficiency), ratio(gl, sm, okG, okS), ratio(rg, sm, okR, okS),
				2*float64(n-1)/float64(n), cellf(sm, okS, "%.0f", float64(sm.Retransmits)), cellf(sm, okS, "%.0f", float64(sm.QdiscDrops)))
		}
		p("\n![TAT against workers](tat_vs_workers.png) ![speedup against workers](speedup_vs_workers.png)\n\n")
		if err := plotSweep(filepath.Join(dir, "tat_vs_workers.png"), "TAT against workers ("+FormatSize(o.Size)+fmt.Sprintf(", %g Mbit/s ports)", o.Rate),
			"workers", "median TAT (s)", rs, func(r result) float64 { return float64(r.Workers) }, func(r result) float64 { return r.MedianTAT }, false); err != nil {
			return err
		}
		if err := plotSpeedup(filepath.Join(dir, "speedup_vs_workers.png"), rs, o); err != nil {
			return err
		}
	}
	return nil
}

// jobsSweep is the tree table and the concurrent jobs, with their plot.
func (w *reportWriter) jobsSweep() error {
	p, o, x, dir := w.p, w.o, w.x, w.dir
	treeTable(p, x.in("workers", "rack"), o)
	if rs := x.in("jobs", "rack"); len(rs) > 0 {
		jobsTable(p, rs, o)
		p("\n![aggregate goodput against concurrent jobs](goodput_vs_jobs.png)\n\n")
		if err := plotSweep(filepath.Join(dir, "goodput_vs_jobs.png"), fmt.Sprintf("Concurrent jobs (%d ranks each, %s, %g Mbit/s ports)", o.BaseWorkers, FormatSize(o.TuneSize), o.Rate),
			"jobs at once", "goodput per port, all jobs (Mbit/s)", rs, func(r result) float64 { return float64(r.Jobs) },
			func(r result) float64 { return r.AggregateGoodputMbit }, false); err != nil {
			return err
		}
	}
	return nil
}

// sizesSweep is goodput against tensor size, with its plot.
func (w *reportWriter) sizesSweep() error {
	p, o, x, dir := w.p, w.o, w.x, w.dir
	if rs := x.in("sizes", "rack"); len(rs) > 0 {
		p("## Rack: goodput against tensor size (%d workers, %g Mbit/s ports)\n\n", o.BaseWorkers, o.Rate)
		systemTable(p, rs, "size", "Mbit/s", "%.1f", func(r result) float64 { return r.GoodputMbit }, byBytes, FormatSize)
		p("\n![goodput against size](goodput_vs_size.png)\n\n")
		if err := plotSweep(filepath.Join(dir, "goodput_vs_size.png"), fmt.Sprintf("Goodput against tensor size (%d workers, %g Mbit/s ports)", o.BaseWorkers, o.Rate),
			"tensor size (MiB)", "goodput per worker (Mbit/s)", rs, func(r result) float64 { return float64(r.Bytes) / (1 << 20) },
			func(r result) float64 { return r.GoodputMbit }, true); err != nil {
			return err
		}
	}
	return nil
}

// ratesSweep is link efficiency against port rate, with its plot.
func (w *reportWriter) ratesSweep() error {
	p, o, x, dir := w.p, w.o, w.x, w.dir
	if rs := x.in("rates", "rack"); len(rs) > 0 {
		p("## Rack: port rate (%d workers, %s)\n\n", o.BaseWorkers, FormatSize(o.TuneSize))
		systemTable(p, rs, "rate (Mbit/s)", "efficiency", "%.3f", func(r result) float64 { return r.LinkEfficiency }, byRate,
			func(rate float64) string { return fmt.Sprintf("%g", rate) })
		p("\n![link efficiency against rate](efficiency_vs_rate.png)\n\n")
		if err := plotSweep(filepath.Join(dir, "efficiency_vs_rate.png"), fmt.Sprintf("Link efficiency against port rate (%d workers, %s)", o.BaseWorkers, FormatSize(o.TuneSize)),
			"port rate (Mbit/s)", "goodput / port rate", rs, func(r result) float64 { return r.RateMbit },
			func(r result) float64 { return r.LinkEfficiency }, false); err != nil {
			return err
		}
	}
	return nil
}

// knobSweeps are SwitchML's packet size and window sweeps, with plots.
func (w *reportWriter) knobSweeps() error {
	p, o, x, dir := w.p, w.o, w.x, w.dir
	for _, k := range []struct {
		sweep, title, col, file string
		key                     func(result) int
	}{
		{"packet", "values per packet", "k (payload bytes)", "efficiency_vs_packet_elements.png", byPacket},
		{"window", "window (packets in flight per lane)", "window", "efficiency_vs_window.png", byWindow},
	} {
		rs := x.in(k.sweep, "rack")
		if len(rs) == 0 {
			continue
		}
		p("## SwitchML: %s (%d workers, %s, %g Mbit/s ports)\n\n", k.title, o.BaseWorkers, FormatSize(o.TuneSize), o.Rate)
		p("| %s | TAT (s) | min–max (s) | efficiency | retransmits | tbf drops | switch CPU / TAT | machine busy |\n|---|---|---|---|---|---|---|---|\n", k.col)
		for _, v := range values(rs, k.key) {
			r, ok := one(rs, "switchml", k.key, v)
			label := fmt.Sprint(v)
			if k.sweep == "packet" {
				label = fmt.Sprintf("%d (%d B)", v, 4*v)
			}
			if !ok {
				p("| %s | failed | | | | | | |\n", label)
				continue
			}
			p("| %s | %.3f | %.3f–%.3f | %.3f | %d | %d | %s | %.0f%% |\n", label, r.MedianTAT, r.MinTAT, r.MaxTAT, r.LinkEfficiency,
				r.Retransmits, r.QdiscDrops, switchShare(r), 100*r.MachineBusy)
		}
		p("\n![%s](%s)\n\n", k.title, k.file)
		if err := plotSweep(filepath.Join(dir, k.file), "SwitchML link efficiency against "+k.title, k.col, "goodput / port rate", rs,
			func(r result) float64 { return float64(k.key(r)) }, func(r result) float64 { return r.LinkEfficiency }, true); err != nil {
			return err
		}
	}
	return nil
}

// loopback is the CPU cost of every system on 127.0.0.1.
func (w *reportWriter) loopback() {
	p, o, x, env := w.p, w.o, w.x, w.env
	if rs := x.in("loopback", "loopback"); len(rs) > 0 {
		p("## Loopback: CPU cost (%d workers on 127.0.0.1, %s)\n\n", o.LoopbackWorkers, FormatSize(o.LoopbackSize))
		p("Here every process shares the machine's %v CPUs, so this measures CPU per byte, not the network. "+
			"Worker CPU is that of the allreduce calls alone (warm-up included; input generation and verification left out) for every system. "+
			"OpenMPI uses its TCP transport on lo.\n\n", env["cpus"])
		p("Worker CPU-s per GiB is one worker's CPU per GiB of its tensor, the mean over the workers; CPU-s per GiB reduced adds the switch's and divides by the tensor once.\n\n")
		p("| system | TAT (s) | min–max (s) | goodput (Mbit/s) | worker CPU per allreduce (s, all workers) | switch CPU per allreduce (s) | worker CPU-s per GiB | CPU s per GiB reduced | machine busy | TAT / SwitchML | transports |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		sm, okS := one(rs, "switchml", bySystem, "switchml")
		for _, s := range systemsIn(rs) {
			r, ok := one(rs, s, bySystem, s)
			if !ok {
				msg := "failed"
				for _, e := range rs {
					if e.System == s {
						msg = firstLine(e.Error)
					}
				}
				p("| %s | %s | | | | | | | | | |\n", systemNames[s], strings.ReplaceAll(msg, "|", "/"))
				continue
			}
			cpu := r.WorkerCPUPerOp + r.SwitchCPUPerOp
			sw := "–"
			if r.SwitchCPU != nil {
				sw = fmt.Sprintf("%.3f", r.SwitchCPUPerOp)
			}
			gib := float64(r.Bytes) / (1 << 30)
			p("| %s | %.3f | %.3f–%.3f | %.0f | %.3f | %s | %.2f | %.2f | %.0f%% | %s | %s |\n", systemNames[s], r.MedianTAT, r.MinTAT, r.MaxTAT, r.GoodputMbit,
				r.WorkerCPUPerOp, sw, r.WorkerCPUPerOp/float64(max(r.Workers, 1))/gib, cpu/gib, 100*r.MachineBusy, ratio(r, sm, ok, okS), transportsSummary(r.Transports))
		}
		p("\n")
	}
}

// cpuPerByte is every system's CPU per byte on the rack's workers sweep.
func (w *reportWriter) cpuPerByte() {
	p, x := w.p, w.x
	if rs := x.in("workers", "rack"); len(rs) > 0 {
		p("## Rack: CPU per byte\n\n")
		p("CPU-seconds per GiB reduced, per worker: one worker's CPU during its allreduce calls (warm-up included) over the bytes of its tensor, the mean over the workers. " +
			"Switch packets per core-second: the packets the workers sent to the switch plus as many results, over the switch's CPU time (both directions counted, as a switch port would).\n\n")
		p("| system | workers | TAT (s) | worker CPU-s per GiB | switch CPU per allreduce (s) | switch packets per core-second | transports |\n|---|---|---|---|---|---|---|\n")
		for _, r := range rs {
			if r.Error != "" || r.Bytes == 0 || r.Workers == 0 {
				continue
			}
			perGiB := r.WorkerCPUPerOp / float64(r.Workers) / (float64(r.Bytes) / (1 << 30))
			sw, pps := "–", "–"
			if r.SwitchCPU != nil {
				sw = fmt.Sprintf("%.3f", r.SwitchCPUPerOp)
				if t := r.SwitchCPU.total(); t > 0 && r.Packets > 0 {
					pps = fmt.Sprintf("%.2f M", 2*float64(r.Packets)/t/1e6)
				}
			}
			p("| %s | %d | %.3f | %.2f | %s | %s | %s |\n", systemNames[r.System], r.Workers, r.MedianTAT, perGiB, sw, pps, transportsSummary(r.Transports))
		}
		p("\n")
	}
}

// limits is where SwitchML's time goes on the rack (with --auth too: its
// own CPU cost).
func (w *reportWriter) limits() {
	p, f, env := w.p, w.f, w.env
	var sms []result
	for _, r := range f.Results {
		if (r.System == "switchml" || r.System == "switchml-auth") && r.Mode == "rack" && r.Error == "" {
			sms = append(sms, r)
		}
	}
	if len(sms) > 0 {
		p("## SwitchML on the rack: what limits it\n\n")
		p("Switch CPU / TAT is the software switch's CPU time during the point over the time spent in timed and warm-up allreduces (1.0 = one core busy). "+
			"Machine busy and softirq are fractions of all %v CPUs over the whole point (verification and start-up included). "+
			"Drops are tbf queue overflows (tc -s qdisc), upload = worker to bridge, download = bridge to worker.\n\n", env["cpus"])
		p("| point | efficiency | retransmits | switch CPU / TAT | worker CPU per allreduce (s, all) | machine busy | softirq | tbf drops up | tbf drops down |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range sms {
			var up, down uint64
			for _, q := range r.Qdisc {
				if q.Direction == "upload" {
					up += q.Drops
				} else {
					down += q.Drops
				}
			}
			p("| %s | %.3f | %d | %s | %.2f | %.0f%% | %.0f%% | %d | %d |\n", strings.Join(strings.Fields(r.Point.String())[1:], " "), r.LinkEfficiency, r.Retransmits,
				switchShare(r), r.WorkerCPUPerOp, 100*r.MachineBusy, 100*r.MachineSoftirq, up, down)
		}
		p("\n")
	}
}

// failures lists the points that did not run and the systems skipped.
func (w *reportWriter) failures() {
	p, f, env := w.p, w.f, w.env
	var failed []result
	for _, r := range f.Results {
		if r.Error != "" {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		p("## Points that did not run\n\n")
		for _, r := range failed {
			p("- %s: %s\n", r.Point, strings.ReplaceAll(firstLine(r.Error), "\n", " "))
		}
		p("\n")
	}
	if w, ok := env["gloo_skipped"]; ok {
		p("Gloo skipped: %v\n\n", w)
	}
	if w, ok := env["mpi_skipped"]; ok {
		p("OpenMPI skipped: %v\n\n", w)
	}
}

// switchShare is the switch's CPU time per allreduce over the median TAT:
// the share of one core the switch needed.
func switchShare(r result) string {
	if r.SwitchCPU == nil || r.MedianTAT == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", r.SwitchCPUPerOp/r.MedianTAT)
}

func goals(b *strings.Builder, x resultIndex, o Options) {
	rs := x.in("workers", "rack")
	if len(rs) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	p("## Goals (rack, %s, %g Mbit/s, k=%d)\n\n| goal | target | measured | met |\n|---|---|---|---|\n", FormatSize(o.Size), o.Rate, o.PacketElements)
	if sm, ok := one(rs, "switchml", byWorkers, 4); ok {
		p("| SwitchML link efficiency, 4 workers | ≥ 0.88 | %.3f | %s |\n", sm.LinkEfficiency, met(sm.LinkEfficiency >= 0.88))
	}
	for _, g := range []struct {
		n      int
		target float64
	}{{4, 1.4}, {8, 2.0}} {
		sm, ok1 := one(rs, "switchml", byWorkers, g.n)
		gl, ok2 := one(rs, "gloo", byWorkers, g.n)
		if ok1 && ok2 {
			s := gl.MedianTAT / sm.MedianTAT
			p("| speedup over Gloo, %d workers | ≥ %.1fx | %.2fx (%.2f s / %.2f s) | %s |\n", g.n, g.target, s, gl.MedianTAT, sm.MedianTAT, met(s >= g.target))
		}
	}
	s2, ok2 := one(rs, "switchml", byWorkers, 2)
	s8, ok8 := one(rs, "switchml", byWorkers, 8)
	if ok2 && ok8 {
		d := s8.MedianTAT/s2.MedianTAT - 1
		p("| SwitchML TAT, 8 workers against 2 | within 10%% | %+.1f%% (%.2f s / %.2f s) | %s |\n", 100*d, s8.MedianTAT, s2.MedianTAT, met(math.Abs(d) <= 0.10))
	}
	p("\n")
}

// torchTable compares PyTorch over switchml with what a PyTorch user has
// (Gloo) and with the library called from Go at the same points: the
// first ratio is the gain of changing the backend's name, the second what
// the Python layer costs.
func torchTable(b *strings.Builder, rs []result) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	same := func(sys string, t result) (result, bool) {
		for _, r := range rs {
			if r.System == sys && r.Error == "" && r.Mode == t.Mode && r.Workers == t.Workers && r.Bytes == t.Bytes && r.RateMbit == t.RateMbit {
				return r, true
			}
		}
		return result{}, false
	}
	header := false
	for _, t := range rs {
		if t.System != "torch-switchml" || t.Error != "" || t.Op != "" {
			continue // the collectives sweep's other calls have a table of their own
		}
		if !header {
			p("## PyTorch: the switchml backend against Gloo\n\n")
			p("The same script (`torch_allreduce.py`) over both backends; SwitchML is the Go command on the same switch. Worker CPU is that of the allreduce calls alone, all workers.\n\n")
			p("| point | PyTorch-SwitchML TAT (s) | Gloo TAT (s) | SwitchML TAT (s) | Gloo / PyTorch-SwitchML | PyTorch-SwitchML / SwitchML | worker CPU per allreduce, PyTorch-SwitchML / SwitchML (s) |\n|---|---|---|---|---|---|---|\n")
			header = true
		}
		gl, okG := same("gloo", t)
		sm, okS := same("switchml", t)
		where := t.Mode
		if t.RateMbit > 0 {
			where = fmt.Sprintf("%s %gMbit/s", t.Mode, t.RateMbit)
		}
		p("| %s n=%d %s | %.3f | %s | %s | %s | %s | %.2f / %s |\n", where, t.Workers, FormatSize(t.Bytes), t.MedianTAT, cell(gl, okG), cell(sm, okS),
			ratio(gl, t, okG, true), ratio(t, sm, true, okS), t.WorkerCPUPerOp, cellf(sm, okS, "%.2f", sm.WorkerCPUPerOp))
	}
	if header {
		p("\n")
	}
}

// treeTable sets two levels of switches beside one switch and Gloo, from
// the workers sweep of a rack built as a tree.
func treeTable(p func(string, ...any), rs []result, o Options) {
	if !slices.ContainsFunc(rs, func(r result) bool { return r.System == "switchml-tree" }) {
		return
	}
	p("## Rack: two levels of switches against one (%s, %g Mbit/s ports, %d leaves)\n\n", FormatSize(o.Size), o.Rate, o.RackLeaves)
	p("Every system ran on the same tree: workers split evenly over the leaves, each leaf joined to the spine by a trunk of (workers per leaf) times the port rate. ")
	p("SwitchML on one switch aggregates at the spine, through the leaves' bridges; with two levels each leaf's switch aggregates its workers and the spine the leaves.\n\n")
	p("| workers | one switch TAT (s) | two levels TAT (s) | two levels / one switch | Gloo TAT (s) | Gloo / two levels | two levels' efficiency | two levels' retransmits |\n|---|---|---|---|---|---|---|---|\n")
	for _, n := range values(rs, byWorkers) {
		one1, ok1 := one(rs, "switchml", byWorkers, n)
		two, ok2 := one(rs, "switchml-tree", byWorkers, n)
		gl, okG := one(rs, "gloo", byWorkers, n)
		if !ok2 {
			continue
		}
		p("| %d | %s | %s | %s | %s | %s | %s | %s |\n", n, cell(one1, ok1), cell(two, ok2), ratio(one1, two, ok1, ok2),
			cell(gl, okG), ratio(gl, two, okG, ok2), cellf(two, ok2, "%.3f", two.LinkEfficiency), cellf(two, ok2, "%.0f", float64(two.Retransmits)))
	}
	p("\n")
}

// jobsTable shows concurrent jobs: each job's TAT, their sum of goodputs
// and how evenly they shared the ports.
func jobsTable(p func(string, ...any), rs []result, o Options) {
	p("## Rack: concurrent jobs on one switch (%d ranks each, %s int32, %g Mbit/s ports)\n\n", o.BaseWorkers, FormatSize(o.TuneSize), o.Rate)
	p("Rank r of every job runs in worker r's namespace, so the jobs share each port. Each job sums its own data (a seed per job), checked exactly. ")
	p("Goodput per port, all jobs: every job's timed tensors over the span from the first job's first timed call to the last job's last (the barriers and checks between calls count, so it is a lower bound). ")
	p("Fairness is Jain's index of the jobs' goodputs (1 = equal shares); overlap is the part of the span during which every job was in its timed calls.\n\n")
	p("| system | jobs | each job's median TAT (s) | goodput per port, all jobs (Mbit/s) | efficiency | fairness | overlap | sums exact |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if r.Error != "" {
			p("| %s | %d | %s | | | | | |\n", systemNames[r.System], r.Jobs, r.Error)
			continue
		}
		tats := make([]string, len(r.JobResults))
		exact := r.Verified
		for i, j := range r.JobResults {
			tats[i] = fmt.Sprintf("%.3f", j.MedianTAT)
			exact = exact && j.Verified
		}
		p("| %s | %d | %s | %.1f | %.3f | %.3f | %.2f | %v |\n", systemNames[r.System], r.Jobs, strings.Join(tats, ", "),
			r.AggregateGoodputMbit, r.LinkEfficiency, r.Fairness, r.Overlap, exact)
	}
	p("\n")
}

// transportsSummary condenses the workers' and the switch's transports
// ("udp" x4, "switch:afxdp") for a table cell.
func transportsSummary(ts []string) string {
	if len(ts) == 0 {
		return "–"
	}
	count := map[string]int{}
	var order []string
	for _, t := range ts {
		if count[t] == 0 {
			order = append(order, t)
		}
		count[t]++
	}
	var parts []string
	for _, t := range order {
		if strings.HasPrefix(t, "switch:") {
			parts = append(parts, t)
		} else {
			parts = append(parts, fmt.Sprintf("%d workers %s", count[t], t))
		}
	}
	return strings.Join(parts, ", ")
}

// authTable sets SwitchML with --auth beside plain SwitchML at the same
// points: TAT, worker CPU per byte and switch CPU per allreduce, and the
// ratios (--auth over plain). It names the header each ran with, since
// --auth needs the extended one and plain SwitchML may have run with the
// compatible one.
func authTable(p func(string, ...any), rs []result, o Options) {
	same := func(t result) (result, bool) {
		for _, r := range rs {
			if r.System == "switchml" && r.Error == "" && r.Mode == t.Mode && r.Workers == t.Workers && r.Bytes == t.Bytes &&
				r.RateMbit == t.RateMbit && r.PacketElements == t.PacketElements && r.Window == t.Window && r.Lanes == t.Lanes && r.Jobs == t.Jobs {
				return r, true
			}
		}
		return result{}, false
	}
	header := func(r result) string {
		if extendedHeader(&o, r.Point) {
			return fmt.Sprintf("extended (%d B)", wire.ExtendedLen)
		}
		return fmt.Sprintf("compatible (%d B)", wire.CompatLen)
	}
	perGiB := func(r result) float64 {
		return r.WorkerCPUPerOp / float64(max(r.Workers, 1)) / (float64(r.Bytes) / (1 << 30))
	}
	shown := false
	for _, a := range rs {
		if a.System != "switchml-auth" || a.Error != "" {
			continue
		}
		if !shown {
			p("## SwitchML with an authenticated data plane (--auth) against without\n\n")
			p("SwitchML (--auth): the switch, the controller and every worker run with --auth, so each packet carries a %d-byte HMAC-SHA256 tag under the job's key, which the switch checks, and each result a tag the workers check. "+
				"Worker CPU-s per GiB is one worker's CPU during its allreduce calls (warm-up included) per GiB of its tensor, the mean over the workers; switch CPU is the software switch's per allreduce (warm-up included). "+
				"Ratios are --auth over plain.\n\n", wire.TagLen)
			p("| point | header (plain / --auth) | TAT plain (s) | TAT --auth (s) | TAT ratio | worker CPU-s per GiB plain | --auth | ratio | switch CPU per allreduce plain (s) | --auth (s) | ratio | retransmits plain / --auth | machine busy plain / --auth |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			shown = true
		}
		where := a.Mode
		if a.RateMbit > 0 {
			where = fmt.Sprintf("%s %gMbit/s", a.Mode, a.RateMbit)
		}
		label := fmt.Sprintf("%s n=%d %s k=%d", where, a.Workers, FormatSize(a.Bytes), a.PacketElements)
		sm, ok := same(a)
		if !ok {
			p("| %s | – / %s | – | %.3f | – | – | %.2f | – | – | %s | – | – / %d | – / %.0f%% |\n", label, header(a), a.MedianTAT, perGiB(a), switchCPU(a), a.Retransmits, 100*a.MachineBusy)
			continue
		}
		swRatio := "–"
		if sm.SwitchCPU != nil && a.SwitchCPU != nil && sm.SwitchCPUPerOp > 0 {
			swRatio = fmt.Sprintf("%.2fx", a.SwitchCPUPerOp/sm.SwitchCPUPerOp)
		}
		p("| %s | %s / %s | %.3f | %.3f | %s | %.2f | %.2f | %.2fx | %s | %s | %s | %d / %d | %.0f%% / %.0f%% |\n", label, header(sm), header(a),
			sm.MedianTAT, a.MedianTAT, ratio(a, sm, true, true), perGiB(sm), perGiB(a), perGiB(a)/perGiB(sm),
			switchCPU(sm), switchCPU(a), swRatio, sm.Retransmits, a.Retransmits, 100*sm.MachineBusy, 100*a.MachineBusy)
	}
	if shown {
		p("\n")
	}
}

// switchCPU is the switch's CPU time per allreduce, for a table cell.
func switchCPU(r result) string {
	if r.SwitchCPU == nil {
		return "–"
	}
	return fmt.Sprintf("%.3f", r.SwitchCPUPerOp)
}

// plain writes a number read back from results.json (a float64) as it was
// written, 2625000 rather than 2.625e+06.
func plain(v any) any {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return v
}
