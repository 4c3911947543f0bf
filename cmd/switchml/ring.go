package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/switchml/ring"
)

func init() {
	register("ring", "one rank of the pure-Go ring allreduce (TCP), the software baseline: same tensor, timing and --json report as allreduce", runRing)
}

func runRing(ctx context.Context, args []string) error {
	fs := newFlags("ring", "[--rank R --workers N --addrs HOST:PORT,...] [flags]")
	var w benchmarks.RingWorker
	fs.IntVar(&w.Ring.Rank, "rank", 0, "this worker's rank, 0..workers-1")
	fs.IntVar(&w.Ring.Workers, "workers", 1, "number of ranks in the ring")
	addrs := fs.String("addrs", "", "comma-separated listen address of every rank, in rank order; rank r listens on the r-th and dials the next")
	fs.IntVar(&w.Ring.ChunkBytes, "chunk-bytes", ring.DefaultChunkBytes, "pipelining granularity in bytes")
	fs.DurationVar(&w.Ring.DialTimeout, "dial-timeout", time.Minute, "how long to wait for the neighbours to come up")
	fs.IntVar(&w.Elements, "elements", 1<<20, "tensor elements (float32)")
	fs.IntVar(&w.Iters, "iters", 5, "timed allreduce calls")
	fs.IntVar(&w.Warmup, "warmup", 1, "untimed allreduce calls before the timed ones")
	fs.Uint64Var(&w.Seed, "seed", 1, "seed of the tensor contents")
	asJSON := fs.Bool("json", false, "print one JSON object with the results on stdout")
	fs.BoolVar(&w.Verify, "verify", true, "check the last result against the exact sum")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if w.Elements < 0 || w.Iters < 1 || w.Warmup < 0 {
		return errors.New("want --elements >= 0, --iters >= 1 and --warmup >= 0")
	}
	if *addrs != "" {
		w.Ring.Addrs = strings.Split(*addrs, ",")
	}
	rep, err := w.Run(ctx)
	if *asJSON {
		if e := json.NewEncoder(os.Stdout).Encode(rep); e != nil {
			return e
		}
	} else if err == nil {
		fmt.Printf("rank %d/%d: %d x float32, %d iterations, median %.4f s, %.3f Gbit/s, verified=%v\n",
			rep.Rank, rep.Workers, rep.Elements, rep.Iters, rep.MedianTAT, rep.GoodputGbps, rep.Verified)
	}
	return err
}
