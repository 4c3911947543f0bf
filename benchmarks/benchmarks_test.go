package benchmarks

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks/rack"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"64MiB": 64 << 20, "1MiB": 1 << 20, "512KiB": 512 << 10, "1GiB": 1 << 30, "1000": 1000, "0.5MiB": 512 << 10, "10B": 8} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1MiB", "2B", "MiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
	for b, want := range map[int64]string{64 << 20: "64MiB", 1 << 30: "1GiB", 512 << 10: "512KiB", 1000: "1000B", 3 << 19: "1536KiB"} {
		s := FormatSize(b)
		if back, err := ParseSize(s); s != want || err != nil || back != b {
			t.Errorf("FormatSize(%d) = %q, read back as %d, %v; want %q", b, s, back, err, want)
		}
	}
}

// The default run is every sweep of every system (mpi on loopback only).
func TestPlanDefault(t *testing.T) {
	o := DefaultOptions()
	count := map[string]int{}
	for _, p := range Plan(&o) {
		count[p.Mode+"/"+p.System]++
	}
	// SwitchML: 3 worker counts + 3 more sizes + 2 more rates + 2 more
	// packet sizes + 2 more windows; the others have no packet or window
	// sweep.
	want := map[string]int{"rack/switchml": 12, "rack/gloo": 8, "rack/ring": 8, "loopback/switchml": 1, "loopback/gloo": 1, "loopback/ring": 1, "loopback/mpi": 1}
	if !maps.Equal(count, want) {
		t.Errorf("points per system: %v, want %v", count, want)
	}
}

func TestPlan(t *testing.T) {
	o := Options{
		Modes: []string{"rack", "loopback"}, Systems: Systems,
		Sweeps:  []string{"workers", "sizes", "rates", "packet", "window", "loopback"},
		Workers: []int{2, 4, 8}, Size: 64 << 20, Sizes: []int64{1 << 20, 64 << 20}, TuneSize: 16 << 20,
		Rate: 200, Rates: []float64{100, 200}, BaseWorkers: 4, PacketElements: 256, PacketSweep: []int{64, 256},
		Window: 64, Windows: []int{16, 64}, Lanes: 4, LoopbackWorkers: 4, LoopbackSize: 4 << 20,
	}
	points := Plan(&o)
	seen := map[string]bool{}
	count := map[string]int{}
	for i, p := range points {
		if seen[p.key()] {
			t.Errorf("point %s planned twice", p)
		}
		seen[p.key()] = true
		count[p.Mode+"/"+p.System]++
		if p.System == "mpi" && p.Mode == "rack" {
			t.Errorf("mpi planned on the rack")
		}
		if runsOnSwitch(p.System) != (p.PacketElements != 0 && p.Window != 0 && p.Lanes != 0) {
			t.Errorf("%s: SwitchML knobs k=%d W=%d L=%d on a system that runs on the switch: %v", p, p.PacketElements, p.Window, p.Lanes, runsOnSwitch(p.System))
		}
		if i > 0 && points[i-1].Mode == "loopback" && p.Mode == "rack" {
			t.Errorf("rack point %s after a loopback point", p)
		}
	}
	// SwitchML on the rack: 3 worker counts + 1MiB + 16MiB (rates, packet,
	// window at 200) + 16MiB at 100 + k=64 + W=16 = 8.
	// PyTorch over switchml has the points of PyTorch over Gloo.
	if count["rack/switchml"] != 8 || count["rack/gloo"] != 6 || count["rack/torch-switchml"] != 6 || count["loopback/mpi"] != 1 || count["rack/mpi"] != 0 {
		t.Errorf("points per system: %v", count)
	}
	// The 4-worker, 64MiB point belongs to both the workers and sizes sweeps.
	for _, p := range points {
		if p.Mode == "rack" && p.System == "gloo" && p.Workers == 4 && p.Bytes == 64<<20 {
			if strings.Join(p.Sweeps, ",") != "workers,sizes" {
				t.Errorf("sweeps of %s: %v", p, p.Sweeps)
			}
		}
	}
	o.Systems = []string{"switchml"}
	o.Sweeps = []string{"window"}
	if n := len(Plan(&o)); n != 2 {
		t.Errorf("window sweep alone: %d points, want 2", n)
	}
	// Two levels run on a rack built as a tree only, and need a worker
	// under each leaf.
	o.Systems, o.Sweeps = []string{"switchml", "switchml-tree"}, []string{"workers", "loopback"}
	if n := len(Plan(&o)); n != 4 {
		t.Errorf("a flat rack: %d points, want switchml's 3 rack and 1 loopback, no tree", n)
	}
	o.RackLeaves = 4
	count = map[string]int{}
	for _, p := range Plan(&o) {
		count[p.Mode+"/"+p.System]++
	}
	if want := map[string]int{"rack/switchml": 3, "loopback/switchml": 1, "rack/switchml-tree": 2}; !maps.Equal(count, want) {
		t.Errorf("a rack of 4 leaves: points %v, want %v (no tree of 2 workers on 4 leaves)", count, want)
	}
}

