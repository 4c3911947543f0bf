package dtype_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml/dtype"
)

// TestRegistry: every type is found by its name and by its code (the C
// interface's numbers, which never change), and unknown ones are refused
// with the known names.
func TestRegistry(t *testing.T) {
	want := map[string][2]int{"float32": {0, 4}, "float16": {1, 2}, "bfloat16": {2, 2}, "int32": {3, 4}}
	if got := dtype.Names(); strings.Join(got, ",") != "float32,float16,bfloat16,int32" {
		t.Fatalf("Names() = %v", got)
	}
	for name, w := range want {
		c, err := dtype.ByName(name)
		if err != nil || c.Code() != w[0] || c.Size() != w[1] || c.Name() != name {
			t.Fatalf("ByName(%q) = %v, %v; want code %d, size %d", name, c, err, w[0], w[1])
		}
		if byCode, err := dtype.ByCode(w[0]); err != nil || byCode != c {
			t.Fatalf("ByCode(%d) = %v, %v; want %s", w[0], byCode, err, name)
		}
	}
	if _, err := dtype.ByName("float64"); !errors.Is(err, dtype.ErrUnknown) || !strings.Contains(err.Error(), "float64") || !strings.Contains(err.Error(), "bfloat16") {
		t.Fatalf("ByName(float64): %v, want an error naming it and the known types", err)
	}
	if _, err := dtype.ByCode(17); !errors.Is(err, dtype.ErrUnknown) || !strings.Contains(err.Error(), "int32 (3)") {
		t.Fatalf("ByCode(17): %v, want an error listing the codes", err)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering int32 again did not panic")
		}
	}()
	dtype.Register(dtype.Int32)
}

// TestOneWorkerRoundTrip: what Quantize writes, Dequantize reads back, for
// one worker (the switch's sum of one payload is the payload), within
// Bound; int32 exactly.
func TestOneWorkerRoundTrip(t *testing.T) {
	for _, c := range dtype.All() {
		const n = 300
		data := dtype.New(c, n)
		dtype.Fill(c, data, 7, 1)
		want := make([]float64, n)
		for i := range want {
			want[i] = c.Get(data, i)
		}
		exp := quant.MinExponent
		if c.Scaled() {
			var finite bool
			if exp, finite = c.Exponent(data, true); !finite {
				t.Fatalf("%s: test data not finite", c.Name())
			}
		}
		payload := make([]byte, 4*n)
		c.Quantize(payload, data, 1, exp)
		clear(data)
		c.Dequantize(data, payload, 1, exp)
		for i := range want {
			if got := c.Get(data, i); math.Abs(got-want[i]) > c.Bound(1, exp) {
				t.Fatalf("%s [%d] = %v, want %v ± %v", c.Name(), i, got, want[i], c.Bound(1, exp))
			}
		}
	}
}

// TestCheck: a NaN in a float type is found, with its index, by Check, by
// Exponent with check, and by BlockExponents (quant's pass for float32,
// the block-by-block one for the others).
func TestCheck(t *testing.T) {
	for _, c := range dtype.All() {
		data := dtype.New(c, 100)
		dtype.Fill(c, data, 1, 0)
		exps := make([]int8, 4)
		if err := dtype.BlockExponents(c, exps, data, 32); err != nil {
			t.Fatalf("%s: %v", c.Name(), err)
		}
		if !c.Scaled() {
			if err := c.Check(data); err != nil {
				t.Fatalf("%s: Check = %v", c.Name(), err)
			}
			continue
		}
		for b, e := range exps {
			if want, _ := c.Exponent(data[b*32*c.Size():min(b*32+32, 100)*c.Size()], false); e != want {
				t.Fatalf("%s block %d: exponent %d, want %d", c.Name(), b, e, want)
			}
		}
		c.Set(data, 70, math.NaN())
		var nf *quant.NonFiniteError
		if err := c.Check(data); !errors.As(err, &nf) || nf.Index != 70 {
			t.Fatalf("%s: Check = %v, want index 70", c.Name(), err)
		}
		if err := dtype.BlockExponents(c, exps, data, 32); !errors.As(err, &nf) || nf.Index != 70 {
			t.Fatalf("%s: BlockExponents = %v, want index 70", c.Name(), err)
		}
		if _, finite := c.Exponent(data[64*c.Size():96*c.Size()], true); finite {
			t.Fatalf("%s: a block with a NaN counted as finite", c.Name())
		}
	}
}

// adder is a ring of ranks whose inputs are equal: the sum is n times
// the input.
type adder struct{ n int }

