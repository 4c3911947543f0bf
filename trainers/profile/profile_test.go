package profile

import (
	"context"
	"math"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/models"
)

func testProfile() *Profile {
	return &Profile{Model: "t", Parameters: 1000, ForwardS: 0.01, BackwardS: 0.03, UpdateS: 0.005, Units: []Unit{
		{Name: "a", Parameters: 600, ForwardS: 0.004, BackwardS: 0.01},
		{Name: "b", Parameters: 300, ForwardS: 0.003, BackwardS: 0.01},
		{Name: "c", Parameters: 100, ForwardS: 0.003, BackwardS: 0.01},
	}}
}

func TestBucketsFollowBackwardOrder(t *testing.T) {
	p := testProfile()
	bs := p.Buckets(350)
	// c (100) + b (300) reach 350 first; a (600) is the last bucket.
	if len(bs) != 2 || bs[0].Elems != 400 || bs[1].Elems != 600 {
		t.Fatalf("buckets %+v", bs)
	}
	if bs[0].ReadyS >= bs[1].ReadyS {
		t.Errorf("bucket ready times not increasing: %+v", bs)
	}
	if got := p.Buckets(0); len(got) != 3 || got[0].Units[0] != "c" {
		t.Errorf("one bucket per unit: %+v", got)
	}
}

// Two ranks replay over the exact backend: the sums are right, and a step
// lasts at least the replayed compute.
func TestReplayOverStar(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	star := collective.ServeStar(ctx, ln, 2)
	defer star.Close()
	p := testProfile()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	res := make([]StepResult, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			be, err := collective.DialStar(ctx, star.Addr(), r, 2)
			if err != nil {
				errs[r] = err
				return
			}
			defer be.Close()
			// Bucket a (600 values) goes through a 250-value buffer in
			// three pieces.
			rp := NewReplayer(p, 350, be, r, 2, 250)
			for s := 0; s < 2; s++ {
				if res[r], errs[r] = rp.Step(ctx); errs[r] != nil {
					return
				}
			}
			errs[r] = rp.Check()
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if res[r].StepS < p.ComputeS() || res[r].ComputeS != p.ComputeS() {
			t.Errorf("rank %d: step %+v shorter than the compute %g", r, res[r], p.ComputeS())
		}
	}
}

