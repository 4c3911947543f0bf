package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
)

func init() {
	register("demo", "run a whole SwitchML job on this machine: software switch, controller and N worker processes on loopback, with a short report", runDemo)
}

// freePort asks the kernel for a free port on loopback.
func freePort(network string) (int, error) {
	switch network {
	case "tcp":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	default:
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
}

// child is a subprocess whose stderr is kept for the report and, with -v,
// shown line by line with its name.
type child struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	log  prefixWriter
}

// prefixWriter keeps everything written to it and, when echo is set,
// copies complete lines to stderr behind a name.
type prefixWriter struct {
	mu      sync.Mutex
	name    string
	echo    bool
	all     bytes.Buffer
	partial []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	if w.echo {
		w.partial = append(w.partial, p...)
		for {
			i := bytes.IndexByte(w.partial, '\n')
			if i < 0 {
				break
			}
			fmt.Fprintf(os.Stderr, "[%s] %s\n", w.name, w.partial[:i])
			w.partial = w.partial[i+1:]
		}
	}
	return len(p), nil
}

func startChild(ctx context.Context, name string, verbose bool, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &child{name: name, cmd: exec.CommandContext(ctx, exe, args...)}
	c.log.name, c.log.echo = name, verbose
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = &c.log
	c.cmd.Cancel = func() error { return c.cmd.Process.Signal(os.Interrupt) }
	c.cmd.WaitDelay = 5 * time.Second
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return c, nil
}

func (c *child) logs() string {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return c.log.all.String()
}

func runDemo(ctx context.Context, args []string) error {
	fs := newFlags("demo", "[--workers N] [flags]")
	workers := fs.Int("workers", 4, "worker processes")
	elements := fs.Int("elements", 1<<22, "tensor elements per worker (default 16 MiB of float32)")
	dtype := fs.String("dtype", "float32", "element type: float32, int32, float16 or bfloat16")
	iters := fs.Int("iters", 5, "timed allreduce calls per worker")
	lanes := fs.Int("lanes", 4, "lanes per worker")
	window := fs.Int("window", 64, "packets in flight per lane")
	pe := fs.Int("packet-elements", 256, "values per packet (up to 2048 with --extended)")
	extended := fs.Bool("extended", false, "use the extended header")
	drop := fs.Float64("drop", 0, "switch-side drop probability, to watch loss recovery")
	verbose := fs.Bool("v", false, "show the logs of every process")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *workers < 1 {
		return fmt.Errorf("--workers must be at least 1")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	dpPort, err := freePort("udp")
	if err != nil {
		return err
	}
	p4Port, err := freePort("tcp")
	if err != nil {
		return err
	}
	ctlPort, err := freePort("tcp")
	if err != nil {
		return err
	}
	dp := "127.0.0.1:" + strconv.Itoa(dpPort)
	p4rt := "127.0.0.1:" + strconv.Itoa(p4Port)
	ctl := "127.0.0.1:" + strconv.Itoa(ctlPort)
	fmt.Printf("SwitchML demo: %d workers, %d x %s each (%.1f MiB), %d iterations\n", *workers, *elements, *dtype,
		float64(*elements*mustSize(*dtype))/(1<<20), *iters)
	fmt.Printf("  software switch  data plane udp://%s, P4Runtime %s\n", dp, p4rt)
	fmt.Printf("  controller       %s\n", ctl)

	sw, err := startChild(ctx, "switch", *verbose, "switch", "--dataplane", dp, "--p4rt", p4rt, "--drop", fmt.Sprint(*drop),
		"--max-elements", fmt.Sprint(max(*pe, 1024)))
	if err != nil {
		return err
	}
	ctlc, err := startChild(ctx, "controller", *verbose, "controller", "--target", p4rt, "--listen", ctl, "--dataplane", dp)
	if err != nil {
		return err
	}
	start := time.Now()
	ws := make([]*child, *workers)
	for r := range ws {
		ws[r], err = startChild(ctx, fmt.Sprintf("worker %d", r), *verbose, "allreduce", "--controller", ctl, "--job", "demo",
			"--rank", fmt.Sprint(r), "--workers", fmt.Sprint(*workers), "--elements", fmt.Sprint(*elements),
			"--dtype", *dtype, "--iters", fmt.Sprint(*iters), "--lanes", fmt.Sprint(*lanes), "--window", fmt.Sprint(*window),
			"--packet-elements", fmt.Sprint(*pe), fmt.Sprintf("--extended=%v", *extended), "--json")
		if err != nil {
			return err
		}
	}
	var reps []benchmarks.WorkerReport
	var failures []string
	for r, w := range ws {
		werr := w.cmd.Wait()
		var rep benchmarks.WorkerReport
		if jerr := json.Unmarshal(bytes.TrimSpace(w.out.Bytes()), &rep); jerr != nil || werr != nil {
			msg := strings.TrimSpace(w.logs())
			if rep.Error != "" {
				msg = rep.Error
			}
			failures = append(failures, fmt.Sprintf("worker %d: %v %s", r, werr, msg))
			continue
		}
		reps = append(reps, rep)
	}
	wall := time.Since(start)
	cancel()
	sw.cmd.Wait()
	ctlc.cmd.Wait()
	if len(failures) > 0 {
		fmt.Println("\nFAILED:")
		for _, f := range failures {
			fmt.Println("  " + f)
		}
		fmt.Printf("\nswitch log:\n%s\ncontroller log:\n%s", indent(sw.logs()), indent(ctlc.logs()))
		return fmt.Errorf("%d of %d workers failed", len(failures), *workers)
	}
	fmt.Printf("\n  rank  median TAT   goodput      verified  retransmits  CPU (user+sys)\n")
	for _, r := range reps {
		fmt.Printf("  %4d  %8.4f s  %7.3f Gb/s  %-8v  %11d  %.2f s\n", r.Rank, r.MedianTAT, r.GoodputGbps, r.Verified, r.Retransmits, r.CPUUserS+r.CPUSysS)
	}
	fmt.Printf("\nEvery worker holds the sum of all %d tensors, checked element by element against the exact sum (%s).\n", *workers, wall.Round(time.Millisecond))
	return nil
}

func mustSize(dtype string) int {
	n, err := dtypeSize(dtype)
	if err != nil {
		return 4
	}
	return n
}

func indent(s string) string {
	if s == "" {
		return "  (empty)\n"
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