func fakeResult(mode, system string, workers int, bytes int64, tat float64, sweeps ...string) result {
	r := result{Point: Point{Mode: mode, System: system, Workers: workers, Bytes: bytes, RateMbit: 200, Sweeps: sweeps}}
	if mode == "loopback" {
		r.RateMbit = 0
	}
	if system == "switchml" {
		r.PacketElements, r.Window, r.Lanes = 256, 64, 4
		r.SwitchCPU = &cpuTime{User: 1, Sys: 0.5}
		r.SwitchCPUPerOp = 0.25
	}
	for range 5 {
		r.Runs = append(r.Runs, repetition{TAT: tat, RankTATs: []float64{tat}})
	}
	r.MedianTAT, r.MinTAT, r.MaxTAT = tat, tat, tat
	r.GoodputMbit = float64(bytes*8) / tat / 1e6
	if r.RateMbit > 0 {
		r.LinkEfficiency = r.GoodputMbit / r.RateMbit
	}
	r.Verified = true
	return r
}

// fakeFile is a run with a workers, a sizes and a loopback sweep, and one
// skipped baseline.
func fakeFile() *resultsFile {
	const s = 64 << 20
	return &resultsFile{
		Options: Options{Name: "test", Size: s, Rate: 200, PacketElements: 256, Window: 64, Lanes: 4, BaseWorkers: 4, Iters: 5, Warmup: 1, LoopbackWorkers: 4, LoopbackSize: s},
		Environment: map[string]any{"cpus": 2, "ports": []any{
			map[string]any{"rate_mbit": 200.0, "tbf_burst_bytes": 25000, "tbf_limit_bytes": 525000, "udp_probe": rack.UDPProbe{Payload: 1034, FrameMbit: 199.9}},
			map[string]any{"rate_mbit": 1000.0, "tbf_burst_bytes": 125000, "tbf_limit_bytes": 2625000, "udp_probe": rack.UDPProbe{Payload: 1034, FrameMbit: 801.8}},
		}},
		Results: []result{
			fakeResult("rack", "switchml", 2, s, 3.0, "workers"),
			fakeResult("rack", "switchml", 4, s, 3.0, "workers", "sizes"),
			fakeResult("rack", "switchml", 8, s, 3.1, "workers"),
			fakeResult("rack", "gloo", 2, s, 3.0, "workers"),
			fakeResult("rack", "gloo", 4, s, 4.5, "workers", "sizes"),
			fakeResult("rack", "gloo", 8, s, 7.2, "workers"),
			fakeResult("rack", "switchml", 4, 1<<20, 0.1, "sizes"),
			fakeResult("rack", "gloo", 4, 1<<20, 0.12, "sizes"),
			fakeResult("loopback", "switchml", 4, s, 1.0, "loopback"),
			fakeResult("loopback", "ring", 4, s, 0.5, "loopback"),
			{Point: Point{Mode: "loopback", System: "mpi", Workers: 4, Bytes: s, Sweeps: []string{"loopback"}}, Error: "skipped: mpicc not found"},
		},
	}
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	f := fakeFile()
	summary, err := writeReport(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, "summary", summary,
		"| 4 | 3.000 | 4.500 | 0.895 | 1.50x | – | 1.50x |", // workers row: TATs, efficiency, speedup, ideal
		"speedup over Gloo, 8 workers | ≥ 2.0x | 2.32x",
		"8 workers against 2 | within 10% | +3.3%",
		"| Ring (Go) | 0.500 |",
		"mpicc not found",
		"| 200 Mbit/s | 25000 B | 525000 B | 199.9 Mbit/s |",
		"| 1000 Mbit/s | 125000 B | 2625000 B | 801.8 Mbit/s |",
	)
	for _, png := range []string{"tat_vs_workers.png", "speedup_vs_workers.png", "goodput_vs_size.png"} {
		b, err := os.ReadFile(filepath.Join(dir, png))
		if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
			t.Errorf("%s: not a PNG (%v)", png, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "summary.md")); err != nil || string(b) != summary {
		t.Errorf("summary.md differs from the returned summary (%v)", err)
	}
}

