package transport

import (
	"fmt"
	"math/rand/v2"
)

// Faults describes injected network faults, each a probability in [0, 1]
// applied independently to every datagram.
type Faults struct {
	Drop      float64 // the datagram is not sent
	Duplicate float64 // the datagram is sent twice
	Reorder   float64 // the datagram is held back and sent after the next batch
	Seed      uint64  // seeds the random source, so a run can be repeated
}

// Validate says which probability is out of range.
func (f Faults) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"drop", f.Drop}, {"duplicate", f.Duplicate}, {"reorder", f.Reorder}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("transport: %s probability %v is outside [0, 1]", p.name, p.v)
		}
	}
	return nil
}

// Active reports whether any fault is enabled.
func (f Faults) Active() bool { return f.Drop > 0 || f.Duplicate > 0 || f.Reorder > 0 }

// Active reports whether the injector changes anything: a nil or zero
// Injector passes batches through.
func (in *Injector) Active() bool { return in != nil && in.rng != nil && in.f.Active() }

// Injector applies Faults to outgoing batches. It owns copies of held and
// duplicated datagrams, so callers may reuse their buffers as soon as
// Apply returns. The zero value injects nothing; an Injector is not safe for
// concurrent use.
type Injector struct {
	f    Faults
	rng  *rand.Rand
	out  []Message
	held []Message
	next []Message
	pool [][]byte
	// Counters of what was injected.
	Dropped, Duplicated, Reordered uint64
}

// NewInjector returns an injector for f, or an error for bad probabilities.
func NewInjector(f Faults) (*Injector, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &Injector{f: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))}, nil
}

func (in *Injector) copyOf(m Message) Message {
	var b []byte
	if n := len(in.pool); n > 0 {
		b, in.pool = in.pool[n-1][:0], in.pool[:n-1]
	}
	return Message{Buf: append(b, m.Buf...), Addr: m.Addr}
}

// Apply returns the batch to send in place of ms: datagrams held back by an
// earlier call come first, then the survivors of ms with their duplicates.
// The returned slice is valid until the next call.
func (in *Injector) Apply(ms []Message) []Message {
	if !in.Active() {
		return ms
	}
	// Buffers of datagrams released last time can be reused now.
	for _, m := range in.out {
		if m.N == -1 {
			in.pool = append(in.pool, m.Buf)
		}
	}
	in.out = in.out[:0]
	for _, m := range in.held {
		m.N = -1 // marks an injector-owned buffer
		in.out = append(in.out, m)
	}
	in.held, in.next = in.next[:0], in.held
	for _, m := range ms {
		if in.rng.Float64() < in.f.Drop {
			in.Dropped++
			continue
		}
		if in.rng.Float64() < in.f.Reorder {
			in.Reordered++
			in.held = append(in.held, in.copyOf(m))
			continue
		}
		in.out = append(in.out, m)
		if in.rng.Float64() < in.f.Duplicate {
			in.Duplicated++
			c := in.copyOf(m)
			c.N = -1
			in.out = append(in.out, c)
		}
	}
	return in.out
}

// Pending reports whether datagrams are held back for a later batch; a
// sender with nothing else to send should call Apply(nil) to flush them.
func (in *Injector) Pending() bool { return in != nil && len(in.held) > 0 }
