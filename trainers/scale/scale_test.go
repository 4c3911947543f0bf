package scale

import (
	"math"
	"testing"

	"github.com/switchml/switchml-go/trainers/profile"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// Hand-computed: 100 MB among 4 workers at 1 GB/s, no headers, 10 µs per
// step: the ring moves 2*3/4*100 MB = 150 MB in 0.15 s plus 6 steps of
// 10 µs; SwitchML moves 100 MB in 0.1 s plus one 10 µs round trip.
func TestTransferTimes(t *testing.T) {
	tr := Transport{Name: "t", Efficiency: 1, Payload: 1000, Latency: 10e-6}
	if got := RingTime(tr, 100e6, 4, 1e9); !near(got, 0.15+6*10e-6) {
		t.Errorf("ring: %g s, want %g", got, 0.15+60e-6)
	}
	if got := SwitchMLTime(tr, 100e6, 4, 1e9); !near(got, 0.1+10e-6) {
		t.Errorf("switchml: %g s, want %g", got, 0.1+10e-6)
	}
	// Headers of 250 bytes per 1000 and half the line rate: 2.5 times as
	// long on the wire.
	slow := Transport{Name: "s", Efficiency: 0.5, Payload: 1000, Header: 250}
	if got := SwitchMLTime(slow, 100e6, 4, 1e9); !near(got, 0.25) {
		t.Errorf("switchml with headers at half rate: %g s, want 0.25", got)
	}
	if got := RingTime(tr, 100e6, 1, 1e9); got != 0 {
		t.Errorf("one worker: %g s, want 0", got)
	}
}

// Hand-computed overlap: forward 1 s, backward 3 s releasing a bucket at
// 1 s and one at 3 s, update 0.5 s, each allreduce 1.5 s. The first runs
// 1..2.5 s into the backward pass, the second 3..4.5 s: the step is
// 1 + 4.5 + 0.5 = 6 s; with allreduces of 0.5 s the backward pass hides
// the first, and only the last one's 0.5 s shows: 5 s.
func TestPredictOverlap(t *testing.T) {
	m := Model{ForwardS: 1, BackwardS: 3, UpdateS: 0.5, Buckets: []profile.Bucket{{Elems: 10, ReadyS: 1}, {Elems: 10, ReadyS: 3}}}
	s := Predict(m, func(float64) float64 { return 1.5 })
	if !near(s.StepS, 6) || !near(s.ComputeS, 4.5) || !near(s.CommS, 3.5) {
		t.Errorf("step %+v, want 6 s, compute 4.5 s, comm 3.5 s", s)
	}
	if s := Predict(m, func(float64) float64 { return 0.5 }); !near(s.StepS, 5) {
		t.Errorf("mostly hidden communication: step %g s, want 5", s.StepS)
	}
	// A bucket that is ready while the channel is busy waits for it.
	m.Buckets[1].ReadyS = 1.5
	if s := Predict(m, func(float64) float64 { return 1.5 }); !near(s.StepS, 1+4+0.5) {
		t.Errorf("queued bucket: step %g s, want 5.5", s.StepS)
	}
}

// With no compute, SwitchML's speedup over the ring is the ratio of bytes
// on the wire, 2(n-1)/n, when both run at line rate with the same headers.
func TestCommunicationBoundSpeedup(t *testing.T) {
	tr := Transport{Name: "t", Efficiency: 1, Payload: 1000, Header: 50}
	m := Model{Name: "m", Buckets: []profile.Bucket{{Elems: 1 << 24}}}
	for _, n := range []int{2, 8, 64} {
		p, err := Compare(m, n, 100, tr, tr, "ideal")
		if err != nil {
			t.Fatal(err)
		}
		if want := 2 * float64(n-1) / float64(n); !near(p.Speedup, want) {
			t.Errorf("%d workers: speedup %g, want %g", n, p.Speedup, want)
		}
	}
	if _, err := Compare(m, 8, 100, Transport{Name: "bad", Payload: 1000}, tr, "x"); err == nil {
		t.Error("a transport of efficiency 0 was accepted")
	}
}

func TestFromProfileScalesCompute(t *testing.T) {
	p := &profile.Profile{Model: "p", ForwardS: 2, BackwardS: 4, UpdateS: 1, Units: []profile.Unit{
		{Name: "a", Parameters: 100, BackwardS: 1}, {Name: "b", Parameters: 50, BackwardS: 3}}}
	m := FromProfile(p, 0, 2)
	if !near(m.ForwardS, 1) || !near(m.BackwardS, 2) || !near(m.UpdateS, 0.5) || len(m.Buckets) != 2 ||
		!near(m.Buckets[0].ReadyS, 1.5) || !near(m.Buckets[1].ReadyS, 2) || m.Bytes() != 600 {
		t.Errorf("model %+v", m)
	}
}
