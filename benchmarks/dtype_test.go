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

	"github.com/switchml/switchml-go/internal/harness"
)

// --dtype and --wire-bits reach the options; what no run can use is
// refused, naming the flag.
func TestRegisterFlagsDTypeWireBits(t *testing.T) {
	o, err := parseOptions("--dtype", "bfloat16", "--wire-bits", "16")
	if err != nil {
		t.Fatal(err)
	}
	if o.DType != "bfloat16" || o.WireBits != 16 {
		t.Errorf("--dtype bfloat16 --wire-bits 16 parsed as %q, %d", o.DType, o.WireBits)
	}
	if o, err := parseOptions(); err != nil || o.DType != "float32" || o.WireBits != 0 {
		t.Errorf("without the flags: %q, %d, %v; want float32 at the type's default width", o.DType, o.WireBits, err)
	}
	for flagName, args := range map[string][]string{
		"dtype":     {"--dtype", "bf16"},
		"wire-bits": {"--wire-bits", "8"},
		// Neither system reduces bfloat16: no point is left.
		"systems": {"--systems", "ring,mpi", "--dtype", "bfloat16"},
	} {
		_, err := parseOptions(args...)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != flagName {
			t.Errorf("%v: %v; want a FlagError naming --%s", args, err, flagName)
		}
	}
	// The collectives sweep splits the tensor into a shard per rank, in
	// values of the type: 12 bytes are 3 float32 values, 6 bfloat16.
	collectives := []string{"--sweeps", "collectives", "--systems", "gloo", "--base-workers", "2", "--size", "12B"}
	if _, err := parseOptions(append(collectives, "--dtype", "bfloat16")...); err != nil {
		t.Errorf("12 bytes of bfloat16 in 2 shards: %v", err)
	}
	var fe *FlagError
	if _, err := parseOptions(collectives...); !errors.As(err, &fe) || fe.Flag != "size" {
		t.Errorf("12 bytes of float32 in 2 shards: %v; want a FlagError naming --size", err)
	}
	// Recorded gradients are float32 files.
	dir := t.TempDir()
	for r := range 4 { // --base-workers' default
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d.f32", r)), make([]byte, 16), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := parseOptions("--sweeps", "gradients", "--gradients", dir, "--dtype", "float16"); err == nil || !strings.Contains(err.Error(), "bad --dtype: the gradients sweep reduces recorded float32 files") {
		t.Errorf("gradients sweep at float16: %v", err)
	}
	if _, err := parseOptions("--systems", "ring", "--dtype", "bfloat16"); err == nil || !strings.Contains(err.Error(), "ring: the Go ring (switchml ring) reduces float32 only, not bfloat16") {
		t.Errorf("the ring alone at bfloat16: %v; want the reason named", err)
	}
}

// The plan carries the type and the wire width on every point, leaves
// out the systems that cannot reduce the type (Skipped names them), and
// gives the jobs sweep its int32.
func TestPlanDTypeWireBits(t *testing.T) {
	o := DefaultOptions()
	o.Modes, o.Sweeps = []string{"rack", "loopback"}, []string{"workers", "loopback", "jobs"}
	o.Systems = []string{"switchml", "switchml-sparse", "torch-switchml", "gloo", "ring", "mpi"}
	o.Workers, o.DType, o.WireBits = []int{8}, "bfloat16", 16
	systems := map[string]bool{}
	for _, p := range Plan(&o) {
		systems[p.System] = true
		if p.Jobs > 0 {
			if p.DType != "int32" {
				t.Errorf("%s: jobs point of type %q, want int32 (its sums are checked exactly)", p, p.DType)
			}
			continue
		}
		if p.DType != "bfloat16" || !strings.Contains(p.String(), " bfloat16") {
			t.Errorf("%s: type %q, want bfloat16 in the point and its line", p, p.DType)
		}
		onSwitch := runsOnSwitch(p.System)
		if want := map[bool]int{true: 16, false: 0}[onSwitch]; p.WireBits != want || strings.Contains(p.String(), "wire=16") != onSwitch {
			t.Errorf("%s: wire bits %d, want %d (only the SwitchML systems carry a wire width)", p, p.WireBits, want)
		}
		if p.Mode == "rack" && p.elements() != 32<<20 {
			t.Errorf("%s: %d values, want 32Mi (64 MiB of bfloat16)", p, p.elements())
		}
	}
	for _, s := range []string{"ring", "mpi", "switchml-sparse"} {
		if systems[s] {
			t.Errorf("%s planned at bfloat16 on a 16-bit wire", s)
		}
	}
	if !systems["switchml"] || !systems["torch-switchml"] || !systems["gloo"] {
		t.Errorf("planned %v, want switchml, torch-switchml and gloo", systems)
	}
	var skipped []string
	for _, s := range o.Skipped() {
		skipped = append(skipped, s.System)
		if s.Why == "" {
			t.Errorf("%s skipped without a reason", s.System)
		}
	}
	if !slices.Equal(skipped, []string{"switchml-sparse", "ring", "mpi"}) {
		t.Errorf("skipped %v, want switchml-sparse, ring and mpi", skipped)
	}

	// float32 on the 16-bit wire: the ring and OpenMPI run, the sparse
	// mode (32-bit values) does not.
	o.DType = "float32"
	if s := o.Skipped(); len(s) != 1 || s[0].System != "switchml-sparse" {
		t.Errorf("float32 at 16 bits skips %v, want switchml-sparse alone", s)
	}
	o.WireBits = 0
	if s := o.Skipped(); len(s) != 0 {
		t.Errorf("float32 at the default width skips %v", s)
	}
}

