// Command density measures the block density of the gradients of the
// benchmark models with embedding tables (ncf, deeplight, lstm by default;
// bert too) over real TensorFlow training steps, writes one step's gradients of every rank for
// the allreduce benchmarks, and the results as Markdown and JSON lines
// (package density).
//
//	go run ./cmd/density --out results/density
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/trainers/density"
	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/internal/rackrun"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	cli.Exit("density", err)
}

func ints(s, flagName string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, cli.Usagef("density", "--%s %q: want positive integers separated by commas", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := cli.NewFlagSet("density", "[flags]", "Block density of the real gradients of ncf, deeplight and lstm (and bert) over real TensorFlow steps.")
	var (
		modelsF, unionsF, blocksF, stepsForF, out, dump, opt string
		o                                                    density.Options
		lr                                                   float64
	)
	fs.StringVar(&modelsF, "models", "ncf,deeplight,lstm", "benchmark models with an embedding unit (ncf, deeplight, lstm, bert)")
	fs.IntVar(&o.Workers, "workers", 8, "simulated workers: batches per step, each from the same weights")
	fs.StringVar(&unionsF, "unions", "2,8", "worker counts whose union density is reported (the first n workers of each step)")
	fs.StringVar(&blocksF, "blocks", "256,64", "values per packet to measure (256: SwitchML's default packet; 64: the P4 programs')")
	fs.IntVar(&o.Steps, "steps", 10, "measured steps per model")
	fs.IntVar(&o.Warmup, "warmup", 1, "training steps before the measured ones")
	fs.StringVar(&stepsForF, "steps-for", "", "measured steps of some models instead of --steps, e.g. lstm=5")
	fs.IntVar(&o.BucketElems, "bucket-elems", 1<<18, "gradient values per allreduce bucket (train's --bucket-elems)")
	fs.StringVar(&opt, "optimizer", "adam", "optimizer: adam or momentum (train's)")
	fs.Float64Var(&lr, "lr", 0, "learning rate (0 = 1e-3 for adam, 0.05 for momentum)")
	fs.Int64Var(&o.Seed, "seed", 1, "seed of the weights and the batches")
	fs.IntVar(&o.Threads, "threads", runtime.NumCPU(), "TensorFlow intra- and inter-op threads")
	fs.StringVar(&o.Profiles, "profiles", "profiles", "directory of the model profiles (batch sizes, units)")
	fs.StringVar(&dump, "dump", density.DefaultDumpDir(), "write the gradients of every worker at the first measured step to DIR/<model>/rank<r>.f32 and meta.json (empty: do not)")
	fs.StringVar(&out, "out", "", "write density.md and density.jsonl to this directory (e.g. results/density)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	var err error
	if o.Unions, err = ints(unionsF, "unions"); err != nil {
		return err
	}
	if o.BlockSizes, err = ints(blocksF, "blocks"); err != nil {
		return err
	}
	if o.Steps < 1 || o.Warmup < 0 {
		return cli.Usagef("density", "--steps %d --warmup %d: want at least one measured step and no negative warm-up", o.Steps, o.Warmup)
	}
	if o.StepsFor, err = cli.PerModel("density", "steps-for", stepsForF, "steps", 1); err != nil {
		return err
	}
	o.Models = strings.Split(modelsF, ",")
	o.Optimizer, o.LR, o.DumpDir, o.Progress = opt, float32(lr), dump, stderr
	o.Commit = rackrun.Commit(ctx)

	h := &density.Header{Kind: "run", Command: cli.CommandLine("go run ./cmd/density", args), Commit: o.Commit,
		Date: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU()}
	h.Options.Workers, h.Options.Unions, h.Options.BlockSizes, h.Options.Warmup = o.Workers, o.Unions, o.BlockSizes, o.Warmup
	h.Options.BucketElems, h.Options.Optimizer, h.Options.Seed, h.Options.Threads = o.BucketElems, o.Optimizer, o.Seed, o.Threads

	var jsonl *os.File
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if jsonl, err = os.Create(filepath.Join(out, "density.jsonl")); err != nil {
			return err
		}
		defer jsonl.Close()
		if err := density.WriteJSONL(jsonl, h); err != nil {
			return err
		}
		o.OnStep = func(r *density.StepRecord) {
			if err := density.WriteJSONL(jsonl, r); err != nil {
				fmt.Fprintln(stderr, "density: writing a step to density.jsonl:", err)
			}
		}
	}
	results, err := density.Run(ctx, o)
	if err != nil {
		return err
	}
	papers, err := density.Papers(o.Profiles, results)
	if err != nil {
		return err
	}
	density.Markdown(os.Stdout, h, results, papers)
	if out == "" {
		return nil
	}
	for _, r := range results {
		if err := density.WriteJSONL(jsonl, r); err != nil {
			return err
		}
	}
	for _, p := range papers {
		if err := density.WriteJSONL(jsonl, p); err != nil {
			return err
		}
	}
	md, err := os.Create(filepath.Join(out, "density.md"))
	if err != nil {
		return err
	}
	density.Markdown(md, h, results, papers)
	return md.Close()
}
