package benchmarks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/switchml/dtype"
)

// writeGradients writes rank<r>.f32 for each of vals' ranks into a new
// directory.
func writeGradients(t *testing.T, vals ...[]float32) string {
	t.Helper()
	dir := t.TempDir()
	for r, v := range vals {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		if err := os.WriteFile(gradientFile(dir, r), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSparseFlags(t *testing.T) {
	dir := writeGradients(t, make([]float32, 8), make([]float32, 8))
	o, err := parseOptions("--sweeps", "density,gradients", "--base-workers", "2", "--density", "0.01, 1", "--gradients", dir, "--systems", "switchml,switchml-sparse,gloo")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Densities, []float64{0.01, 1}) || !slices.Equal(o.Gradients, []string{dir}) || !slices.Contains(o.Systems, "switchml-sparse") {
		t.Errorf("parsed densities %v, gradients %v, systems %v", o.Densities, o.Gradients, o.Systems)
	}

	short := writeGradients(t, make([]float32, 8), make([]float32, 7))
	for _, c := range []struct {
		flag, why string
		args      []string
	}{
		{"density", "a density of 0", []string{"--sweeps", "density", "--density", "0,0.1"}},
		{"density", "a density above 1", []string{"--sweeps", "density", "--density", "1.5"}},
		{"density", "no density", []string{"--sweeps", "density", "--density", ","}},
		{"gradients", "the sweep without directories", []string{"--sweeps", "gradients"}},
		{"gradients", "directories no sweep reads", []string{"--sweeps", "density", "--gradients", dir}},
		{"gradients", "a rank's file missing", []string{"--sweeps", "gradients", "--base-workers", "3", "--gradients", dir}},
		{"gradients", "files of two sizes", []string{"--sweeps", "gradients", "--base-workers", "2", "--gradients", short}},
		{"systems", "an unknown system", []string{"--systems", "switchml-sparser"}},
	} {
		_, err := parseOptions(c.args...)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != c.flag {
			t.Errorf("%s (%q): %v; want a FlagError naming --%s", c.why, c.args, err, c.flag)
		}
	}
}

// TestPlanSparse: the density sweep runs the SwitchML systems at every
// density and the others once; the gradients sweep runs every system on
// each directory's files, at their size; the workers get the arguments.
func TestPlanSparse(t *testing.T) {
	dir := writeGradients(t, make([]float32, 300), make([]float32, 300))
	o := DefaultOptions()
	o.Modes, o.Systems, o.Sweeps = []string{"rack"}, []string{"switchml", "switchml-sparse", "gloo"}, []string{"density", "gradients"}
	o.BaseWorkers, o.Densities, o.Gradients = 2, []float64{0.01, 1}, []string{dir}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range Plan(&o) {
		got = append(got, fmt.Sprintf("%s %g %q %d", p.System, p.Density, p.Gradients, p.Bytes))
		args := switchmlArgs(&o, p, "10.0.0.1:50051", "p0", 0, true, 1)
		has := func(flag, value string) bool {
			i := slices.Index(args, flag)
			return i >= 0 && (value == "" || i+1 < len(args) && args[i+1] == value)
		}
		switch {
		case !runsOnSwitch(p.System):
		case p.System == "switchml-sparse" && (!has("--sparse", "") || !has("--extended", "")):
			t.Errorf("%s: arguments %q lack --sparse or --extended", p, args)
		case p.System == "switchml" && has("--sparse", ""):
			t.Errorf("%s: arguments %q have --sparse", p, args)
		case p.Gradients != "" && (!has("--gradients", dir) || has("--density", "")):
			t.Errorf("%s: arguments %q, want --gradients %s and no --density", p, args, dir)
		case p.Density == 0.01 && !has("--density", "0.01"):
			t.Errorf("%s: arguments %q, want --density 0.01", p, args)
		case p.Density == 1 && has("--density", ""):
			t.Errorf("%s: arguments %q, want no --density (1 is every block)", p, args)
		}
	}
	files := fmt.Sprintf("%q 1200", dir)
	want := []string{
		`switchml 0.01 "" 67108864`, `switchml 1 "" 67108864`, "switchml 0 " + files,
		`switchml-sparse 0.01 "" 67108864`, `switchml-sparse 1 "" 67108864`, "switchml-sparse 0 " + files,
		`gloo 0 "" 67108864`, "gloo 0 " + files,
	}
	if !slices.Equal(got, want) {
		t.Errorf("points:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDensities: the densities the report shows are those of the data
// the workers fill (dtype.FillDensity with the suite's seed) and of the
// files' non-zero blocks.
func TestDensities(t *testing.T) {
	const workers, k, n = 4, 8, 8 * 500
	d := syntheticDensity(1, workers, n, k, 0.1)
	held, union := 0, make([]bool, n/k)
	data := dtype.New(dtype.Float32, n)
	for r := range workers {
		dtype.FillDensity(dtype.Float32, data, 1, r, k, 0.1)
		v := dtype.As[float32](data)
		for b := range n / k {
			if slices.ContainsFunc(v[b*k:(b+1)*k], func(x float32) bool { return x != 0 }) {
				held++
				union[b] = true
			}
		}
	}
	nu := 0
	for _, u := range union {
		if u {
			nu++
		}
	}
	if want := (blockDensity{float64(held) / (workers * n / k), float64(nu) / (n / k)}); d != want {
		t.Errorf("synthetic density %+v, want %+v (counted from FillDensity)", d, want)
	}
	if d := syntheticDensity(1, workers, n, k, 1); d != (blockDensity{1, 1}) {
		t.Errorf("density 1: %+v, want every block", d)
	}

	// Blocks of 2: rank 0 holds blocks 0 and 2 (a -0 counts as zero),
	// rank 1 block 2; the last block is short.
	dir := writeGradients(t, []float32{1, 0, float32(math.Copysign(0, -1)), 0, 0, 3, 0}, []float32{0, 0, 0, 0, 0, 2, 0})
	got, err := fileDensity(dir, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (blockDensity{3.0 / 8, 2.0 / 4}); got != want {
		t.Errorf("file density %+v, want %+v", got, want)
	}
	if _, err := fileDensity(dir, 3, 2); err == nil {
		t.Error("file density with a rank's file missing: no error")
	}
}

// TestSparseReport: the block-sparse tables from fake results: the
// densities, each system's TAT (Gloo's one run on every density's row),
// the speedups and the packets per allreduce.
func TestSparseReport(t *testing.T) {
	const s = 64 << 20
	point := func(system string, density float64, gradients string, tat float64, packets uint64, sweep string) result {
		r := fakeResult("rack", system, 8, s, tat, sweep)
		r.Density, r.Gradients, r.Packets = density, gradients, packets
		if fillsDensity(system) {
			bd := blockDensity{Worker: density, Union: min(1, 8*density)}
			if gradients != "" {
				bd = blockDensity{Worker: 0.035, Union: 0.21}
			}
			r.BlockDensity = &bd
		}
		return r
	}
	f := fakeFile()
	f.Options.Densities = []float64{0.01, 1}
	f.Results = []result{
		point("switchml", 0.01, "", 3.0, 6*65536*8, "density"),
		point("switchml-sparse", 0.01, "", 0.3, 6*5000, "density"),
		point("switchml", 1, "", 3.0, 6*65536*8, "density"),
		point("switchml-sparse", 1, "", 3.3, 6*70000*8, "density"),
		point("gloo", 0, "", 5.4, 0, "density"),
		point("switchml", 0, "/data/ncf", 4.0, 6*100, "gradients"),
		point("switchml-sparse", 0, "/data/ncf", 1.0, 6*25, "gradients"),
		{Point: Point{Mode: "rack", System: "gloo", Workers: 8, Bytes: s, Gradients: "/data/ncf", Sweeps: []string{"gradients"}}, Error: "rank 2: boom"},
	}
	f.Results[1].Verified = false
	dir := t.TempDir()
	summary, err := writeReport(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, "summary", summary,
		"## Rack: block-sparse aggregation against density (8 workers, 64MiB float32, 200 Mbit/s ports)",
		"| density (asked) | density per worker | union density | SwitchML TAT (s) | SwitchML sparse TAT (s) | Gloo TAT (s) | sparse speedup over SwitchML | sparse speedup over Gloo | SwitchML packets per allreduce | sparse packets per allreduce | verified |",
		"| 0.01 | 0.0100 | 0.0800 | 3.000 | 0.300 | 5.400 | 10.00x | 18.00x | 524288 | 5000 | not SwitchML sparse |",
		"| 1 | 1.0000 | 1.0000 | 3.000 | 3.300 | 5.400 | 0.91x | 1.64x | 524288 | 560000 | yes |",
		"## Rack: block-sparse aggregation of recorded gradients (8 workers, 200 Mbit/s ports)",
		"| ncf | 0.0350 | 0.2100 | 4.000 | 1.000 | – | 4.00x | – | 100 | 25 | yes |",
	)
	for _, png := range []string{"tat_vs_density.png", "tat_gradients.png"} {
		b, err := os.ReadFile(filepath.Join(dir, png))
		if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
			t.Errorf("%s: not a PNG (%v)", png, err)
		}
	}
}
