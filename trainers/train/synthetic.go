package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/nn"
)

// ThroughputResult is a benchmark model's step time on synthetic input,
// the same on every rank except the times (rank 0's are reported).
type ThroughputResult struct {
	Model      string `json:"model"`
	Backend    string `json:"backend"`
	Workers    int    `json:"workers"`
	Batch      int    `json:"batch"`
	Parameters int64  `json:"parameters"`
	Steps      int    `json:"steps"`
	// Per timed step: wall time, TensorFlow time (gradients + update) and
	// time inside allreduce calls.
	StepS    []float64 `json:"step_s"`
	ComputeS []float64 `json:"compute_s"`
	CommS    []float64 `json:"comm_s"`
	// Medians of the above.
	MedianStepS    float64 `json:"median_step_s"`
	MedianComputeS float64 `json:"median_compute_s"`
	MedianCommS    float64 `json:"median_comm_s"`
	Loss           float64 `json:"loss"`
}

// RunSynthetic trains a benchmark model on random input of its shapes for
// warmup+steps steps (real TensorFlow compute, real allreduce of every
// bucket, averaged update) and reports the timed steps.
func RunSynthetic(ctx context.Context, o Options, b *models.Bench, warmup, steps int, be collective.Backend) (*ThroughputResult, error) {
	opt, err := NewOptimizer(o.Optimizer, o.LR)
	if err != nil {
		return nil, err
	}
	p, err := nn.Build(nn.Spec{
		Seed: o.Seed, OpSeed: o.Seed*7919 + int64(o.Rank) + 1,
		InputShape: b.InputShape, InputType: b.InputType, Classes: b.Classes,
		Model:     func(g *nn.Graph) nn.Layer { return b.Build(g) },
		Optimizer: opt, BucketElems: o.BucketElems, Workers: o.Workers,
		IntraOpThreads: o.IntraOpThreads, InterOpThreads: o.InterOpThreads,
	})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(uint64(o.Seed), uint64(o.Rank)+1))
	x, y, err := b.Synthetic(rng, o.Batch)
	if err != nil {
		return nil, err
	}
	r := &ThroughputResult{Model: b.Name, Backend: o.Backend, Workers: o.Workers, Batch: o.Batch,
		Parameters: nn.ParameterCount(p.G), Steps: steps}
	for s := 0; s < warmup+steps; s++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		loss, bufs, err := p.Gradients(x, y)
		if err != nil {
			return nil, fmt.Errorf("train: step %d: %w", s, err)
		}
		t1 := time.Now()
		for i := range bufs {
			if err := be.AllReduceFloat32(ctx, bufs[i]); err != nil {
				return nil, fmt.Errorf("train: allreduce of bucket %d at step %d: %w", i, s, err)
			}
		}
		t2 := time.Now()
		if err := p.Apply(bufs, s+1); err != nil {
			return nil, err
		}
		t3 := time.Now()
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%s %s step %d/%d: %.3fs (compute %.3fs, allreduce %.3fs) loss %.4f\n",
				b.Name, o.Backend, s+1, warmup+steps, t3.Sub(t0).Seconds(), (t1.Sub(t0) + t3.Sub(t2)).Seconds(), t2.Sub(t1).Seconds(), loss)
		}
		if s < warmup {
			continue
		}
		r.StepS = append(r.StepS, t3.Sub(t0).Seconds())
		r.ComputeS = append(r.ComputeS, (t1.Sub(t0) + t3.Sub(t2)).Seconds())
		r.CommS = append(r.CommS, t2.Sub(t1).Seconds())
		r.Loss = float64(loss)
	}
	r.MedianStepS, r.MedianComputeS, r.MedianCommS = Median(r.StepS), Median(r.ComputeS), Median(r.CommS)
	return r, nil
}

// Median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
