// Command rackbench measures real TensorFlow training end to end on the
// emulated rack of package benchmarks/rack: one network namespace per
// worker, each running one `train --rank`, every port shaped to the same
// rate, and the project's software switch and controller in the switch
// namespace. It needs root.
//
//	rackbench accuracy  time to a test accuracy per backend, with the
//	                    accuracy of every epoch (Fashion-MNIST CNN)
//	rackbench steps     step time of benchmark models on synthetic input,
//	                    each beside the profile replay's prediction for the
//	                    same configuration on the same rack
//	rackbench report    rewrite the tables and plots from the JSON files
//
// Build it in the trainers module after `eval "$(./setup.sh)"`; it builds
// `train`, `replaybench` and `switchml` itself:
//
//	go build -o /tmp/rackbench ./cmd/rackbench && /tmp/rackbench accuracy --out results/rack-e2e
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "rackbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("name a measurement: rackbench accuracy|steps|report [flags] (--help on each)")
	}
	switch args[0] {
	case "accuracy":
		return accuracy(ctx, args[1:])
	case "steps":
		return steps(ctx, args[1:])
	case "report":
		return report(args[1:])
	}
	return fmt.Errorf("unknown measurement %q: want accuracy, steps or report", args[0])
}
