package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/p4/fabric"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/transport"
)

func init() {
	register("demo", "run a whole SwitchML job on this machine: software switch, controller and N worker processes on loopback, with a short report", runDemo)
}

func runDemo(ctx context.Context, args []string) error {
	fs := newFlags("demo", "[--workers N] [flags]")
	workers := fs.Int("workers", 4, "worker processes")
	elements := fs.Int("elements", 1<<22, "tensor elements per worker (default 16 MiB of float32)")
	dtype := fs.String("dtype", "float32", "element type: float32, int32, float16 or bfloat16")
	iters := fs.Int("iters", 5, "timed allreduce calls per worker")
	lanes := fs.Int("lanes", 0, "lanes per worker (0: 4, or 1 with --transport shm)")
	window := fs.Int("window", 0, "packets in flight per lane (0: 64, or 256 with --transport shm)")
	pe := fs.Int("packet-elements", 256, "values per packet (up to 2048 with --extended)")
	extended := fs.Bool("extended", false, "use the extended header")
	drop := fs.Float64("drop", 0, "switch-side drop probability, to watch loss recovery")
	transportKind := fs.String("transport", "udp", `how the workers and the switch move packets: "udp" (kernel sockets) or "shm" (shared memory on this host)`)
	verbose := fs.Bool("v", false, "show the logs of every process")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *workers < 1 {
		return fmt.Errorf("--workers must be at least 1")
	}
	if *transportKind != switchml.TransportUDP && *transportKind != switchml.TransportShm {
		return fmt.Errorf("--transport %q: want udp or shm", *transportKind)
	}
	// Everything the workers would refuse is refused here, before a
	// process starts.
	size, err := dtypeSize(*dtype)
	if err != nil {
		return err
	}
	switch {
	case *elements < 1:
		return fmt.Errorf("--elements %d: want at least 1", *elements)
	case *iters < 1:
		return fmt.Errorf("--iters %d: want at least 1", *iters)
	case !(*drop >= 0 && *drop < 1):
		return fmt.Errorf("--drop %v: want a probability in [0, 1)", *drop)
	case *lanes < 0 || *window < 0:
		return fmt.Errorf("--lanes %d, --window %d: want 0 (the default) or more", *lanes, *window)
	}
	// Every worker is started here with the same settings, so the demo
	// can pick what measured best for its transport (see docs/performance.md,
	// "CPU per byte"); a job's ranks started apart must agree on them.
	defLanes, defWindow := switchml.DefaultLanes, switchml.DefaultWindow
	if *transportKind == switchml.TransportShm {
		defLanes, defWindow = 1, 256
	}
	if *lanes == 0 {
		*lanes = defLanes
	}
	if *window == 0 {
		*window = defWindow
	}
	if err := (switchml.Config{Job: "demo", Workers: *workers, Lanes: *lanes, Window: *window, PacketElements: *pe,
		Extended: *extended, Transport: *transportKind}).Validate(); err != nil {
		return switchml.InFlags(err, allreduceFlags)
	}
	interrupted := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	self, err := selfCommand(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("SwitchML demo: %d workers, %d x %s each (%.1f MiB), %d iterations\n", *workers, *elements, *dtype,
		float64(*elements*size)/(1<<20), *iters)
	fab, err := fabric.Start(ctx, fabric.Config{Command: self, Echo: *verbose, MaxElements: max(*pe, 1024),
		Faults: transport.Faults{Drop: *drop, Seed: 1}, Transport: *transportKind})
	if err != nil {
		return err
	}
	fmt.Printf("  software switch  data plane %s://%s, P4Runtime %s\n", *transportKind, fab.DataplaneAddr(), fab.P4RuntimeAddr())
	fmt.Printf("  controller       %s\n", fab.ControllerAddr())
	start := time.Now()
	ws := make([]*fabric.Proc, *workers)
	for r := range ws {
		ws[r], err = fabric.StartProc(fmt.Sprintf("worker %d", r), *verbose, self("allreduce", "--controller", fab.ControllerAddr(), "--job", "demo",
			"--rank", fmt.Sprint(r), "--workers", fmt.Sprint(*workers), "--elements", fmt.Sprint(*elements),
			"--dtype", *dtype, "--iters", fmt.Sprint(*iters), "--lanes", fmt.Sprint(*lanes), "--window", fmt.Sprint(*window),
			"--packet-elements", fmt.Sprint(*pe), fmt.Sprintf("--extended=%v", *extended), "--transport", *transportKind, "--json"))
		if err != nil {
			fab.Close()
			return err
		}
	}
	var reps []benchmarks.WorkerReport
	var failures []string
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
	wall := time.Since(start)
	fabErr := fab.Close()
	logs := fab.Logs()
	if interrupted.Err() != nil {
		// Every process was interrupted too, and has wound down.
		return fmt.Errorf("stopped %d workers, the switch and the controller", *workers)
	}
	if len(failures) > 0 {
		fmt.Println("\nFAILED:")
		for _, f := range failures {
			fmt.Println("  " + f)
		}
		fmt.Printf("\nswitch log:\n%s\ncontroller log:\n%s", indent(logs["switch"]), indent(logs["controller"]))
		return fmt.Errorf("%d of %d workers failed", len(failures), *workers)
	}
	if fabErr != nil {
		return fmt.Errorf("the switch or the controller failed: %w", fabErr)
	}
	fmt.Printf("\n  rank  median TAT   goodput      verified  retransmits  CPU (user+sys)  transport\n")
	for _, r := range reps {
		fmt.Printf("  %4d  %8.4f s  %7.3f Gb/s  %-8v  %11d  %12.2f s  %s\n", r.Rank, r.MedianTAT, r.GoodputGbps, r.Verified, r.Retransmits, r.CPUUserS+r.CPUSysS, r.Transport)
	}
	fmt.Printf("\nEvery worker holds the sum of all %d tensors, checked element by element against the exact sum (%s).\n", *workers, wall.Round(time.Millisecond))
	return nil
}

func indent(s string) string {
	if s == "" {
		return "  (empty)\n"
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
