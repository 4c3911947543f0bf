package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPlanCollectives: the collectives sweep runs every call for the
// systems that run PyTorch at every rate, the allreduce on the point the
// other sweeps would time; the ranks get --op and, on the rack,
// --count-bytes.
func TestPlanCollectives(t *testing.T) {
	o, err := parseOptions("--modes", "rack", "--sweeps", "collectives,workers", "--systems", "switchml,gloo,torch-switchml",
		"--base-workers", "8", "--workers", "8", "--size", "64MiB", "--rates", "200,1000")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range Plan(&o) {
		got = append(got, fmt.Sprintf("%s %g %q %s", p.System, p.RateMbit, p.Op, strings.Join(p.Sweeps, "+")))
		if p.System != "gloo" {
			continue // torch-switchml's command needs a switch
		}
		b := &driver{o: &o, gloo: "torch_allreduce.py"}
		cmds, err := launcher{b: b, ctx: context.Background(), p: p}.torch(nil)
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Join(cmds[0].Args, " ")
		if hasOp := strings.Contains(args, "--op "+p.Op); hasOp != (p.Op != "") {
			t.Errorf("%s: arguments %q", p, args)
		}
		// On loopback, here, the port counts every process's traffic.
		if strings.Contains(args, "--count-bytes") {
			t.Errorf("%s: --count-bytes off the rack: %q", p, args)
		}
	}
	want := []string{
		`switchml 200 "" workers`,
		`torch-switchml 200 "" workers+collectives`, `torch-switchml 200 "reduce_scatter" collectives`, `torch-switchml 200 "all_gather" collectives`,
		`gloo 200 "" workers+collectives`, `gloo 200 "reduce_scatter" collectives`, `gloo 200 "all_gather" collectives`,
		`torch-switchml 1000 "" collectives`, `torch-switchml 1000 "reduce_scatter" collectives`, `torch-switchml 1000 "all_gather" collectives`,
		`gloo 1000 "" collectives`, `gloo 1000 "reduce_scatter" collectives`, `gloo 1000 "all_gather" collectives`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("points:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, c := range []struct {
		flag string
		args []string
	}{
		{"collective-ops", []string{"--sweeps", "collectives", "--collective-ops", "all_to_all"}},
		{"collective-ops", []string{"--sweeps", "collectives", "--collective-ops", ","}},
		{"size", []string{"--sweeps", "collectives", "--base-workers", "3", "--size", "64MiB"}},
	} {
		_, err := parseOptions(append(c.args, "--systems", "gloo")...)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != c.flag {
			t.Errorf("%q: %v; want a FlagError naming --%s", c.args, err, c.flag)
		}
	}
}

// TestCollectivesReport: the TAT table per rate and call, the bytes
// table against the model, and a plot per rate.
func TestCollectivesReport(t *testing.T) {
	const s, n = 64 << 20, 8
	point := func(system, op string, rate, tat, sent float64) result {
		r := fakeResult("rack", system, n, s, tat, "collectives")
		r.RateMbit, r.Op = rate, op
		r.MinTAT, r.MaxTAT = tat-0.1, tat+0.2
		for i := range n {
			b := rankBytes{NetSent: sent * s, NetRecv: sent * s * (1 + float64(i)/100)}
			if system == "torch-switchml" {
				b.LibSent = 1.0098 * s
			}
			r.RankBytes = append(r.RankBytes, b)
		}
		return r
	}
	f := &resultsFile{
		Options:     Options{Name: "test", Size: s, Iters: 5, Warmup: 1},
		Environment: map[string]any{"torch": "2.5.1"},
		Results: []result{
			point("gloo", "", 200, 5.0, 1.83),
			point("torch-switchml", "", 200, 3.0, 1.05),
			point("gloo", "reduce_scatter", 200, 2.5, 0.92),
			point("torch-switchml", "reduce_scatter", 200, 3.0, 1.05),
			point("gloo", "all_gather", 200, 2.4, 0.92),
			{Point: Point{Mode: "rack", System: "torch-switchml", Workers: n, Bytes: s, RateMbit: 200, Op: "all_gather", Sweeps: []string{"collectives"}}, Error: "rank 2: boom"},
		},
	}
	dir := t.TempDir()
	summary, err := writeReport(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, "summary", summary,
		"## Rack: collectives through torch.distributed (8 workers, 64MiB, 200 Mbit/s ports)",
		"torch 2.5.1",
		"| 200 | all_reduce | 3.000 | 2.900–3.200 | 5.000 | 4.900–5.200 | 1.67x | 1.75x | true |",
		"| 200 | reduce_scatter | 3.000 | 2.900–3.200 | 2.500 | 2.400–2.700 | 0.83x | 0.88x | true |",
		"| 200 | all_gather | – | – | 2.400 | 2.300–2.600 | – | 0.88x | true |",
		"| 200 | all_reduce | Gloo | 117.1 | 117.1–117.1 | 121.2 | 117.1–125.3 | 1.830 | 1.894 | 1.750 | 1.046 | – |",
		"| 200 | reduce_scatter | PyTorch-SwitchML | 67.2 | 67.2–67.2 | 69.6 | 67.2–71.9 | 1.050 | 1.087 | 1.000 | 1.050 | 1.010 |",
		"| 200 | all_gather | Gloo | 58.9 |",
		"![collectives at 200 Mbit/s](collectives_200mbit.png)",
		"torch-switchml n=8 64MiB 200Mbit/s k=0 W=0 L=0 op=all_gather: rank 2: boom",
	)
	if b, err := os.ReadFile(filepath.Join(dir, "collectives_200mbit.png")); err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Errorf("collectives_200mbit.png: not a PNG (%v)", err)
	}
	if strings.Contains(summary, "| 200 | all_gather | PyTorch-SwitchML |") {
		t.Errorf("the bytes table shows the failed point:\n%s", summary)
	}
	// The allreduce of PyTorch's table is not joined by the other calls.
	var b strings.Builder
	torchTable(&b, f.Results)
	if got := strings.Count(b.String(), "| rack 200Mbit/s n=8 64MiB |"); got != 1 {
		t.Errorf("PyTorch table has %d rows of the point, want 1:\n%s", got, b.String())
	}
}
