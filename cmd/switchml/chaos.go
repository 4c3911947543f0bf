package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/switchml/switchml-go/benchmarks/chaos"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/internal/progress"
)

func init() {
	register("chaos", "a bounded chaos run on loopback: jobs in a loop while workers are killed, the switch and the controller restarted and packets lost; reports failures by cause, time to detect, recoveries, wrong sums and leaked slots", runChaos)
}

func runChaos(ctx context.Context, args []string) error {
	fs := newFlags("chaos", "[--duration D] [--seed S] [flags]")
	var cfg chaos.Config
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long to run rounds")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault schedule")
	fs.IntVar(&cfg.MaxWorkers, "max-workers", 4, "largest job (2 to this many workers)")
	fs.IntVar(&cfg.Elements, "elements", 200_000, "tensor elements per worker")
	fs.IntVar(&cfg.Iters, "iters", 100, "allreduces per round (the fault lands while they run)")
	fs.IntVar(&cfg.Slots, "slots", 512, "slots of the switch (small, so that a leak shows)")
	jsonOut := fs.String("json", "", "write the summary as JSON to this file")
	fs.BoolVar(&cfg.Verbose, "v", false, "show the logs of every process")
	quiet := fs.Bool("quiet", false, "no status line (it is drawn only on a terminal, and not with -v)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The processes started are stopped when the command returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	self, err := harness.SelfCommand(ctx)
	if err != nil {
		return err
	}
	cfg.Command = self
	cfg.Line = progress.New(os.Stderr, *quiet || cfg.Verbose)
	defer cfg.Line.Done()
	cfg.Out = cfg.Line.Above(os.Stdout)
	sum, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	cfg.Line.Done()
	fmt.Println()
	if err := sum.WriteTable(os.Stdout); err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := sum.WriteJSON(*jsonOut); err != nil {
			return err
		}
	}
	return sum.Err()
}
