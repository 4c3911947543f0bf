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
	fs := newFlags("ring", "[--rank R --workers N --addrs HOST:PORT,...] [flags]")
	var w ringWorker
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
	showProgress := fs.String("progress", "auto", progressFlagHelp)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if w.Steps, err = newSteps(fmt.Sprintf("rank %d/%d", w.Ring.Rank, w.Ring.Workers), *showProgress); err != nil {
		return err
	}
	if err := w.checkCounts(); err != nil {
		return err
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

// ringWorker is one rank of the Go ring allreduce baseline, as `switchml
// ring` runs it: the same float32 tensor, timing and report as a SwitchML
// worker's. Its errors name the flags of `switchml ring`.
type ringWorker struct {
	Ring     ring.Config
	Elements int    // tensor elements (float32)
	Iters    int    // timed allreduce calls (at least 1)
	Warmup   int    // untimed calls before the timed ones
	Seed     uint64 // seed of the tensor contents
	Verify   bool   // check the last result against the exact sum
	Steps    *steps // how the long steps show (nil: not at all)
}

// Run dials the ring, runs Warmup+Iters allreduces, each after a barrier
// so that every rank's timing starts together, and checks the last result.
// The report holds the timings, CPU time and the error, if any, which Run
// also returns.
func (w ringWorker) Run(ctx context.Context) (benchmarks.WorkerReport, error) {
	rep := benchmarks.WorkerReport{Workers: w.Ring.Workers, Rank: w.Ring.Rank, Elements: w.Elements, DType: "float32", Iters: w.Iters}
	x := make([]float32, w.Elements)
	err := w.rounds(ctx, x, &rep)
	// CPU time of the allreduces, not of the verification that follows.
	rep.CPUUserS, rep.CPUSysS, _ = benchmarks.ProcessCPU()
	if err == nil && w.Verify {
		err = w.Steps.each(ctx, "verifying the last allreduce", len(x), func(lo, hi int) error {
			if err := checkRingSum(x[lo:hi], lo, w.Seed, w.Ring.Workers); err != nil {
				return fmt.Errorf("verification failed after the last allreduce: %w", err)
			}
			return nil
		})
		rep.Verified = err == nil
	}
	w.Steps.done()
	if err != nil {
		rep.Fail(err)
	}
	if len(rep.TATs) > 0 {
		sorted := append([]float64(nil), rep.TATs...)
		sort.Float64s(sorted)
		rep.MedianTAT = sorted[len(sorted)/2]
		if rep.MedianTAT > 0 {
			rep.GoodputGbps = float64(w.Elements*4*8) / rep.MedianTAT / 1e9
		}
	}
	return rep, err
}

func (w ringWorker) rounds(ctx context.Context, x []float32, rep *benchmarks.WorkerReport) error {
	if err := w.check(); err != nil {
		return err
	}
	r, err := ring.Dial(ctx, w.Ring)
	if err != nil {
		return err
	}
	defer r.Close()
	barrier := make([]float32, 1)
	var meter benchmarks.CPUMeter
	defer meter.Report(rep)
	for it := 0; it < w.Warmup+w.Iters; it++ {
		err := w.Steps.each(ctx, fmt.Sprintf("filling the tensor of allreduce %d", it), len(x), func(lo, hi int) error {
			for i := lo; i < hi; i++ {
				x[i] = ringInput(w.Seed, w.Ring.Rank, i)
			}
			return nil
		})
		if err != nil {
			return err
		}
		// A one-element allreduce returns on a rank only after every rank
		// has entered it: a barrier, so that each TAT starts together.
		if err := r.AllReduceFloat32(ctx, barrier); err != nil {
			return fmt.Errorf("barrier before allreduce %d: %w", it, err)
		}
		w.Steps.begin(fmt.Sprintf("allreduce %d of %d", it, w.Warmup+w.Iters))
		meter.Begin()
		start := time.Now()
		err = r.AllReduceFloat32(ctx, x)
		tat := time.Since(start)
		meter.End()
		if err != nil {
			return fmt.Errorf("allreduce %d: %w", it, err)
		}
		if it >= w.Warmup {
			rep.TATs = append(rep.TATs, tat.Seconds())
		}
	}
	return nil
}

// check refuses what ring.Dial would, naming the flags to change rather
// than ring.Config fields.
func (w ringWorker) check() error {
	if err := w.checkCounts(); err != nil {
		return err
	}
	cfg := w.Ring
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

// checkCounts refuses a negative tensor size or warm-up, or no timed call.
func (w ringWorker) checkCounts() error {
	if w.Elements < 0 || w.Iters < 1 || w.Warmup < 0 {
		return fmt.Errorf("--elements %d, --iters %d, --warmup %d: want --elements >= 0, --iters >= 1 and --warmup >= 0", w.Elements, w.Iters, w.Warmup)
	}
	return nil
}

// checkRingSum compares x, the values from index lo on, with the sum of
// every rank's input. A float32 sum
// of n terms in any order is within n-1 roundings of the exact one, each at
// most half an ulp of a partial sum bounded by the sum of magnitudes.
func checkRingSum(x []float32, lo int, seed uint64, workers int) error {
	for j, got := range x {
		i := lo + j
		sum, abs := 0.0, 0.0
		for r := 0; r < workers; r++ {
			v := float64(ringInput(seed, r, i))
			sum += v
			abs += math.Abs(v)
		}
		tol := float64(workers) * abs * 0x1p-24
		if d := math.Abs(float64(got) - sum); !(d <= tol) {
			return fmt.Errorf("%w: element %d = %g, want %g (±%g)", dtype.ErrUnexpected, i, got, sum, tol)
		}
	}
	return nil
}

// ringInput is element i of rank's input: the float32 test data
// `switchml allreduce` fills its tensors with (dtype.Sample), so each rank
// can compute every other rank's input to check the sum by itself.
func ringInput(seed uint64, rank, i int) float32 {
	return float32(dtype.Sample(dtype.Float32, seed, rank, i))
}
