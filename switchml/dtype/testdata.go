package dtype

import (
	"errors"
	"fmt"
	"math"

	"github.com/switchml/switchml-go/quant"
)

// Test data: every rank fills its tensor from a seed and its rank alone
// (Fill), so each rank can compute every other rank's input and check the
// global sum by itself (Expect).

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func elementHash(seed uint64, rank, i int) uint64 {
	return splitmix(seed ^ splitmix(uint64(rank)<<40^uint64(i)))
}

// sampleInt is an integer in [-1000, 1000].
func sampleInt(seed uint64, rank, i int) float64 {
	return float64(int32(elementHash(seed, rank, i)%2001) - 1000)
}

// sampleFloat is a value in (-2^m, 2^m), m from -8 to 7, where m changes
// every 512 elements and differs from rank to rank, so that blocks carry
// exponents that are mostly negative, as gradients' are, and differ across
// the ranks adding them.
func sampleFloat(seed uint64, rank, i int) float64 {
	h := elementHash(seed, rank, i)
	u := float32(int64(h>>40) - (1 << 23)) // exact: 24 bits
	return float64(u * magnitudes[(i/512+5*rank)%16])
}

// magnitudes[m] is 2^(m-8-23): the scale of a 24-bit integer to (-2^(m-8), 2^(m-8)).
var magnitudes = func() (t [16]float32) {
	for m := range t {
		t[m] = float32(math.Ldexp(1, m-8-23))
	}
	return t
}()

// Sample is rank's test value i from seed, before Set rounds it to c's
// type: for scaled types, a float32 of a magnitude that varies across
// blocks and ranks; for the others, an integer in [-1000, 1000].
func Sample(c Codec, seed uint64, rank, i int) float64 {
	if c.Scaled() {
		return sampleFloat(seed, rank, i)
	}
	return sampleInt(seed, rank, i)
}

// Fill writes rank's test data from seed into data (Sample).
func Fill(c Codec, data []byte, seed uint64, rank int) { FillAt(c, data, seed, rank, 0) }

// FillAt is Fill of a part of rank's tensor: data holds its values from
// index lo on, so that a long tensor can be filled a piece at a time.
func FillAt(c Codec, data []byte, seed uint64, rank, lo int) {
	for i := range len(data) / c.Size() {
		c.Set(data, i, Sample(c, seed, rank, lo+i))
	}
}

// Expectation is what every rank holds after the allreduce of the ranks'
// inputs, with the tolerance of each value: the exact sums and, for scaled
// types, the exponent of each block of k values, which bounds the error of
// the values it carries (Codec.Bound). The block of value i lies within
// [i-k+1, i+k-1], which the aligned blocks j-1, j and j+1 cover, so their
// largest exponent bounds the block's.
type Expectation struct {
	c       Codec
	workers int
	k       int
	want    []float64
	exps    []int8 // per aligned block of k values; scaled types only
	narrow  Wire16 // the 16-bit wire's bounds (OnWire16); nil on the 32-bit wire
}

// OnWire16 makes e's tolerances those of the 16-bit wire (Wire16.Bound16),
// for values that travel at 16 bits: k must then be the values a packet
// carries on that wire, twice its 32-bit words. It returns e; a type
// without a 16-bit wire keeps its own bounds.
func (e *Expectation) OnWire16() *Expectation {
	e.narrow, _ = e.c.(Wire16)
	return e
}

// NewExpectation is the expectation of the sum of workers ranks' n values,
// k values a packet, before any input was added (Add).
func NewExpectation(c Codec, workers, n, k int) *Expectation {
	k = max(k, 1)
	e := &Expectation{c: c, workers: workers, k: k, want: make([]float64, n)}
	if c.Scaled() {
		e.exps = make([]int8, (n+k-1)/k)
		for j := range e.exps {
			e.exps[j] = quant.MinExponent
		}
	}
	return e
}

// Add adds a part of one rank's input: in holds its values from index lo
// on. Every rank's every value is added once before Check.
func (e *Expectation) Add(lo int, in []byte) {
	sz := e.c.Size()
	n := len(in) / sz
	for i := range n {
		e.want[lo+i] += e.c.Get(in, i)
	}
	// The largest exponent of the pieces of a block is the block's.
	for i := 0; i < n; {
		end := min(n, (lo+i)/e.k*e.k+e.k-lo)
		if e.exps != nil {
			j := (lo + i) / e.k
			exp, _ := e.c.Exponent(in[i*sz:end*sz], false)
			e.exps[j] = max(e.exps[j], exp)
		}
		i = end
	}
}

