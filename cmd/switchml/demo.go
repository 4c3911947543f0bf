package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/transport"
)

func init() {
	register("demo", "run a whole SwitchML job on this machine: software switch, controller and N worker processes on loopback, with a short report", runDemo)
}

func runDemo(ctx context.Context, args []string) error {
	fs := newFlags("demo", "[--workers N] [flags]")
	var d demo
	fs.IntVar(&d.Workers, "workers", 4, "worker processes")
	fs.IntVar(&d.Elements, "elements", 1<<22, "tensor elements per worker (4194304 float32 are 16 MiB)")
	fs.StringVar(&d.DType, "dtype", "float32", "element type: "+strings.Join(dtype.Names(), ", "))
	fs.IntVar(&d.Iters, "iters", 5, "timed allreduce calls per worker")
	fs.IntVar(&d.Lanes, "lanes", 0, "lanes per worker (0: 4, or 1 with --transport shm)")
	fs.IntVar(&d.Window, "window", 0, "packets in flight per lane (0: 64, or 256 with --transport shm)")
	fs.IntVar(&d.PacketElements, "packet-elements", 256, "values per packet (up to 2048 with --extended)")
	fs.BoolVar(&d.Extended, "extended", false, "use the extended header")
	fs.IntVar(&d.WireBits, "wire-bits", 0, "how wide float values travel: 0 (float16 and bfloat16 at 16 bits, float32 at 32), 16 (every float type at 16 bits) or 32")
	fs.Float64Var(&d.Drop, "drop", 0, "switch-side drop probability, to watch loss recovery")
	fs.StringVar(&d.Transport, "transport", switchml.TransportUDP, `how the workers and the switch move packets: "udp" (kernel sockets) or "shm" (shared memory on this host)`)
	fs.BoolVar(&d.Verbose, "v", false, "show the logs of every process")
	fs.IntVar(&d.Port, "port", 0, "pin the ports on 127.0.0.1: the switch's data plane at this port, its P4Runtime server at the next and the controller at the one after (0: free ports)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := d.Check(); err != nil {
		return switchml.InFlags(err, allreduceFlags)
	}
	// The processes started are stopped when the command returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	self, err := harness.SelfCommand(ctx)
	if err != nil {
		return err
	}
	d.Command = self
	return d.Run(ctx, os.Stdout)
}

// demo is a whole SwitchML job on this machine, as `switchml demo` runs
// it: a software switch, its controller and Workers worker processes on
// loopback, each verifying its sums, and a short report. Its errors name
// the flags of `switchml demo`.
type demo struct {
	Workers        int
	Elements       int    // tensor elements per worker
	DType          string // a registered dtype's name (switchml/dtype)
	Iters          int    // timed allreduce calls per worker
	Lanes, Window  int    // 0: what measured best for the transport
	PacketElements int
	Extended       bool
	WireBits       int     // switchml.Config.WireBits
	Drop           float64 // switch-side drop probability
	Transport      string  // switchml.TransportUDP or switchml.TransportShm
	Verbose        bool    // copy every process's log to stderr
	// Port, if set, pins the switch's data plane at Port, its P4Runtime
	// server at Port+1 and the controller at Port+2, on 127.0.0.1
	// (local.Ports); by default they are free ports.
	Port int

	// Command returns the command that runs `switchml ARGS...`, stopped
	// when the demo's context ends.
	Command func(args ...string) *exec.Cmd
}

// Check refuses, before a process starts, everything the workers would
// refuse, and settles the lanes and the window. A switchml.ConfigError
// names Config fields: switchml.InFlags renames them.
func (d *demo) Check() error {
	if d.Workers < 1 {
		return errors.New("--workers must be at least 1")
	}
	if d.Transport != switchml.TransportUDP && d.Transport != switchml.TransportShm {
		return fmt.Errorf("--transport %q: want udp or shm", d.Transport)
	}
	if _, err := elementSize(d.DType); err != nil {
		return err
	}
	if _, _, _, err := local.Ports(d.Port, 1); err != nil {
		return fmt.Errorf("--%w", err)
	}
	switch {
	case d.Elements < 1:
		return fmt.Errorf("--elements %d: want at least 1", d.Elements)
	case d.Iters < 1:
		return fmt.Errorf("--iters %d: want at least 1", d.Iters)
	case !(d.Drop >= 0 && d.Drop < 1):
		return fmt.Errorf("--drop %v: want a probability in [0, 1)", d.Drop)
	case d.Lanes < 0 || d.Window < 0:
		return fmt.Errorf("--lanes %d, --window %d: want 0 (the default) or more", d.Lanes, d.Window)
	}
	// Every worker is started here with the same settings, so the demo
	// can pick what measured best for its transport (see docs/performance.md,
	// "CPU per byte"); a job's ranks started apart must agree on them.
	defLanes, defWindow := switchml.DefaultLanes, switchml.DefaultWindow
	if d.Transport == switchml.TransportShm {
		defLanes, defWindow = 1, 256
	}
	if d.Lanes == 0 {
		d.Lanes = defLanes
	}
	if d.Window == 0 {
		d.Window = defWindow
	}
	return switchml.Config{Job: "demo", Workers: d.Workers, Lanes: d.Lanes, Window: d.Window, PacketElements: d.PacketElements,
		Extended: d.Extended, Transport: d.Transport, WireBits: d.WireBits}.Validate()
}