// Measuring a real model yields one unit per layer with parameters, whose
// parameter counts add up to the model's, and a profile that round-trips.
func TestMeasureNCF(t *testing.T) {
	b := models.LookupBench("ncf")
	p, err := Measure(context.Background(), b, Options{Batch: 16, Reps: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, u := range p.Units {
		sum += u.Parameters
		if u.ForwardS < 0 || u.BackwardS < 0 {
			t.Errorf("negative time in %+v", u)
		}
	}
	if sum != b.Parameters || p.Parameters != b.Parameters || len(p.Units) != 5 {
		t.Errorf("%d units with %d parameters, model has %d", len(p.Units), sum, b.Parameters)
	}
	path := filepath.Join(t.TempDir(), "p.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	q, err := Load(path)
	if err != nil || q.Parameters != p.Parameters || len(q.Units) != len(p.Units) {
		t.Fatalf("round trip: %v %+v", err, q)
	}
}

// The checked-in profiles are of the models' current definitions.
func TestCheckedInProfiles(t *testing.T) {
	paths, _ := filepath.Glob("../profiles/*.json")
	for _, path := range paths {
		p, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, u := range p.Units {
			sum += u.Parameters
		}
		if p.DerivedFrom != "" {
			// A paper-size model: scaled from a measured one.
			if models.LookupBench(p.DerivedFrom) == nil || p.Scaling == "" || sum != p.Parameters {
				t.Errorf("%s: derived from %q (%q): units hold %d parameters, profile says %d", path, p.DerivedFrom, p.Scaling, sum, p.Parameters)
			}
			continue
		}
		b := models.LookupBench(p.Model)
		if b == nil {
			t.Errorf("%s: unknown model %q", path, p.Model)
			continue
		}
		if sum != b.Parameters || p.Parameters != b.Parameters {
			t.Errorf("%s: units hold %d parameters, profile says %d, model has %d", path, sum, p.Parameters, b.Parameters)
		}
	}
}

// recorder is a one-worker backend that notes when each allreduce starts.
type recorder struct {
	mu     sync.Mutex
	starts []time.Time
	sizes  []int
}

func (r *recorder) AllReduceFloat32(ctx context.Context, buf []float32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, time.Now())
	r.sizes = append(r.sizes, len(buf))
	return nil
}

func (r *recorder) Close() error { return nil }

// A sequential replay starts no allreduce before the backward pass is
// over; an overlapping one starts the first bucket's during it.
func TestSequentialReplayWaitsForBackward(t *testing.T) {
	p := testProfile()
	p.BackwardS = 0.3
	for i := range p.Units {
		p.Units[i].BackwardS = 0.1
	}
	for _, seq := range []bool{false, true} {
		rec := &recorder{}
		rp := NewReplayer(p, 0, rec, 0, 1, 0)
		rp.Sequential = seq
		start := time.Now()
		if _, err := rp.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := rp.Check(); err != nil {
			t.Fatal(err)
		}
		if len(rec.starts) != 3 {
			t.Fatalf("sequential=%v: %d allreduces, want one per unit (3)", seq, len(rec.starts))
		}
		first := rec.starts[0].Sub(start).Seconds()
		end := p.ForwardS + p.BackwardS
		if seq && first < end {
			t.Errorf("sequential replay started an allreduce %.3fs into the step, before the backward pass ended (%.3fs)", first, end)
		}
		if !seq && first >= end {
			t.Errorf("overlapping replay started its first allreduce %.3fs into the step, after the backward pass (%.3fs)", first, end)
		}
	}
}

// Buckets larger than the buffer go through it in pieces that cover the
// bucket exactly, in order.
func TestReplayInPieces(t *testing.T) {
	p := testProfile()
	rec := &recorder{}
	rp := NewReplayer(p, 0, rec, 0, 1, 250)
	if _, err := rp.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rp.Check(); err != nil {
		t.Fatal(err)
	}
	// Buckets from the last unit down: c (100), b (300), a (600).
	want := []int{100, 250, 50, 250, 250, 100}
	if !slices.Equal(rec.sizes, want) {
		t.Errorf("allreduce sizes %v, want %v", rec.sizes, want)
	}
}

// A derived profile resizes and drops units, scales their backward time
// and the update with their parameters, and keeps the forward time.
func TestDerive(t *testing.T) {
	p := testProfile() // a 600, b 300, c 100; backward 0.01 each
	q, err := Derive(p, "t-big", "test", map[string]int64{"a": 6000, "c": 0})
	if err != nil {
		t.Fatal(err)
	}
	if q.Model != "t-big" || q.DerivedFrom != "t" || q.Parameters != 6300 || len(q.Units) != 2 {
		t.Fatalf("derived %+v", q)
	}
	if a := q.Units[0]; a.Parameters != 6000 || math.Abs(a.BackwardS-0.1) > 1e-12 || a.ForwardS != 0.004 {
		t.Errorf("unit a %+v, want 6000 parameters, backward 0.1 s, forward 0.004 s", a)
	}
	if math.Abs(q.BackwardS-0.11) > 1e-12 || math.Abs(q.UpdateS-0.005*6.3) > 1e-12 || q.ForwardS != p.ForwardS {
		t.Errorf("backward %g, update %g, forward %g; want 0.11, %g, %g", q.BackwardS, q.UpdateS, q.ForwardS, 0.005*6.3, p.ForwardS)
	}
	if p.Units[0].Parameters != 600 {
		t.Errorf("Derive changed the measured profile: %+v", p.Units[0])
	}
	if _, err := Derive(p, "x", "", map[string]int64{"nope": 1}); err == nil {
		t.Error("an unknown unit was accepted")
	}
}
