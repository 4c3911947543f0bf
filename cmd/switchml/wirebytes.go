package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks/wirebytes"
	"github.com/switchml/switchml-go/internal/harness"
)

func init() {
	register("wire-bytes", "captures (AF_PACKET on loopback, root) the packets the workers of a job send to a software switch and counts their bytes per element: float32, bfloat16, float32 --wire-bits 16 and bfloat16 --wire-bits 32; writes capture.json and a Markdown summary", runWireBytes)
}

func runWireBytes(ctx context.Context, args []string) error {
	fs := newFlags("wire-bytes", "[--workers N] [--elements N] [--out DIR] [flags]")
	var cfg wirebytes.Config
	fs.IntVar(&cfg.Workers, "workers", 4, "worker processes of each job")
	fs.IntVar(&cfg.Elements, "elements", 1<<24, "tensor elements per worker")
	fs.IntVar(&cfg.Warmup, "warmup", 1, "untimed allreduce calls of each job, before the timed ones")
	fs.IntVar(&cfg.Iters, "iters", 5, "timed allreduce calls of each job: the figures are their medians")
	fs.IntVar(&cfg.Lanes, "lanes", 0, "the workers' --lanes (0: theirs)")
	fs.IntVar(&cfg.Window, "window", 0, "the workers' --window (0: theirs)")
	fs.IntVar(&cfg.PacketElements, "packet-elements", 0, "the workers' --packet-elements, 32-bit words per packet (0: the switch's, 256)")
	out := fs.String("out", "", "write capture.json and summary.md in this directory (default benchmarks/results/wire-bytes-<date and time>)")
	report := fs.String("report", "", "rewrite summary.md from an earlier run's capture.json in this directory, and exit")
	fs.BoolVar(&cfg.Verbose, "v", false, "show the logs of every process")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *report != "" {
		summary, err := wirebytes.Report(*report)
		if err != nil {
			return err
		}
		fmt.Print(summary)
		return nil
	}
	if *out == "" {
		*out = "benchmarks/results/wire-bytes-" + time.Now().Format("2006-01-02-150405")
	}
	// The processes started are stopped when the command returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	self, err := harness.SelfCommand(ctx)
	if err != nil {
		return err
	}
	cfg.Command, cfg.Out = self, os.Stderr
	res, err := wirebytes.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.Command = strings.Join(append([]string{"switchml", "wire-bytes"}, args...), " ")
	summary, err := res.Write(*out)
	if err != nil {
		return err
	}
	fmt.Print(summary)
	fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
	return nil
}