// The workers get the type, the values it makes of the size, and the
// wire width: `switchml allreduce --dtype --wire-bits`, the PyTorch
// script's --dtype and, over the switchml backend, SWITCHML_WIRE_BITS.
func TestLaunchDTypeWireBits(t *testing.T) {
	o := DefaultOptions()
	o.Modes, o.Sweeps, o.Systems = []string{"loopback"}, []string{"loopback"}, []string{"switchml", "torch-switchml", "gloo"}
	o.LoopbackSize, o.DType, o.WireBits = 4<<20, "bfloat16", 16
	b := &driver{o: &o, gloo: "torch_allreduce.py", torchSML: []string{}}
	arg := func(args []string, name string) string {
		if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	points := Plan(&o)
	if len(points) != 3 {
		t.Fatalf("planned %v, want one point per system", points)
	}
	for _, p := range points {
		l := launcher{b: b, ctx: context.Background(), p: p}
		switch p.System {
		case "switchml":
			args := switchmlArgs(&o, p, "127.0.0.1:50051", "p0", 0, false, 1)
			if arg(args, "--dtype") != "bfloat16" || arg(args, "--elements") != "2097152" || arg(args, "--wire-bits") != "16" {
				t.Errorf("switchml arguments %q, want --dtype bfloat16 --elements 2097152 --wire-bits 16", args)
			}
		default:
			cmds, err := l.torch(&harness.Fabric{})
			if err != nil {
				t.Fatal(err)
			}
			c := cmds[0]
			if arg(c.Args, "--dtype") != "bfloat16" || arg(c.Args, "--elements") != "2097152" {
				t.Errorf("%s arguments %q, want --dtype bfloat16 --elements 2097152", p.System, c.Args)
			}
			if has := slices.Contains(c.Env, "SWITCHML_WIRE_BITS=16"); has != (p.System == "torch-switchml") {
				t.Errorf("%s: SWITCHML_WIRE_BITS=16 in the environment %v, want it for torch-switchml alone", p.System, has)
			}
		}
	}
	// The type's default width asks for nothing: a worker resolves it.
	o.WireBits = 0
	p := Plan(&o)[0]
	if args := switchmlArgs(&o, p, "127.0.0.1:50051", "p0", 0, false, 1); slices.Contains(args, "--wire-bits") {
		t.Errorf("default width: arguments %q carry --wire-bits", args)
	}
}

// The summary says what every system reduced, at what width it asked and
// which one its workers reported, and names the systems the type left
// out; a run recorded before the choice existed has no such table.
func TestSummaryDTypeWireBits(t *testing.T) {
	o := DefaultOptions()
	o.Name, o.DType, o.WireBits = "w16", "float32", 16
	pt := func(system string, bits int) Point {
		return Point{Mode: "rack", System: system, Workers: 8, Bytes: 64 << 20, RateMbit: 200, DType: "float32", WireBits: bits, Sweeps: []string{"workers"}}
	}
	f := resultsFile{Options: o, Environment: map[string]any{"dtype_skipped": map[string]string{"switchml-sparse": "the block-sparse mode sends 32-bit values"}},
		Results: []result{
			{Point: pt("switchml", 16), MedianTAT: 1.5, WireBitsUsed: []int{16}},
			{Point: pt("torch-switchml", 16), MedianTAT: 3, WireBitsUsed: []int{32}},
			{Point: pt("gloo", 0), MedianTAT: 5},
		}}
	dir := t.TempDir()
	if err := f.save(dir); err != nil {
		t.Fatal(err)
	}
	s, err := Report(dir) // as read back from results.json
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| SwitchML | float32 | 16 | 16 |",
		"| PyTorch-SwitchML | float32 | 16 | 32 |",
		"| Gloo | float32 | – | – (its type) |",
		"| SwitchML sparse | skipped: the block-sparse mode sends 32-bit values | | |",
	} {
		if !strings.Contains(s, row) {
			t.Errorf("summary lacks the row\n%s\ngot:\n%s", row, s)
		}
	}
	if !strings.Contains(s, "--dtype float32, --wire-bits 16.") {
		t.Errorf("summary does not say the run's type and width:\n%s", s)
	}

	// Before the choice: no type, no width, no table.
	f.Options.DType, f.Options.WireBits, f.Environment = "", 0, map[string]any{}
	for i := range f.Results {
		f.Results[i].DType, f.Results[i].WireBits, f.Results[i].WireBitsUsed = "", 0, nil
	}
	if s := summaryOf(t, &f); strings.Contains(s, "Data type and wire width") || !strings.Contains(s, "of one float32 tensor;") {
		t.Errorf("a run without a type has the table, or does not say float32:\n%s", s)
	}
	f.Options.DType = "bfloat16"
	if s := summaryOf(t, &f); !strings.Contains(s, "of one bfloat16 tensor (2 bytes a value: sizes are in bytes);") {
		t.Errorf("a bfloat16 run does not say so:\n%s", s)
	}
}