func (a adder) AllReduceFloat32(_ context.Context, x []float32) error {
	for i := range x {
		x[i] *= float32(a.n)
	}
	return nil
}

func (a adder) AllReduceInt32(_ context.Context, x []int32) error {
	for i := range x {
		x[i] *= int32(a.n)
	}
	return nil
}

func TestRingSum(t *testing.T) {
	for _, c := range dtype.All() {
		data := dtype.New(c, 50)
		dtype.Fill(c, data, 3, 0)
		want := make([]float64, 50)
		for i := range want {
			want[i] = 3 * c.Get(data, i)
		}
		var scratch []float32
		if err := c.RingSum(context.Background(), adder{3}, data, &scratch); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got := c.Get(data, i); math.Abs(got-want[i]) > math.Abs(want[i])*0x1p-7 {
				t.Fatalf("%s [%d] = %v, want %v", c.Name(), i, got, want[i])
			}
		}
	}
}

// TestExpect: the sum of the ranks' Fill data passes the check, and a
// value off by more than the tolerance fails it.
func TestExpect(t *testing.T) {
	for _, c := range dtype.All() {
		const n, workers = 1000, 3
		e := dtype.Expect(c, 5, workers, n, 64)
		sum := make([]float64, n)
		in := dtype.New(c, n)
		for r := range workers {
			dtype.Fill(c, in, 5, r)
			for i := range sum {
				sum[i] += c.Get(in, i)
			}
		}
		out := dtype.New(c, n)
		for i, v := range sum {
			c.Set(out, i, v)
		}
		if err := e.Check(out); err != nil {
			t.Fatalf("%s: %v", c.Name(), err)
		}
		c.Set(out, 10, sum[10]+4)
		if err := e.Check(out); err == nil || !strings.Contains(err.Error(), "element 10") {
			t.Fatalf("%s: a wrong element 10 gave %v", c.Name(), err)
		}
	}
}

// TestExpectInPieces: an expectation added and checked in pieces that cut
// across blocks is the one made whole: the same sums and the same
// tolerances, which a wrong value's message shows. FillDensityAt's pieces
// make FillDensity's tensor.
func TestExpectInPieces(t *testing.T) {
	const n, k, workers, piece = 1000, 64, 3, 100
	for _, c := range dtype.All() {
		whole := dtype.ExpectDensity(c, 5, workers, n, k, 0.5)
		parts := dtype.NewExpectation(c, workers, n, k)
		in, sum := dtype.New(c, n), make([]float64, n)
		for r := range workers {
			dtype.FillDensity(c, in, 5, r, k, 0.5)
			for lo := 0; lo < n; lo += piece {
				p := dtype.New(c, min(piece, n-lo))
				dtype.FillDensityAt(c, p, 5, r, k, 0.5, lo)
				if !bytes.Equal(p, in[lo*c.Size():(lo+piece)*c.Size()]) {
					t.Fatalf("%s: rank %d's values from %d filled apart differ", c.Name(), r, lo)
				}
				parts.Add(lo, p)
			}
			for i := range sum {
				sum[i] += c.Get(in, i)
			}
		}
		out := dtype.New(c, n)
		for i, v := range sum {
			c.Set(out, i, v)
		}
		for _, e := range []*dtype.Expectation{whole, parts} {
			if err := e.Check(out); err != nil {
				t.Fatalf("%s: %v", c.Name(), err)
			}
		}
		for i := 0; i < n; i += 7 {
			c.Set(out, i, sum[i]+1000)
			w, p := whole.Check(out), parts.CheckAt(i-i%piece, out[(i-i%piece)*c.Size():(i-i%piece+piece)*c.Size()])
			if w == nil || p == nil || w.Error() != p.Error() {
				t.Fatalf("%s: a wrong element %d: %v whole, %v in pieces", c.Name(), i, w, p)
			}
			c.Set(out, i, sum[i])
		}
	}
}

func TestBytesAs(t *testing.T) {
	x := []float32{1, 2, 3}
	b := dtype.Bytes(x)
	if len(b) != 12 {
		t.Fatalf("%d bytes", len(b))
	}
	dtype.As[float32](b)[1] = 5
	if x[1] != 5 || len(dtype.As[uint16](b)) != 6 {
		t.Fatalf("views do not share memory: %v", x)
	}
	if dtype.Bytes([]int32(nil)) != nil || len(dtype.As[int32](nil)) != 0 {
		t.Fatal("nil slices")
	}
}
