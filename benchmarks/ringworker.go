package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"github.com/switchml/switchml-go/switchml/dtype"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/switchml/switchml-go/switchml/ring"
)

// RingWorker is one rank of the Go ring allreduce baseline, as `switchml
// ring` runs it: the same float32 tensor, timing and report as a SwitchML
// worker's. Its errors name the flags of `switchml ring`.
type RingWorker struct {
	Ring     ring.Config
	Elements int    // tensor elements (float32)
	Iters    int    // timed allreduce calls (at least 1)
	Warmup   int    // untimed calls before the timed ones
	Seed     uint64 // seed of the tensor contents
	Verify   bool   // check the last result against the exact sum
}

// Run dials the ring, runs Warmup+Iters allreduces, each after a barrier
// so that every rank's timing starts together, and checks the last result.
// The report holds the timings, CPU time and the error, if any, which Run
// also returns.
func (w RingWorker) Run(ctx context.Context) (WorkerReport, error) {
	rep := WorkerReport{Workers: w.Ring.Workers, Rank: w.Ring.Rank, Elements: w.Elements, DType: "float32", Iters: w.Iters}
	x := make([]float32, w.Elements)
	err := w.rounds(ctx, x, &rep)
	// CPU time of the allreduces, not of the verification that follows.
	rep.CPUUserS, rep.CPUSysS, _ = ProcessCPU()
	if err == nil && w.Verify {
		rep.Verified = true
		if verr := checkRingSum(x, w.Seed, w.Ring.Workers); verr != nil {
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
			rep.GoodputGbps = float64(w.Elements*4*8) / rep.MedianTAT / 1e9
		}
	}
	return rep, err
}

func (w RingWorker) rounds(ctx context.Context, x []float32, rep *WorkerReport) error {
	if err := w.check(); err != nil {
		return err
	}
	r, err := ring.Dial(ctx, w.Ring)
	if err != nil {
		return err
	}
	defer r.Close()
	barrier := make([]float32, 1)
	var meter CPUMeter
	defer meter.Report(rep)
	for it := 0; it < w.Warmup+w.Iters; it++ {
		for i := range x {
			x[i] = ringInput(w.Seed, w.Ring.Rank, i)
		}
		// A one-element allreduce returns on a rank only after every rank
		// has entered it: a barrier, so that each TAT starts together.
		if err := r.AllReduceFloat32(ctx, barrier); err != nil {
			return fmt.Errorf("barrier before allreduce %d: %w", it, err)
		}
		meter.Begin()
		start := time.Now()
		err := r.AllReduceFloat32(ctx, x)
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
func (w RingWorker) check() error {
	if w.Elements < 0 || w.Iters < 1 || w.Warmup < 0 {
		return errors.New("want --elements >= 0, --iters >= 1 and --warmup >= 0")
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

// checkRingSum compares x with the sum of every rank's input. A float32 sum
// of n terms in any order is within n-1 roundings of the exact one, each at
// most half an ulp of a partial sum bounded by the sum of magnitudes.
func checkRingSum(x []float32, seed uint64, workers int) error {
	for i, got := range x {
		sum, abs := 0.0, 0.0
		for r := 0; r < workers; r++ {
			v := float64(ringInput(seed, r, i))
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

// ringInput is element i of rank's input: the float32 test data
// `switchml allreduce` fills its tensors with (dtype.Sample), so each rank
// can compute every other rank's input to check the sum by itself.
func ringInput(seed uint64, rank, i int) float32 {
	return float32(dtype.Sample(dtype.Float32, seed, rank, i))
}