// elementSize is the value size of the dtype called name, from the
// registry.
func elementSize(name string) (int, error) {
	c, err := dtype.ByName(name)
	if err != nil {
		return 0, fmt.Errorf("--dtype: %w", err)
	}
	return c.Size(), nil
}

// Run checks d, starts the switch, the controller and the workers, waits
// for the workers and writes the report to out. When ctx ends, every
// process is interrupted and winds down, and Run says so.
func (d demo) Run(ctx context.Context, out io.Writer) error {
	if err := d.Check(); err != nil {
		return err
	}
	size, _ := elementSize(d.DType)
	interrupted := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fmt.Fprintf(out, "SwitchML demo: %d workers, %d x %s each (%.1f MiB), %d iterations\n", d.Workers, d.Elements, d.DType,
		float64(d.Elements*size)/(1<<20), d.Iters)
	dp, p4rt, ctl, err := local.Ports(d.Port, 1)
	if err != nil {
		return fmt.Errorf("--%w", err)
	}
	fab, err := harness.Start(ctx, harness.Config{Command: d.Command, Echo: d.Verbose, MaxElements: max(d.PacketElements, 1024),
		Faults: transport.Faults{Drop: d.Drop, Seed: 1}, Transport: d.Transport, Dataplane: dp, P4Runtime: p4rt, Controller: ctl})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  software switch  data plane %s://%s, P4Runtime %s\n", d.Transport, fab.DataplaneAddr(), fab.P4RuntimeAddr())
	fmt.Fprintf(out, "  controller       %s\n", fab.ControllerAddr())
	start := time.Now()
	reps, failures, err := d.runWorkers(fab.ControllerAddr())
	if err != nil {
		fab.Close()
		return err
	}
	wall := time.Since(start)
	fabErr := fab.Close()
	logs := fab.Logs()
	if interrupted.Err() != nil {
		// Every process was interrupted too, and has wound down.
		return fmt.Errorf("stopped %d workers, the switch and the controller", d.Workers)
	}
	if len(failures) > 0 {
		fmt.Fprintln(out, "\nFAILED:")
		for _, f := range failures {
			fmt.Fprintln(out, "  "+f)
		}
		fmt.Fprintf(out, "\nswitch log:\n%s\ncontroller log:\n%s", indent(logs["switch"]), indent(logs["controller"]))
		return fmt.Errorf("%d of %d workers failed", len(failures), d.Workers)
	}
	if fabErr != nil {
		return fmt.Errorf("the switch or the controller failed: %w", fabErr)
	}
	fmt.Fprintf(out, "\n  rank  median TAT   goodput      verified  retransmits  CPU (user+sys)  transport  wire\n")
	for _, r := range reps {
		fmt.Fprintf(out, "  %4d  %8.4f s  %7.3f Gb/s  %-8v  %11d  %12.2f s  %-9s  %d bits\n", r.Rank, r.MedianTAT, r.GoodputGbps, r.Verified, r.Retransmits, r.CPUUserS+r.CPUSysS, r.Transport, r.WireBits)
	}
	fmt.Fprintf(out, "\nEvery worker holds the sum of all %d tensors, checked element by element against the exact sum (%s).\n", d.Workers, wall.Round(time.Millisecond))
	return nil
}

// runWorkers starts the workers, waits for them and reads their reports;
// failures say how each failed worker ended.
func (d demo) runWorkers(controller string) (reps []benchmarks.WorkerReport, failures []string, err error) {
	ws := make([]*harness.Proc, d.Workers)
	for r := range ws {
		ws[r], err = harness.StartProc(fmt.Sprintf("worker %d", r), d.Verbose, d.Command("allreduce", "--controller", controller, "--job", "demo",
			"--rank", fmt.Sprint(r), "--workers", fmt.Sprint(d.Workers), "--elements", fmt.Sprint(d.Elements),
			"--dtype", d.DType, "--iters", fmt.Sprint(d.Iters), "--lanes", fmt.Sprint(d.Lanes), "--window", fmt.Sprint(d.Window),
			"--packet-elements", fmt.Sprint(d.PacketElements), fmt.Sprintf("--extended=%v", d.Extended), "--transport", d.Transport, "--wire-bits", fmt.Sprint(d.WireBits), "--json"))
		if err != nil {
			return nil, nil, err
		}
	}
	for r, w := range ws {
		werr := w.Wait()
		var rep benchmarks.WorkerReport
		if jerr := json.Unmarshal(bytes.TrimSpace(w.Stdout()), &rep); jerr != nil || werr != nil {
			msg := strings.TrimSpace(w.Logs())
			if rep.Error != "" {
				msg = rep.Error
			}
			failures = append(failures, fmt.Sprintf("worker %d: %v %s", r, werr, msg))
			continue
		}
		reps = append(reps, rep)
	}
	return reps, failures, nil
}

func indent(s string) string {
	if s == "" {
		return "  (empty)\n"
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