// Expect computes the expectation of workers ranks' Fill data from seed,
// with k values a packet.
func Expect(c Codec, seed uint64, workers, n, k int) *Expectation {
	return ExpectDensity(c, seed, workers, n, k, 1)
}

// FillDensity is Fill with only a share density of the blocks of k values
// holding data: the others are all zero, as most blocks of an embedding
// table's gradient are. Which blocks hold data depends on seed, rank and
// the block alone, so the ranks' non-zero blocks differ. A density of 1 or
// more is Fill.
func FillDensity(c Codec, data []byte, seed uint64, rank, k int, density float64) {
	FillDensityAt(c, data, seed, rank, k, density, 0)
}

// FillDensityAt is FillDensity of a part of rank's tensor: data holds its
// values from index lo on.
func FillDensityAt(c Codec, data []byte, seed uint64, rank, k int, density float64, lo int) {
	FillAt(c, data, seed, rank, lo)
	if density >= 1 {
		return
	}
	k = max(k, 1)
	n := len(data) / c.Size()
	for i := 0; i < n; {
		end := min(n, (lo+i)/k*k+k-lo)
		if !BlockHolds(seed, rank, (lo+i)/k, density) {
			clear(data[i*c.Size() : end*c.Size()])
		}
		i = end
	}
}

// BlockHolds says whether block b of rank's FillDensity data holds values.
func BlockHolds(seed uint64, rank, b int, density float64) bool {
	h := splitmix(^seed ^ splitmix(uint64(rank)<<40^uint64(b)))
	return float64(h>>11)/(1<<53) < density
}

// ExpectDensity is Expect of FillDensity data.
func ExpectDensity(c Codec, seed uint64, workers, n, k int, density float64) *Expectation {
	e, _ := ExpectInputs(c, workers, n, k, func(in []byte, r int) error {
		FillDensity(c, in, seed, r, k, density)
		return nil
	})
	return e
}

// ExpectInputs is Expect of any inputs: fill writes rank r's n values
// into in, or fails.
func ExpectInputs(c Codec, workers, n, k int, fill func(in []byte, r int) error) (*Expectation, error) {
	e := NewExpectation(c, workers, n, k)
	in := New(c, n)
	for r := range workers {
		if err := fill(in, r); err != nil {
			return nil, err
		}
		e.Add(0, in)
	}
	return e, nil
}

// ErrUnexpected is a result that Expectation.Check found wrong: a sum
// that is not the expected one.
var ErrUnexpected = errors.New("not the expected result")

// Check compares a result with the expectation and describes the first
// mismatch (ErrUnexpected).
func (e *Expectation) Check(data []byte) error {
	if got := len(data) / e.c.Size(); got != len(e.want) {
		return fmt.Errorf("%w: %d %s values, want %d", ErrUnexpected, got, e.c.Name(), len(e.want))
	}
	return e.CheckAt(0, data)
}

// CheckAt is Check of a part of the result: data holds its values from
// index lo on.
func (e *Expectation) CheckAt(lo int, data []byte) error {
	n := len(data) / e.c.Size()
	if lo < 0 || lo+n > len(e.want) {
		return fmt.Errorf("dtype: checking %s values %d to %d of an expectation of %d", e.c.Name(), lo, lo+n, len(e.want))
	}
	for i := 0; i < n; {
		end := min(n, (lo+i)/e.k*e.k+e.k-lo)
		tol := e.tolerance((lo + i) / e.k)
		for ; i < end; i++ {
			got, want := e.c.Get(data, i), e.want[lo+i]
			if math.Abs(got-want) > tol || math.IsNaN(got) {
				return fmt.Errorf("%w: element %d = %v, want %v (tolerance %.3g)", ErrUnexpected, lo+i, got, want, tol)
			}
		}
	}
	return nil
}

// tolerance is the error bound of the values of block j (0 for exact
// types).
func (e *Expectation) tolerance(j int) float64 {
	if e.exps == nil {
		return 0
	}
	ex := e.exps[j]
	if j > 0 {
		ex = max(ex, e.exps[j-1])
	}
	if j+1 < len(e.exps) {
		ex = max(ex, e.exps[j+1])
	}
	if e.narrow != nil {
		return e.narrow.Bound16(e.workers, ex)
	}
	return e.c.Bound(e.workers, ex)
}
