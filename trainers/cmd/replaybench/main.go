// Command replaybench replays the compute profiles of the benchmark models
// (trainers/profiles/*.json, written by `train --profile-out`) with the real
// allreduce of each model's gradients, on the emulated rack of package
// benchmarks/rack: one network namespace per worker, one for the switch,
// every port shaped to the same rate. For each rate, model and backend
// (switchml through the software switch in the switch namespace, dense or
// block-sparse, the Go ring, Gloo through torch.distributed) it runs the
// workers, and it writes the results as JSON, a Markdown table and a PNG
// plot. It needs root.
//
// The gradient buffers hold constants, or with --gradients DIR a recorded
// training step: rank r's buckets hold DIR/<model>/rank<r>.f32 (as the
// density command's --dump writes them), with every backend, and each
// worker checks every value of its results against the sum of all ranks'
// files. A model without a directory there replays constants.
//
//	go build -o /tmp/replaybench ./cmd/replaybench && sudo /tmp/replaybench --out results/replay
//
// The worker subcommand is what runs in each worker namespace; `replaybench
// report DIR...` rewrites the table and the plot from DIR/replay.json, and
// `replaybench merge --out DIR A/replay.json B/replay.json...` combines
// runs into one table that names each run's command and commit.
// `replaybench derive` writes the profile of a larger model scaled from a
// measured one (the paper-size models); `replaybench profiles` lists the
// captured profiles as a table.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/profile"
	"github.com/switchml/switchml-go/trainers/train"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	stop()
	cli.Exit("replaybench", err)
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "worker":
			return worker(ctx, args[1:])
		case "report":
			return report(args[1:])
		case "merge":
			return merge(args[1:])
		case "derive":
			return derive(args[1:])
		case "profiles":
			return profiles(args[1:])
		}
	}
	return bench(ctx, args)
}

// WorkerResult is what a worker prints.
type WorkerResult struct {
	Backend string               `json:"backend"`
	Model   string               `json:"model"`
	Rank    int                  `json:"rank"`
	Workers int                  `json:"workers"`
	Buckets int                  `json:"buckets"`
	Steps   []profile.StepResult `json:"steps"`
	// Gradients is the directory of the recorded gradients the buckets
	// held (empty: constants).
	Gradients string `json:"gradients,omitempty"`
	// Switch is what a switchml session counted over the whole run, steps
	// and checks included (nil for the other backends).
	Switch *SwitchStats `json:"switch,omitempty"`
}

// SwitchStats is the part of a switchml session's counters the report
// shows.
type SwitchStats struct {
	AllReduces  uint64 `json:"allreduces"`
	DenseCalls  uint64 `json:"dense_calls"`
	SentBytes   uint64 `json:"sent_bytes"`
	Retransmits uint64 `json:"retransmits"`
}

func worker(ctx context.Context, args []string) error {
	fs := cli.NewFlagSet("replaybench worker", "[flags]", "One rank of a replay, as the bench runs it in each worker namespace.")
	prof := fs.String("profile", "", "profile JSON")
	backend := fs.String("backend", "ring", "ring, switchml, switchml-sparse or exact")
	rank := fs.Int("rank", 0, "rank")
	workers := fs.Int("workers", 1, "workers")
	ringAddrs := fs.String("ring-addrs", "", "ring: comma-separated listen address of every rank")
	starAddr := fs.String("star-addr", "", "exact: star server address")
	controller := fs.String("controller", "", "switchml: controller address")
	job := fs.String("job", "replay", "switchml: job name")
	lanes := fs.Int("lanes", 0, "switchml: lanes (0 = default)")
	window := fs.Int("window", 0, "switchml: packets in flight per lane (0 = default)")
	pe := fs.Int("packet-elements", 0, "switchml: values per packet (0 = default)")
	bucketElems := fs.Int("bucket-elems", 25<<20/4, "values per gradient bucket")
	steps := fs.Int("steps", 3, "timed steps")
	warmup := fs.Int("warmup", 1, "untimed steps first")
	maxBuffer := fs.Int("max-buffer-elems", 0, "allreduce a bucket larger than this in pieces through one buffer of this many values (0 = whole buckets)")
	sequential := fs.Bool("sequential", false, "allreduce the buckets only after the whole backward pass, as the train command does, instead of overlapping them with it")
	gradients := fs.String("gradients", "", "fill the buckets with this rank's recorded gradient DIR/rank<r>.f32 instead of constants (DIR holds the model's files and meta.json)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	runtime.GOMAXPROCS(max(2, runtime.NumCPU()))
	p, err := profile.Load(*prof)
	if err != nil {
		return err
	}
	kind, err := collective.ParseKind(*backend)
	if err != nil {
		return err
	}
	var ring []string
	if *ringAddrs != "" {
		ring = strings.Split(*ringAddrs, ",")
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	be, err := collective.Dial(dctx, collective.Config{Kind: kind, Rank: *rank, Workers: *workers,
		RingAddrs: ring, StarAddr: *starAddr, Controller: *controller, Job: *job,
		Lanes: *lanes, Window: *window, PacketElements: *pe})
	cancel()
	if err != nil {
		return err
	}
	defer be.Close()
	rp := profile.NewReplayer(p, *bucketElems, be, *rank, *workers, *maxBuffer)
	rp.Sequential, rp.BlockElems = *sequential, *pe
	if *gradients != "" {
		g, err := profile.OpenGradients(*gradients, p, rp.Buckets, *workers)
		if err != nil {
			return err
		}
		if err := rp.UseGradients(g); err != nil {
			return err
		}
		defer rp.Close()
	}
	out := WorkerResult{Backend: *backend, Model: p.Model, Rank: *rank, Workers: *workers, Buckets: len(rp.Buckets), Gradients: *gradients}
	one := make([]float32, 1)
	for s := 0; s < *warmup+*steps; s++ {
		// A one-value allreduce lines the ranks up before each step.
		if err := be.AllReduceFloat32(ctx, one); err != nil {
			return fmt.Errorf("barrier before step %d: %w", s, err)
		}
		r, err := rp.Step(ctx)
		if err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		fmt.Fprintf(os.Stderr, "[rank %d] %s %s step %d: %.3fs (compute %.3fs, exposed comm %.3fs)\n",
			*rank, p.Model, *backend, s+1, r.StepS, r.ComputeS, r.ExposedCommS)
		if s >= *warmup {
			out.Steps = append(out.Steps, r)
		}
	}
	if err := rp.Check(); err != nil {
		return err
	}
	if s, ok := be.(interface{ Stats() switchml.Stats }); ok {
		st := s.Stats()
		out.Switch = &SwitchStats{AllReduces: st.AllReduces, DenseCalls: st.DenseCalls, SentBytes: st.SentBytes, Retransmits: st.Retransmits}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// medians of a worker's steps.
func medians(steps []profile.StepResult) (step, compute, exposed float64) {
	var a, b, c []float64
	for _, s := range steps {
		a, b, c = append(a, s.StepS), append(b, s.ComputeS), append(c, s.ExposedCommS)
	}
	return train.Median(a), train.Median(b), train.Median(c)
}
