// Command wireprecision compares, on the gradients that density --dump
// recorded, the sums that SwitchML's 32-bit and 16-bit wires return with
// the exact sum, beside a bfloat16 ring allreduce in Gloo's order of the
// same tensors (package precision), and writes the tables as Markdown and
// JSON lines.
//
//	go run ./cmd/density --models ncf --workers 8 --warmup 1 --steps 1
//	go run ./cmd/density --models bert --workers 8 --warmup 1 --steps 1 --lr 5e-5
//	go run ./cmd/wireprecision --models ncf,bert --workers 8 --out results/wire16-precision
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchml/switchml-go/trainers/density"
	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/internal/rackrun"
	"github.com/switchml/switchml-go/trainers/precision"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	cli.Exit("wireprecision", err)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("wireprecision", "[flags]", "Error of the 32-bit and 16-bit wires' sums and of a bfloat16 ring's on recorded gradients.")
	var (
		modelsF, workersFor, dir, out string
		o                             precision.Options
	)
	fs.StringVar(&modelsF, "models", "ncf,bert", "recorded gradients to compare: directories under --dir, DIR/<model> as density --dump writes them (or renamed)")
	fs.StringVar(&dir, "dir", density.DefaultDumpDir(), "directory of the recorded gradients (density's --dump)")
	fs.IntVar(&o.Workers, "workers", 8, "workers whose gradients are summed, the first recorded ranks (0: all recorded)")
	fs.StringVar(&workersFor, "workers-for", "", "workers of some models instead of --workers, e.g. bert=4")
	fs.IntVar(&o.PacketElements, "packet-elements", 256, "values per packet at 32 bits (twice as many at 16 bits): switchml's --packet-elements")
	fs.StringVar(&out, "out", "", "write precision.md and precision.jsonl to this directory (e.g. results/wire16-precision)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	perModel, err := cli.PerModel("wireprecision", "workers-for", workersFor, "workers", 2)
	if err != nil {
		return err
	}
	h := &precision.Header{Kind: "run", Command: cli.CommandLine("go run ./cmd/wireprecision", args),
		Commit: rackrun.Commit(ctx), Date: time.Now().UTC().Format(time.RFC3339)}
	var results []*precision.Result
	for _, m := range strings.Split(modelsF, ",") {
		m = strings.TrimSpace(m)
		mo := o
		if n, ok := perModel[m]; ok {
			mo.Workers = n
		}
		r, err := precision.Compare(ctx, filepath.Join(dir, m), mo)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "%s: %d values, %d workers, %.1fs\n", m, r.Elements, r.Workers, r.Seconds)
		results = append(results, r)
	}
	if err := precision.Markdown(stdout, h, results); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	if err := precision.Markdown(&md, h, results); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "precision.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	jf, err := os.Create(filepath.Join(out, "precision.jsonl"))
	if err != nil {
		return err
	}
	if err := density.WriteJSONL(jf, h); err != nil {
		jf.Close()
		return err
	}
	for _, r := range results {
		if err := density.WriteJSONL(jf, r); err != nil {
			jf.Close()
			return err
		}
	}
	return jf.Close()
}
