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
func Fill(c Codec, data []byte, seed uint64, rank int) {
	for i := range len(data) / c.Size() {
		c.Set(data, i, Sample(c, seed, rank, i))
	}
}

// Expectation is what every rank holds after the allreduce of the ranks'
// Fill data, with the tolerance of each value.
type Expectation struct {
	c         Codec
	want, tol []float64
}

// Expect computes the exact sums of n values of workers ranks' data from
// seed and, for scaled types, Codec.Bound for the block each value
// travels in, with k values a packet. The block of value i lies within
// [i-k+1, i+k-1], which the aligned blocks j-1, j and j+1 cover, so their
// largest exponent bounds the block's.
func Expect(c Codec, seed uint64, workers, n, k int) Expectation {
	e, _ := ExpectInputs(c, workers, n, k, func(in []byte, r int) error {
		Fill(c, in, seed, r)
		return nil
	})
	return e
}

// FillDensity is Fill with only a share density of the blocks of k values
// holding data: the others are all zero, as most blocks of an embedding
// table's gradient are. Which blocks hold data depends on seed, rank and
// the block alone, so the ranks' non-zero blocks differ. A density of 1 or
// more is Fill.
func FillDensity(c Codec, data []byte, seed uint64, rank, k int, density float64) {
	Fill(c, data, seed, rank)
	if density >= 1 {
		return
	}
	k = max(k, 1)
	n := len(data) / c.Size()
	for lo := 0; lo < n; lo += k {
		if !BlockHolds(seed, rank, lo/k, density) {
			clear(data[lo*c.Size() : min(lo+k, n)*c.Size()])
		}
	}
}

// BlockHolds says whether block b of rank's FillDensity data holds values.
func BlockHolds(seed uint64, rank, b int, density float64) bool {
	h := splitmix(^seed ^ splitmix(uint64(rank)<<40^uint64(b)))
	return float64(h>>11)/(1<<53) < density
}

// ExpectDensity is Expect of FillDensity data.
func ExpectDensity(c Codec, seed uint64, workers, n, k int, density float64) Expectation {
	e, _ := ExpectInputs(c, workers, n, k, func(in []byte, r int) error {
		FillDensity(c, in, seed, r, k, density)
		return nil
	})
	return e
}

// ExpectInputs is Expect of any inputs: fill writes rank r's n values
// into in, or fails.
func ExpectInputs(c Codec, workers, n, k int, fill func(in []byte, r int) error) (Expectation, error) {
	e := Expectation{c: c, want: make([]float64, n), tol: make([]float64, n)}
	maxAbs := make([]float64, n)
	in := New(c, n)
	for r := range workers {
		if err := fill(in, r); err != nil {
			return e, err
		}
		for i := range n {
			v := c.Get(in, i)
			e.want[i] += v
			maxAbs[i] = math.Max(maxAbs[i], math.Abs(v))
		}
	}
	if !c.Scaled() {
		return e, nil
	}
	k = max(k, 1)
	blocks := (n + k - 1) / k
	blockExp := make([]int8, blocks)
	for j := range blockExp {
		blockExp[j] = quant.MinExponent
	}
	for i, m := range maxAbs {
		blockExp[i/k] = max(blockExp[i/k], quant.BlockExponent([]float32{float32(m)}))
	}
	for i := range n {
		j := i / k
		ex := blockExp[j]
		if j > 0 {
			ex = max(ex, blockExp[j-1])
		}
		if j+1 < blocks {
			ex = max(ex, blockExp[j+1])
		}
		e.tol[i] = c.Bound(workers, ex)
	}
	return e, nil
}

// ErrUnexpected is a result that Expectation.Check found wrong: a sum
// that is not the expected one.
var ErrUnexpected = errors.New("not the expected result")

// Check compares a result with the expectation and describes the first
// mismatch (ErrUnexpected).
func (e Expectation) Check(data []byte) error {
	if got := len(data) / e.c.Size(); got != len(e.want) {
		return fmt.Errorf("%w: %d %s values, want %d", ErrUnexpected, got, e.c.Name(), len(e.want))
	}
	for i, want := range e.want {
		got := e.c.Get(data, i)
		if math.Abs(got-want) > e.tol[i] || math.IsNaN(got) {
			return fmt.Errorf("%w: element %d = %v, want %v (tolerance %.3g)", ErrUnexpected, i, got, want, e.tol[i])
		}
	}
	return nil
}
