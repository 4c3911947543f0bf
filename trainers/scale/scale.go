// Package scale predicts data-parallel step times beyond what one machine
// can run: a model's measured compute profile, scaled to another
// processor, replayed on paper against a network model of the ring
// allreduce and of SwitchML's in-network aggregation, for any number of
// workers and any line rate.
//
// The network model counts bytes on the wire and fixed latencies:
//
//   - ring allreduce of S bytes over n workers: each worker sends and
//     receives 2(n-1)/n·S, in 2(n-1) steps that each pay a latency α;
//   - SwitchML: each worker sends S and receives S (the switch sums them
//     and multicasts the result) in packets of P payload bytes with H
//     bytes of headers each, plus one round trip to fill the pipeline;
//
// each at its own fraction of the line rate (Efficiency), which is how a
// software stack that does not reach line rate enters the model.
//
// The step model is that of DDP-style overlap, the same as the replay's:
// the backward pass releases the buckets at their profiled times, one
// communication channel takes them in order, and the step ends with the
// last bucket's allreduce (or the backward pass, if later) plus the update.
package scale

import (
	"fmt"
	"math"

	"github.com/switchml/switchml-go/trainers/profile"
)

// Transport describes how one system moves bytes over a link.
type Transport struct {
	Name string
	// Efficiency is the fraction of the line rate its payload reaches,
	// headers aside (1 = line rate).
	Efficiency float64
	// Payload and Header are the data and header bytes of one packet on
	// the wire (header includes Ethernet framing, preamble and gap).
	Payload, Header float64
	// Latency is paid once per ring step, or once per SwitchML allreduce
	// (seconds).
	Latency float64
}

// wire is the bytes on the wire per payload byte.
func (t Transport) wire() float64 { return (t.Payload + t.Header) / t.Payload }

func (t Transport) check() error {
	if t.Efficiency <= 0 || t.Efficiency > 1 || t.Payload <= 0 || t.Header < 0 || t.Latency < 0 {
		return fmt.Errorf("scale: transport %q: efficiency %g (want (0, 1]), payload %g, header %g, latency %g must be positive",
			t.Name, t.Efficiency, t.Payload, t.Header, t.Latency)
	}
	return nil
}

// RingTime is the time of a ring allreduce of size bytes among n workers
// on links of rate bytes per second: 2(n-1)/n of the data each way, in
// 2(n-1) latency-bound steps.
func RingTime(t Transport, size float64, n int, rate float64) float64 {
	if n <= 1 {
		return 0
	}
	k := float64(n)
	return 2*(k-1)/k*size*t.wire()/(rate*t.Efficiency) + 2*(k-1)*t.Latency
}

// SwitchMLTime is the time of an in-network allreduce of size bytes: every
// worker streams its data up and the sums come down at the same time, so
// the time is the data's own transfer time plus one round trip, whatever
// the number of workers.
func SwitchMLTime(t Transport, size float64, n int, rate float64) float64 {
	if n <= 1 {
		return 0
	}
	return size*t.wire()/(rate*t.Efficiency) + t.Latency
}

// Step is a predicted training step.
type Step struct {
	// StepS is the whole step; ComputeS its compute; CommS the time from
	// the first allreduce's start to the last one's end.
	StepS, ComputeS, CommS float64
}

// Model is what the step model needs of a profile: compute times (already
// scaled to the processor of interest) and the buckets' sizes and ready
// times.
type Model struct {
	Name                         string
	ForwardS, BackwardS, UpdateS float64
	Buckets                      []profile.Bucket
}

// FromProfile takes a profile's buckets of at most bucketElems values and
// divides every compute time by speedup (the processor of interest is that
// many times faster than the one that measured the profile).
func FromProfile(p *profile.Profile, bucketElems int, speedup float64) Model {
	m := Model{Name: p.Model, ForwardS: p.ForwardS / speedup, BackwardS: p.BackwardS / speedup, UpdateS: p.UpdateS / speedup}
	for _, b := range p.Buckets(bucketElems) {
		b.ReadyS /= speedup
		m.Buckets = append(m.Buckets, b)
	}
	return m
}

// Bytes is the gradient size of the model in bytes (float32 values).
func (m Model) Bytes() float64 {
	n := 0
	for _, b := range m.Buckets {
		n += b.Elems
	}
	return 4 * float64(n)
}

// Predict replays the model's step with each bucket taking comm(bytes)
// seconds, one bucket after another as they become ready.
func Predict(m Model, comm func(bytes float64) float64) Step {
	free, first := 0.0, math.Inf(1)
	for _, b := range m.Buckets {
		start := math.Max(b.ReadyS, free)
		first = math.Min(first, start)
		free = start + comm(4*float64(b.Elems))
	}
	if len(m.Buckets) == 0 {
		first = 0
	}
	s := Step{ComputeS: m.ForwardS + m.BackwardS + m.UpdateS, CommS: free - first}
	s.StepS = m.ForwardS + math.Max(m.BackwardS, free) + m.UpdateS
	return s
}

// Point is one prediction: both systems' steps and SwitchML's speedup.
type Point struct {
	Model      string  `json:"model"`
	Parameters int64   `json:"parameters"`
	Workers    int     `json:"workers"`
	RateGbit   float64 `json:"rate_gbit"`
	Scenario   string  `json:"scenario"`
	RingS      float64 `json:"ring_step_s"`
	SwitchS    float64 `json:"switchml_step_s"`
	ComputeS   float64 `json:"compute_s"`
	Speedup    float64 `json:"speedup"`
}

// Compare predicts one model at one size and rate with both transports.
func Compare(m Model, n int, rateGbit float64, ring, sml Transport, scenario string) (Point, error) {
	if err := ring.check(); err != nil {
		return Point{}, err
	}
	if err := sml.check(); err != nil {
		return Point{}, err
	}
	if n < 1 || rateGbit <= 0 {
		return Point{}, fmt.Errorf("scale: %d workers at %g Gbit/s: want at least one worker and a positive rate", n, rateGbit)
	}
	rate := rateGbit * 1e9 / 8
	r := Predict(m, func(b float64) float64 { return RingTime(ring, b, n, rate) })
	s := Predict(m, func(b float64) float64 { return SwitchMLTime(sml, b, n, rate) })
	return Point{Model: m.Name, Parameters: int64(m.Bytes() / 4), Workers: n, RateGbit: rateGbit, Scenario: scenario,
		RingS: r.StepS, SwitchS: s.StepS, ComputeS: s.ComputeS, Speedup: r.StepS / s.StepS}, nil
}
