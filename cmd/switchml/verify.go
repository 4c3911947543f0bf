package main

import (
	"fmt"
	"math"

	"github.com/switchml/switchml-go/quant"
)

// Every rank fills its tensor from the seed and its rank alone, so each rank
// can compute every other rank's input and check the global sum by itself.

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func elementHash(seed uint64, rank, i int) uint64 {
	return splitmix(seed ^ splitmix(uint64(rank)<<40^uint64(i)))
}

func genInt32(seed uint64, rank, i int) int32 {
	return int32(elementHash(seed, rank, i)%2001) - 1000
}

// genFloat32 gives values in (-2^m, 2^m), m from -8 to 7, where m changes
// every 512 elements and differs from rank to rank, so that blocks carry
// exponents that are mostly negative, as gradients' are, and differ across
// the ranks adding them.
func genFloat32(seed uint64, rank, i int) float32 {
	h := elementHash(seed, rank, i)
	u := float32(int64(h>>40) - (1 << 23)) // exact: 24 bits
	return u * magnitudes[(i/512+5*rank)%16]
}

// magnitudes[m] is 2^(m-8-23): the scale of a 24-bit integer to (-2^(m-8), 2^(m-8)).
var magnitudes = func() (t [16]float32) {
	for m := range t {
		t[m] = float32(math.Ldexp(1, m-8-23))
	}
	return t
}()

// expectation is what every rank should hold after the allreduce, with the
// tolerance per element.
type expectation struct {
	want []float64
	tol  []float64
}

func fillInput(dtype string, seed uint64, rank int, f32 []float32, i32 []int32, u16 []uint16) {
	switch dtype {
	case "int32":
		for i := range i32 {
			i32[i] = genInt32(seed, rank, i)
		}
	case "float32":
		for i := range f32 {
			f32[i] = genFloat32(seed, rank, i)
		}
	case "float16":
		for i := range u16 {
			u16[i] = quant.Float32ToF16(genFloat32(seed, rank, i))
		}
	case "bfloat16":
		for i := range u16 {
			u16[i] = quant.Float32ToBF16(genFloat32(seed, rank, i))
		}
	}
}

// inputValue is rank's input element i as the allreduce sees it.
func inputValue(dtype string, seed uint64, rank, i int) float64 {
	switch dtype {
	case "int32":
		return float64(genInt32(seed, rank, i))
	case "float16":
		return float64(quant.F16ToFloat32(quant.Float32ToF16(genFloat32(seed, rank, i))))
	case "bfloat16":
		return float64(quant.BF16ToFloat32(quant.Float32ToBF16(genFloat32(seed, rank, i))))
	}
	return float64(genFloat32(seed, rank, i))
}

// expect computes the exact sums and, for float types, the quantization
// bound of quant.ErrorBound for the block each element travels in. The
// block of element i lies within [i-k+1, i+k-1], which the aligned blocks
// j-1, j and j+1 cover, so their largest exponent bounds the block's.
func expect(dtype string, seed uint64, workers, elements, k int) expectation {
	e := expectation{want: make([]float64, elements), tol: make([]float64, elements)}
	blocks := (elements + k - 1) / k
	blockExp := make([]int8, blocks)
	for j := range blockExp {
		blockExp[j] = quant.MinExponent
	}
	for i := 0; i < elements; i++ {
		sum, maxAbs := 0.0, 0.0
		for r := 0; r < workers; r++ {
			v := inputValue(dtype, seed, r, i)
			sum += v
			maxAbs = math.Max(maxAbs, math.Abs(v))
		}
		e.want[i] = sum
		if dtype != "int32" {
			if ex := quant.BlockExponent([]float32{float32(maxAbs)}); ex > blockExp[i/k] {
				blockExp[i/k] = ex
			}
		}
	}
	if dtype == "int32" {
		return e
	}
	// The bounds include the rounding of the result to the output type.
	bound := map[string]func(int, int8) float64{"float32": quant.ErrorBound, "float16": quant.ErrorBoundF16, "bfloat16": quant.ErrorBoundBF16}[dtype]
	for i := 0; i < elements; i++ {
		j := i / k
		ex := blockExp[j]
		if j > 0 {
			ex = max(ex, blockExp[j-1])
		}
		if j+1 < blocks {
			ex = max(ex, blockExp[j+1])
		}
		e.tol[i] = bound(workers, ex)
	}
	return e
}

// check compares a result with the expectation and describes the first
// mismatch.
func (e expectation) check(dtype string, f32 []float32, i32 []int32, u16 []uint16) error {
	for i := range e.want {
		var got float64
		switch dtype {
		case "int32":
			got = float64(i32[i])
		case "float32":
			got = float64(f32[i])
		case "float16":
			got = float64(quant.F16ToFloat32(u16[i]))
		case "bfloat16":
			got = float64(quant.BF16ToFloat32(u16[i]))
		}
		if math.Abs(got-e.want[i]) > e.tol[i] || math.IsNaN(got) {
			return fmt.Errorf("element %d = %v, want %v (tolerance %.3g)", i, got, e.want[i], e.tol[i])
		}
	}
	return nil
}

// poison puts a NaN at element i of a float input (int32 has none).
func poison(dtype string, f32 []float32, u16 []uint16, i int) {
	switch dtype {
	case "float32":
		f32[i] = float32(math.NaN())
	case "float16":
		u16[i] = 0x7e00
	case "bfloat16":
		u16[i] = 0x7fc0
	}
}
