package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/benchmarks"
)

func TestBenchFlags(t *testing.T) {
	var out strings.Builder
	c, err := parseBenchFlags([]string{"--name", "x", "--modes", "loopback", "--sweeps", "loopback,workers", "--systems", "switchml,ring,ring",
		"--loopback-size", "1MiB", "--sizes", "1MiB, 2MiB", "--rates", "100,400", "--iters", "3", "--dry-run"}, &out)
	if err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	o := c.opts
	if !c.dryRun || c.report != "" || o.Name != "x" || o.Iters != 3 || o.LoopbackSize != 1<<20 || o.Size != 64<<20 {
		t.Errorf("parsed %+v", c)
	}
	if !slices.Equal(o.Systems, []string{"switchml", "ring"}) || !slices.Equal(o.Sweeps, []string{"loopback", "workers"}) ||
		!slices.Equal(o.Sizes, []int64{1 << 20, 2 << 20}) || !slices.Equal(o.Rates, []float64{100, 400}) || !slices.Equal(o.Workers, []int{2, 4, 8}) {
		t.Errorf("lists parsed as %+v", o)
	}
	// Only the loopback mode is chosen: one point per system.
	if n := len(benchmarks.Plan(&o)); n != 2 {
		t.Errorf("%d points planned, want 2", n)
	}

	// --extended gives plain SwitchML the header switchml-auth needs.
	c, err = parseBenchFlags([]string{"--systems", "switchml,switchml-auth", "--modes", "loopback", "--sweeps", "loopback", "--extended"}, &out)
	if err != nil || !c.opts.Extended || !slices.Equal(c.opts.Systems, []string{"switchml", "switchml-auth"}) {
		t.Errorf("--systems switchml,switchml-auth --extended: %+v, %v (%s)", c.opts, err, out.String())
	}

	// --dry-run lists the points with their type and width, then the
	// systems the type leaves out.
	c, err = parseBenchFlags([]string{"--modes", "rack", "--sweeps", "workers", "--workers", "8", "--systems", "switchml,gloo,ring",
		"--dtype", "bfloat16", "--wire-bits", "16", "--dry-run"}, &out)
	if err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var plan strings.Builder
	printPlan(&plan, &c.opts)
	want := "  1  rack     switchml n=8 64MiB 200Mbit/s k=256 W=64 L=4 bfloat16 wire=16\n" +
		"  2  rack     gloo     n=8 64MiB 200Mbit/s bfloat16\n" +
		"     skipped: ring: the Go ring (switchml ring) reduces float32 only, not bfloat16\n"
	if plan.String() != want {
		t.Errorf("--dry-run printed\n%s\nwant\n%s", plan.String(), want)
	}

	c, err = parseBenchFlags([]string{"--report", "benchmarks/results/default"}, &out)
	if err != nil || c.report != "benchmarks/results/default" {
		t.Errorf("--report: %+v, %v", c, err)
	}

	for flag, args := range map[string][]string{
		"sizes":   {"--sizes", "1MiB,lots"},
		"systems": {"--systems", "switchml,nccl"},
		"rates":   {"--rates", "0"},
		"flags":   {"--iters", "0"},
		"sweeps":  {"--modes", "rack", "--systems", "mpi"}, // mpi runs on loopback only
		"density": {"--sweeps", "density", "--systems", "switchml-sparse", "--density", "0"},
	} {
		out.Reset()
		if _, err := parseBenchFlags(args, &out); !errors.Is(err, errUsage) || !strings.Contains(out.String(), "bad --"+flag+":") {
			t.Errorf("%v: %v, output %q; want a usage error naming --%s", args, err, out.String(), flag)
		}
	}
}
