package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/ring"
)

func init() {
	register("ring", "one rank of the pure-Go ring allreduce (TCP), the software baseline: same tensor, timing and --json report as allreduce", runRing)
}

func runRing(ctx context.Context, args []string) error {
	fs := newFlags("ring", "--rank R --workers N --addrs HOST:PORT,... [flags]")
	var cfg ring.Config
	fs.IntVar(&cfg.Rank, "rank", 0, "this worker's rank, 0..workers-1")
	fs.IntVar(&cfg.Workers, "workers", 1, "number of ranks in the ring")
	addrs := fs.String("addrs", "", "comma-separated listen address of every rank, in rank order; rank r listens on the r-th and dials the next")
	fs.IntVar(&cfg.ChunkBytes, "chunk-bytes", ring.DefaultChunkBytes, "pipelining granularity in bytes")
	fs.DurationVar(&cfg.DialTimeout, "dial-timeout", time.Minute, "how long to wait for the neighbours to come up")
	elements := fs.Int("elements", 1<<20, "tensor elements (float32)")
	iters := fs.Int("iters", 5, "timed allreduce calls")
	warmup := fs.Int("warmup", 1, "untimed allreduce calls before the timed ones")
	seed := fs.Uint64("seed", 1, "seed of the tensor contents")
	asJSON := fs.Bool("json", false, "print one JSON object with the results on stdout")
	verify := fs.Bool("verify", true, "check the last result against the exact sum")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *elements < 0 || *iters < 1 || *warmup < 0 {
		return fmt.Errorf("want --elements >= 0, --iters >= 1 and --warmup >= 0")
	}
	if *addrs != "" {
		cfg.Addrs = strings.Split(*addrs, ",")
	}

	rep := benchmarks.WorkerReport{Workers: cfg.Workers, Rank: cfg.Rank, Elements: *elements, DType: "float32", Iters: *iters}
	x := make([]float32, *elements)
	err := ringRounds(ctx, cfg, x, *iters, *warmup, *seed, &rep)
	// CPU time of the allreduces, not of the verification that follows.
	if ru, ok := cpuUsage(); ok {
		rep.CPUUserS, rep.CPUSysS = ru.user, ru.sys
	}
	if err == nil && *verify {
		rep.Verified = true
		if verr := checkRingSum(x, *seed, cfg.Workers); verr != nil {
			rep.Verified = false
			err = fmt.Errorf("verification failed after the last allreduce: %w", verr)
		}
	}
	if err != nil {
		rep.Error = err.Error()
	}
	if len(rep.TATs) > 0 {
		sorted := append([]float64(nil), rep.TATs...)
		sort.Float64s(sorted)
		rep.MedianTAT = sorted[len(sorted)/2]
		if rep.MedianTAT > 0 {
			rep.GoodputGbps = float64(*elements*4*8) / rep.MedianTAT / 1e9
		}
	}
	if *asJSON {
		if e := json.NewEncoder(os.Stdout).Encode(rep); e != nil {
			return e
		}
	} else if err == nil {
		fmt.Printf("rank %d/%d: %d x float32, %d iterations, median %.4f s, %.3f Gbit/s, verified=%v\n",
			cfg.Rank, cfg.Workers, *elements, *iters, rep.MedianTAT, rep.GoodputGbps, rep.Verified)
	}
	return err
}

// checkRingFlags refuses what ring.Dial would, naming the flags to change
// rather than ring.Config fields.
func checkRingFlags(cfg ring.Config) error {
	var bad []string
	if cfg.Workers < 1 {
		bad = append(bad, fmt.Sprintf("--workers = %d: the world size must be at least 1", cfg.Workers))
	} else if cfg.Rank < 0 || cfg.Rank >= cfg.Workers {
		bad = append(bad, fmt.Sprintf("--rank = %d: want 0 <= rank < --workers (%d)", cfg.Rank, cfg.Workers))
	}
	if cfg.Workers > 1 && len(cfg.Addrs) != cfg.Workers {
		bad = append(bad, fmt.Sprintf("--addrs has %d addresses for --workers %d: give one listen address per rank, in rank order", len(cfg.Addrs), cfg.Workers))
	}
	if cfg.ChunkBytes < 0 {
		bad = append(bad, fmt.Sprintf("--chunk-bytes = %d: must not be negative (0 takes the default)", cfg.ChunkBytes))
	}
	if cfg.DialTimeout < 0 {
		bad = append(bad, fmt.Sprintf("--dial-timeout = %v: must not be negative (0 takes the default)", cfg.DialTimeout))
	}
	if len(bad) > 0 {
		return errors.New("bad flags: " + strings.Join(bad, "\n"))
	}
	return nil
}

func ringRounds(ctx context.Context, cfg ring.Config, x []float32, iters, warmup int, seed uint64, rep *benchmarks.WorkerReport) error {
	if err := checkRingFlags(cfg); err != nil {
		return err
	}
	r, err := ring.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	barrier := make([]float32, 1)
	var meter cpuMeter
	defer meter.report(rep)
	for it := 0; it < warmup+iters; it++ {
		dtype.Fill(dtype.Float32, dtype.Bytes(x), seed, cfg.Rank)
		// A one-element allreduce returns on a rank only after every rank
		// has entered it: a barrier, so that each TAT starts together.
		if err := r.AllReduceFloat32(ctx, barrier); err != nil {
			return fmt.Errorf("barrier before allreduce %d: %w", it, err)
		}
		meter.begin()
		start := time.Now()
		err := r.AllReduceFloat32(ctx, x)
		tat := time.Since(start)
		meter.end()
		if err != nil {
			return fmt.Errorf("allreduce %d: %w", it, err)
		}
		if it >= warmup {
			rep.TATs = append(rep.TATs, tat.Seconds())
		}
	}
	return nil
}

// checkRingSum compares x with the sum of every rank's input. A float32 sum
// of n terms in any order is within n-1 roundings of the exact one, each at
// most half an ulp of a partial sum bounded by the sum of magnitudes.
func checkRingSum(x []float32, seed uint64, workers int) error {
	for i, got := range x {
		sum, abs := 0.0, 0.0
		for r := 0; r < workers; r++ {
			v := dtype.Sample(dtype.Float32, seed, r, i)
			sum += v
			abs += math.Abs(v)
		}
		tol := float64(workers) * abs * 0x1p-24
		if d := math.Abs(float64(got) - sum); !(d <= tol) {
			return fmt.Errorf("element %d = %g, want %g (±%g)", i, got, sum, tol)
		}
	}
	return nil
}
