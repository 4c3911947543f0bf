package benchmarks

import (
	"errors"
	"flag"
	"io"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/internal/progress"
)

func parseOptions(args ...string) (Options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := DefaultOptions()
	check := o.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, check()
}

// TestRegisterFlagsDefaults: without flags, the options are the default
// run's.
func TestRegisterFlagsDefaults(t *testing.T) {
	o, err := parseOptions()
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.SwitchShards = 1 // the flag's default; 0 takes it too
	if !reflect.DeepEqual(o, want) {
		t.Errorf("options without flags:\n%+v\nwant\n%+v", o, want)
	}
}

func TestRegisterFlagsLists(t *testing.T) {
	o, err := parseOptions("--modes", "loopback,loopback", "--systems", "ring, switchml,ring", "--sweeps", "loopback", "--sizes", "1MiB,,2MiB",
		"--rates", "100,2.5", "--workers", "3,5", "--jobs", "2", "--loopback-size", "4KiB")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Modes, []string{"loopback"}) || !slices.Equal(o.Systems, []string{"ring", "switchml"}) || !slices.Equal(o.Sizes, []int64{1 << 20, 2 << 20}) ||
		!slices.Equal(o.Rates, []float64{100, 2.5}) || !slices.Equal(o.Workers, []int{3, 5}) || !slices.Equal(o.JobCounts, []int{2}) || o.LoopbackSize != 4<<10 {
		t.Errorf("parsed %+v", o)
	}
}

// TestRegisterFlagsErrors: each refusal names the flag to change.
func TestRegisterFlagsErrors(t *testing.T) {
	for flagName, args := range map[string][]string{
		"modes":         {"--modes", "rack,moon"},
		"systems":       {"--systems", "switchml,nccl"},
		"sweeps":        {"--modes", "rack", "--systems", "mpi"}, // mpi runs on loopback only: no point
		"workers":       {"--workers", "2,0"},
		"packet-sweep":  {"--packet-sweep", "x"},
		"window-sweep":  {"--window-sweep", "-4"},
		"jobs":          {"--jobs", "0"},
		"size":          {"--size", "big"},
		"tune-size":     {"--tune-size", "1XB"},
		"loopback-size": {"--loopback-size", ""},
		"sizes":         {"--sizes", "1MiB,lots"},
		"rates":         {"--rates", "0"},
		"flags":         {"--iters", "0"},
		"switch-shards": {"--switch-shards", "0"},
		"rack-leaves":   {"--rack-leaves", "1"},
	} {
		_, err := parseOptions(args...)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != flagName {
			t.Errorf("%v: %v; want a FlagError naming --%s", args, err, flagName)
		}
	}
	if _, err := parseOptions("--systems", "switchml-tree", "--rack-leaves", "0"); err == nil || err.Error() != "bad --systems: switchml-tree runs on a tree: give --rack-leaves 2 or more" {
		t.Errorf("switchml-tree on a flat rack: %v", err)
	}
}

func TestShowProgress(t *testing.T) {
	line := progress.New(os.Stderr, true)
	var o Options
	o.ShowProgress(line, true)
	if o.Progress != io.Discard || o.Starting == nil {
		t.Errorf("quiet: progress to %v, starting hook set %v; want discarded, set", o.Progress, o.Starting != nil)
	}
	o.ShowProgress(line, false)
	if o.Progress != io.Writer(line) {
		t.Errorf("progress to %v, want the status line", o.Progress)
	}
	o.Starting(0, 3, Point{System: "ring"}, 0) // the line is off: draws nothing
}
