package profile

import (
	"context"
	"fmt"
	"time"

	"github.com/switchml/switchml-go/trainers/collective"
)

// StepResult is one replayed step.
type StepResult struct {
	// StepS is the wall time of the step: forward, backward with the
	// allreduces overlapping it, the wait for the last allreduce, update.
	StepS float64 `json:"step_s"`
	// ComputeS is the replayed compute (forward + backward + update).
	ComputeS float64 `json:"compute_s"`
	// ExposedCommS is StepS - ComputeS: communication not hidden behind
	// the backward pass.
	ExposedCommS float64 `json:"exposed_comm_s"`
	// CommS is the time from the first allreduce's start to the last
	// one's end.
	CommS float64 `json:"comm_s"`
}

// Replayer replays a profile's steps over one backend.
type Replayer struct {
	Profile *Profile
	Buckets []Bucket
	Backend collective.Backend
	// Rank fills the gradients with rank-dependent values; Workers is the
	// job size, which Check needs.
	Rank, Workers int

	bufs [][]float32
}

// NewReplayer prepares the gradient buffers of the buckets.
func NewReplayer(p *Profile, bucketElems int, be collective.Backend, rank, workers int) *Replayer {
	r := &Replayer{Profile: p, Buckets: p.Buckets(bucketElems), Backend: be, Rank: rank, Workers: workers}
	for _, b := range r.Buckets {
		r.bufs = append(r.bufs, make([]float32, b.Elems))
	}
	return r
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Step replays one step. Every rank must replay the same profile with the
// same buckets.
func (r *Replayer) Step(ctx context.Context) (StepResult, error) {
	p := r.Profile
	for i, b := range r.bufs {
		v := float32(r.Rank+1) / float32(1+i)
		for j := range b {
			b[j] = v
		}
	}
	ready := make(chan int, len(r.Buckets))
	type commDone struct {
		first, last time.Time
		err         error
	}
	done := make(chan commDone, 1)
	go func() {
		var c commDone
		for n := 0; n < len(r.Buckets); n++ {
			var i int
			select {
			case i = <-ready:
			case <-ctx.Done():
				c.err = ctx.Err()
				done <- c
				return
			}
			t := time.Now()
			if n == 0 {
				c.first = t
			}
			if err := r.Backend.AllReduceFloat32(ctx, r.bufs[i]); err != nil {
				c.err = fmt.Errorf("profile: allreduce of bucket %d (%d values): %w", i, len(r.bufs[i]), err)
				done <- c
				return
			}
		}
		c.last = time.Now()
		done <- c
	}()

	start := time.Now()
	bwdStart := start.Add(seconds(p.ForwardS))
	for i, b := range r.Buckets {
		if err := sleepUntil(ctx, bwdStart.Add(seconds(b.ReadyS))); err != nil {
			return StepResult{}, err
		}
		ready <- i
	}
	// The backward pass ends with the first unit's gradient (a bucket ends
	// there in any case).
	if err := sleepUntil(ctx, bwdStart.Add(seconds(p.BackwardS))); err != nil {
		return StepResult{}, err
	}
	c := <-done
	if c.err != nil {
		return StepResult{}, c.err
	}
	if err := sleepUntil(ctx, time.Now().Add(seconds(p.UpdateS))); err != nil {
		return StepResult{}, err
	}
	res := StepResult{StepS: time.Since(start).Seconds(), ComputeS: p.ComputeS(), CommS: c.last.Sub(c.first).Seconds()}
	res.ExposedCommS = max(0, res.StepS-res.ComputeS)
	return res, nil
}

// Check verifies that the last step's allreduces summed: rank r
// contributes (r+1)/(i+1) to every value of bucket i.
func (r *Replayer) Check() error {
	w := float64(r.Workers * (r.Workers + 1) / 2)
	for i, b := range r.bufs {
		want := w / float64(i+1)
		for j := 0; j < len(b); j += max(1, len(b)/97) {
			if d := float64(b[j]) - want; d > 1e-3*want || d < -1e-3*want {
				return fmt.Errorf("profile: bucket %d value %d is %g after the allreduce, want %g", i, j, b[j], want)
			}
		}
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