func summaryOf(t *testing.T, f *resultsFile) string {
	t.Helper()
	s, err := writeReport(t.TempDir(), f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Over runs, points of another type or wire width are points of their
// own, and a system's row says the width its workers reported.
func TestRunsSummaryDTypeWireBits(t *testing.T) {
	dir := t.TempDir()
	for i, bits := range []int{16, 16} {
		run := filepath.Join(dir, "run"+string(rune('1'+i)))
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		pt := func(system, dt string, wire int) Point {
			return Point{Mode: "rack", System: system, Workers: 8, Bytes: 64 << 20, RateMbit: 200, DType: dt, WireBits: wire}
		}
		f := resultsFile{Options: Options{WireBits: bits}, Results: []result{
			{Point: pt("switchml", "float32", bits), MedianTAT: 1.5, WireBitsUsed: []int{16}},
			{Point: pt("gloo", "float32", 0), MedianTAT: 4.5},
		}}
		if err := f.save(run); err != nil {
			t.Fatal(err)
		}
	}
	s, err := runsSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	row := "| rack 200Mbit/s n=8 64MiB wire=16 | switchml, 16-bit wire | 2 | 1.500 (1.500-1.500) | gloo | 4.500 (4.500-4.500) | 3.00x (3.00x-3.00x) |"
	if !strings.Contains(s, row) {
		t.Errorf("runs summary lacks the row\n%s\ngot:\n%s", row, s)
	}
}

// A Gloo that cannot sum the type is named with PyTorch's own words; one
// that can, or float32, is not asked twice.
func TestGlooReduces(t *testing.T) {
	dir := t.TempDir()
	python := filepath.Join(dir, "python")
	script := "#!/bin/sh\necho \"$@\" >> " + filepath.Join(dir, "args") + "\n" +
		"[ \"$4\" = bfloat16 ] || exit 0\necho 'Traceback (most recent call last):' >&2\necho 'RuntimeError: Invalid scalar type' >&2\nexit 1\n"
	if err := os.WriteFile(python, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	why := glooReduces(ctx, python, "1.13", "bfloat16", dir)
	if !strings.Contains(why, "cannot all_reduce bfloat16 (RuntimeError: Invalid scalar type)") || !strings.Contains(why, "--python") {
		t.Errorf("bfloat16 refused: %q; want the type, PyTorch's error and what to do", why)
	}
	if why := glooReduces(ctx, python, "1.13", "float16", dir); why != "" {
		t.Errorf("float16 summed: %q, want none", why)
	}
	if why := glooReduces(ctx, filepath.Join(dir, "absent"), "1.13", "float32", dir); why != "" {
		t.Errorf("float32: %q; every Gloo sums it, nothing to ask", why)
	}
}