// A report rewritten from results.json, as the suite saved it during the
// run, is the one the run wrote at its end.
func TestReportFromResultsJSON(t *testing.T) {
	dir := t.TempDir()
	f := fakeFile()
	if err := f.save(dir); err != nil {
		t.Fatal(err)
	}
	want, err := writeReport(t.TempDir(), f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Report(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("report from results.json:\n%s\nwant:\n%s", got, want)
	}
	if _, err := Report(t.TempDir()); err == nil || !strings.Contains(err.Error(), "results.json") {
		t.Errorf("Report of a directory without results.json: %v, want an error naming results.json", err)
	}
}

// With PyTorch over switchml in a run, the tables gain Gloo's time over
// its time (the gain of changing the backend's name), and its own table
// its time over the Go command's (the cost of the Python layer).
func TestSystemTableWithTorchSwitchML(t *testing.T) {
	const s = 64 << 20
	rs := []result{
		fakeResult("rack", "switchml", 4, s, 3.0, "workers"),
		fakeResult("rack", "torch-switchml", 4, s, 3.2, "workers"),
		fakeResult("rack", "gloo", 4, s, 4.8, "workers"),
		fakeResult("rack", "switchml", 8, s, 3.1, "workers"),
		{Point: Point{Mode: "rack", System: "torch-switchml", Workers: 8, Bytes: s, Sweeps: []string{"workers"}}, Error: "rank 3: boom"},
		fakeResult("rack", "gloo", 8, s, 5.4, "workers"),
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	systemTable(p, rs, "workers", "efficiency", "%.3f", func(r result) float64 { return r.LinkEfficiency }, byWorkers, func(n int) string { return strconv.Itoa(n) })
	table := b.String()
	wantLines(t, "table", table,
		"| PyTorch-SwitchML TAT (s) |",
		"| Gloo / SwitchML | Ring / SwitchML | Gloo / PyTorch-SwitchML |",
		"| 4 | 3.000 | 0.895 | 3.200 | 0.839 | 4.800 | 0.559 | 1.60x | – | 1.50x |",
		"| 8 | 3.100 | 0.866 | – | – | 5.400 | 0.497 | 1.74x | – | – |",
	)
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if n := strings.Count(line, "|"); n != 11 {
			t.Errorf("line %d has %d cells borders, want 11: %s", i, n, line)
		}
	}

	b.Reset()
	torchTable(&b, rs)
	wantLines(t, "PyTorch table", b.String(), "| rack 200Mbit/s n=4 64MiB | 3.200 | 4.800 | 3.000 | 1.50x | 1.07x |")
	if strings.Contains(b.String(), "n=8") {
		t.Errorf("PyTorch table shows the failed 8-worker point:\n%s", b.String())
	}
}

// wantLines reports each of wants that text lacks.
func wantLines(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, text)
		}
	}
}

