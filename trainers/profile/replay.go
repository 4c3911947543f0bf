package profile

import (
	"cmp"
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
	// BlockElems is the values per packet of a SwitchML backend, whose
	// blocks bound the error Check allows on recorded gradients (0: 256).
	BlockElems int
	// Sequential holds every allreduce back until the whole backward pass
	// is over, as the train command's loop does (gradients, then the
	// buckets' allreduces one after the other, then the update), instead
	// of overlapping them with the backward pass.
	Sequential bool

	bufs [][]float32
	// starts are the buckets' offsets in the model's gradient.
	starts []int
	// grads and reader, when set, hold the recorded gradients the buckets
	// are filled from (UseGradients).
	grads  *Gradients
	reader *GradientReader
}

// NewReplayer prepares the gradient buffers of the buckets. A bucket of
// more than maxBuffer values (when maxBuffer > 0) gets a buffer of
// maxBuffer values and is allreduced through it piece by piece: the
// paper-size models' gradients (over a GB) would not fit in memory once
// per worker of the rack.
func NewReplayer(p *Profile, bucketElems int, be collective.Backend, rank, workers, maxBuffer int) *Replayer {
	r := &Replayer{Profile: p, Buckets: p.Buckets(bucketElems), Backend: be, Rank: rank, Workers: workers}
	start := 0
	for _, b := range r.Buckets {
		n := b.Elems
		if maxBuffer > 0 {
			n = min(n, maxBuffer)
		}
		r.bufs = append(r.bufs, make([]float32, n))
		r.starts = append(r.starts, start)
		start += b.Elems
	}
	return r
}

// UseGradients fills the buckets with this rank's recorded gradient
// instead of constants, from g, which OpenGradients checked against the
// replay's buckets. Close releases the file.
func (r *Replayer) UseGradients(g *Gradients) error {
	if r.Rank >= g.Ranks {
		return fmt.Errorf("profile: %s holds no gradient of rank %d (%d ranks)", g.Dir, r.Rank, g.Ranks)
	}
	rd, err := OpenGradientReader(GradientsFile(g.Dir, r.Rank))
	if err != nil {
		return err
	}
	if r.reader != nil {
		r.reader.Close()
	}
	r.grads, r.reader = g, rd
	return nil
}

// Close releases the recorded gradients' file, if any.
func (r *Replayer) Close() error {
	if r.reader == nil {
		return nil
	}
	err := r.reader.Close()
	r.reader = nil
	return err
}

// fill sets bucket i's buffer to this rank's contribution to its values
// from off on: the recorded gradient, or the constant (rank+1)/(i+1).
func (r *Replayer) fill(i, off int) error {
	b := r.bufs[i][:min(len(r.bufs[i]), r.Buckets[i].Elems-off)]
	if r.reader != nil {
		return r.reader.Read(b, r.starts[i]+off)
	}
	v := float32(r.Rank+1) / float32(1+i)
	for j := range b {
		b[j] = v
	}
	return nil
}

// allReduce sums bucket i, through its buffer in pieces when the buffer is
// smaller than the bucket.
func (r *Replayer) allReduce(ctx context.Context, i int) error {
	buf := r.bufs[i]
	for off := 0; off < r.Buckets[i].Elems; off += len(buf) {
		piece := buf[:min(len(buf), r.Buckets[i].Elems-off)]
		if off > 0 {
			if err := r.fill(i, off); err != nil {
				return err
			}
		}
		if err := r.Backend.AllReduceFloat32(ctx, piece); err != nil {
			return fmt.Errorf("profile: allreduce of bucket %d (values %d..%d of %d): %w", i, off, off+len(piece), r.Buckets[i].Elems, err)
		}
	}
	return nil
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
	for i := range r.bufs {
		if err := r.fill(i, 0); err != nil {
			return StepResult{}, err
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
			if err := r.allReduce(ctx, i); err != nil {
				c.err = err
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
		at := b.ReadyS
		if r.Sequential {
			at = p.BackwardS
		}
		if err := sleepUntil(ctx, bwdStart.Add(seconds(at))); err != nil {
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

// Check verifies that the last step's allreduces summed, in bucket i (in
// its last piece when it went through its buffer in pieces): with recorded
// gradients, every value against the sum of every rank's recorded values
// (Gradients.CheckSum); with constants, where rank r contributes
// (r+1)/(i+1) to every value, about a hundred values of each bucket.
func (r *Replayer) Check() error {
	w := float64(r.Workers * (r.Workers + 1) / 2)
	for i, b := range r.bufs {
		off := 0
		if last := r.Buckets[i].Elems % len(b); last > 0 {
			b = b[:last]
			off = r.Buckets[i].Elems - last
		} else if len(b) > 0 {
			off = r.Buckets[i].Elems - len(b)
		}
		if r.grads != nil {
			if err := r.grads.CheckSum(b, r.starts[i]+off, r.Workers, cmp.Or(r.BlockElems, 256)); err != nil {
				return fmt.Errorf("%w (bucket %d)", err, i)
			}
			continue
		}
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
