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
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchml/switchml-go/trainers/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	cli.Exit("rackbench", err)
}

const usage = `Usage: rackbench <measurement> [flags]

Real TensorFlow training on the emulated rack (needs root).

Measurements:
  accuracy  time to a test accuracy per backend, with every epoch's accuracy
  steps     step time of benchmark models beside the profile replay's prediction
  report    rewrite the tables and plots from the JSON files

Run 'rackbench <measurement> --help' for its flags.
`

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return cli.Usagef("rackbench", "name a measurement: accuracy, steps or report")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return nil
	case "accuracy":
		return accuracy(ctx, args[1:])
	case "steps":
		return steps(ctx, args[1:])
	case "report":
		return report(args[1:])
	}
	return cli.Usagef("rackbench", "unknown measurement %q: want accuracy, steps or report", args[0])
}