// TestJobStats: two jobs of two ranks; the second twice as slow and
// starting later. Per-job medians, Jain's index and the overlap follow.
func TestJobStats(t *testing.T) {
	rep := func(start, end float64, tats ...float64) rankReport {
		return rankReport{TATs: tats, Verified: true, start: start, end: end}
	}
	reps := []rankReport{
		rep(100, 110, 1, 2, 1), rep(100, 110.5, 1.5, 1, 1),
		rep(104, 120, 2, 2, 2), rep(105, 120, 2, 3, 2),
	}
	reps[3].Verified = false
	var res result
	p := Point{Workers: 2, Jobs: 2, Bytes: 1e6 / 8 * 4, RateMbit: 10}
	jobStats(&res, reps, p)
	if len(res.JobResults) != 2 {
		t.Fatalf("%d jobs", len(res.JobResults))
	}
	j0, j1 := res.JobResults[0], res.JobResults[1]
	if j0.MedianTAT != 1.5 || j1.MedianTAT != 2 || !j0.Verified || j1.Verified {
		t.Errorf("jobs %+v %+v: want medians 1.5 and 2 (slowest rank per call), the second not verified", j0, j1)
	}
	if j0.Start != 0 || j1.Start != 4 || j1.End != 20 {
		t.Errorf("windows %+v %+v: want the second from 4 to 20 s", j0, j1)
	}
	g0, g1 := 4/1.5, 4/2.0
	// 2 jobs x 3 calls x 4 Mbit over the 20 s from the first start to the
	// last end.
	if want := (g0 + g1) * (g0 + g1) / (2 * (g0*g0 + g1*g1)); math.Abs(res.Fairness-want) > 1e-12 || math.Abs(res.AggregateGoodputMbit-1.2) > 1e-12 {
		t.Errorf("fairness %v, aggregate %v; want %v and 1.2", res.Fairness, res.AggregateGoodputMbit, want)
	}
	if want := (110.5 - 104) / 20; math.Abs(res.Overlap-want) > 1e-12 {
		t.Errorf("overlap %v, want %v", res.Overlap, want)
	}
}

// switchml-auth runs where plain SwitchML runs over UDP, rack and loopback,
// and only in the sweeps every system makes; its workers join with --auth
// and the extended header, plain SwitchML's with neither unless Extended
// asks for the header.
func TestPlanSwitchMLAuth(t *testing.T) {
	o := Options{
		Modes: []string{"rack", "loopback"}, Systems: []string{"switchml", "switchml-auth"},
		Sweeps:  []string{"workers", "packet", "window", "loopback"},
		Workers: []int{2, 4}, Size: 64 << 20, TuneSize: 16 << 20, Rate: 1000, BaseWorkers: 4,
		PacketElements: 256, PacketSweep: []int{64, 256}, Window: 64, Windows: []int{16, 64}, Lanes: 4,
		LoopbackWorkers: 4, LoopbackSize: 64 << 20, Iters: 10, Warmup: 1,
	}
	count := map[string]int{}
	for _, p := range Plan(&o) {
		count[p.Mode+"/"+p.System]++
		if p.System != "switchml-auth" {
			continue
		}
		if slices.Contains(p.Sweeps, "packet") || slices.Contains(p.Sweeps, "window") {
			t.Errorf("%s planned in sweeps %v: the packet and window sweeps are plain SwitchML's", p, p.Sweeps)
		}
		args := switchmlArgs(&o, p, "127.0.0.1:50051", "p0", 1, false, 1)
		if !slices.Contains(args, "--auth") || !slices.Contains(args, "--extended") {
			t.Errorf("%s: worker arguments %q lack --auth or --extended", p, args)
		}
		if i := slices.Index(args, "--packet-elements"); i < 0 || args[i+1] != "256" {
			t.Errorf("%s: worker arguments %q, want --packet-elements 256", p, args)
		}
	}
	// switchml: 2 worker counts + k=64 and k=256 at 16MiB (W=64 is the
	// latter) + W=16 on the rack; switchml-auth the 2 worker counts; one
	// loopback point each.
	if want := map[string]int{"rack/switchml": 5, "rack/switchml-auth": 2, "loopback/switchml": 1, "loopback/switchml-auth": 1}; !maps.Equal(count, want) {
		t.Errorf("points per system: %v, want %v", count, want)
	}

	plain := Point{Mode: "loopback", System: "switchml", Workers: 4, Bytes: 64 << 20, PacketElements: 256, Window: 64, Lanes: 4}
	args := switchmlArgs(&o, plain, "127.0.0.1:50051", "p0", 0, false, 1)
	if slices.Contains(args, "--auth") || slices.Contains(args, "--extended") {
		t.Errorf("plain SwitchML, 256 values: worker arguments %q, want neither --auth nor --extended", args)
	}
	o.Extended = true
	args = switchmlArgs(&o, plain, "127.0.0.1:50051", "p0", 0, false, 1)
	if slices.Contains(args, "--auth") || !slices.Contains(args, "--extended") {
		t.Errorf("plain SwitchML with Extended: worker arguments %q, want --extended and no --auth", args)
	}
}

