package quant_test

import (
	"fmt"
	"math"

	"github.com/switchml/switchml-go/quant"
)

// Two workers sum one block the way SwitchML does: they agree on the larger
// of their block exponents (the switch computes it), send their values as
// int32 scaled for that exponent and the number of workers, and turn the
// switch's int32 sum back into floats. The result is within ErrorBound of
// the exact sum.
func Example() {
	const workers = 2
	a := []float32{0.1, -2.5, 3.75}
	b := []float32{0.2, 1.25, -0.5}

	e := quant.MaxExponent(quant.BlockExponent(a), quant.BlockExponent(b))
	qa := make([]int32, len(a))
	qb := make([]int32, len(b))
	quant.Quantize(qa, a, workers, e)
	quant.Quantize(qb, b, workers, e)

	// The switch adds the integers; the scale leaves room for the sum of
	// every worker's values, so it cannot overflow.
	sum := make([]int32, len(a))
	for i := range sum {
		sum[i] = qa[i] + qb[i]
	}
	got := make([]float32, len(sum))
	quant.Dequantize(got, sum, workers, e)

	bound := quant.ErrorBound(workers, e)
	for i := range got {
		exact := float64(a[i]) + float64(b[i])
		fmt.Printf("%.4f within bound: %v\n", got[i], math.Abs(float64(got[i])-exact) <= bound)
	}
	fmt.Println("block exponent", e)
	// Output:
	// 0.3000 within bound: true
	// -1.2500 within bound: true
	// 3.2500 within bound: true
	// block exponent 2
}