// switchml-auth's switch and controller get --auth, on a fabric of their
// own beside plain SwitchML's, and its switch takes 2048 values per
// packet. The driver starts them with a stand-in for the switchml binary
// that writes down its arguments and fails once both the switch and the
// controller have written theirs (the driver stops the other process when
// one exits).
func TestFabricSwitchMLAuth(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "switchml")
	log := filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" >> " + log + "\n" +
		"i=0; while ! { grep -q '^switch' " + log + " && grep -q '^controller' " + log + "; } && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\nexit 1\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	b := &driver{o: &o, exe: exe, file: resultsFile{Fabric: map[string]any{}}}
	started := func(system string) (sw, ctl []string) {
		t.Helper()
		os.Remove(log)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if f, err := b.fabric(ctx, "loopback", system); err == nil {
			f.Close()
			t.Fatalf("%s: a fabric started on a switchml that fails", system)
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatalf("%s: the stand-in was not run: %v", system, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 0 && f[0] == "switch":
				sw = f
			case len(f) > 0 && f[0] == "controller":
				ctl = f
			}
		}
		if sw == nil {
			t.Fatalf("%s: no switch started: %q", system, data)
		}
		return sw, ctl
	}
	flag := func(args []string, name string) string {
		if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	sw, ctl := started("switchml-auth")
	if !slices.Contains(sw, "--auth") {
		t.Errorf("switchml-auth's switch ran with %q, want --auth", sw)
	}
	if !slices.Contains(ctl, "--auth") {
		t.Errorf("switchml-auth's controller ran with %q, want --auth", ctl)
	}
	if v := flag(sw, "--max-elements"); v != "2048" {
		t.Errorf("switchml-auth's switch takes --max-elements %q, want 2048", v)
	}
	sw, ctl = started("switchml")
	if slices.Contains(sw, "--auth") || slices.Contains(ctl, "--auth") {
		t.Errorf("plain SwitchML's switch ran with %q and its controller with %q, want no --auth", sw, ctl)
	}
	if a, p := fmt.Sprint(b.fabricSlot("loopback", "switchml-auth")), fmt.Sprint(b.fabricSlot("loopback", "switchml")); a == p {
		t.Errorf("switchml-auth and switchml share the loopback fabric %s", a)
	}
	if a, p := fmt.Sprint(b.fabricSlot("rack", "switchml-auth")), fmt.Sprint(b.fabricSlot("rack", "switchml")); a == p {
		t.Errorf("switchml-auth and switchml share the rack fabric %s", a)
	}
}
