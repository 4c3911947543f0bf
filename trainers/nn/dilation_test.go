package nn

import (
	"math"
	"testing"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"
)

func TestGradDilatedConv(t *testing.T) {
	for _, pad := range []string{"SAME", "VALID"} {
		t.Run(pad, func(t *testing.T) {
			gradCheck(t, []int64{2, 7, 6, 2}, true, func(g *Graph) Layer {
				c := NewConv2D(g, "c", 3, 2, 3, 1, pad, Linear, true)
				c.Dilation = 2
				return c
			})
		})
	}
}

// The phase decomposition computes what Conv2D with a dilations attribute
// computes (the forward kernel honours the attribute; only its gradient
// does not).
func TestDilatedConvMatchesConv2DDilations(t *testing.T) {
	for _, tc := range []struct {
		pad       string
		h, w, r   int64
		wantShape []int64
	}{
		{"SAME", 19, 19, 6, []int64{2, 19, 19, 4}},
		{"SAME", 7, 5, 2, []int64{2, 7, 5, 4}},
		{"VALID", 9, 8, 3, []int64{2, 3, 2, 4}},
	} {
		g := NewGraph(3)
		s := g.Scope
		c := NewConv2D(g, "c", 3, 3, 4, 1, tc.pad, Linear, false)
		c.Dilation = int(tc.r)
		x := op.RandomStandardNormal(s.SubScope("x"), op.Const(s.SubScope("shape"), []int64{2, tc.h, tc.w, 3}), tf.Float, op.RandomStandardNormalSeed(5))
		xv := op.Identity(s.SubScope("xv"), x)
		// Static shape for the layer: a placeholder fed with x's value.
		in := op.Placeholder(s.SubScope("in"), tf.Float, op.PlaceholderShape(tf.MakeShape(2, tc.h, tc.w, 3)))
		got := c.Forward(g, in, true)
		want := op.Conv2D(s.SubScope("ref"), in, c.Filter.Value, []int64{1, 1, 1, 1}, tc.pad, op.Conv2DDilations([]int64{1, tc.r, tc.r, 1}))
		p := testProgram(t, g)
		sess := p.Sess
		if err := p.SetValues(g.InitialValues()); err != nil {
			t.Fatal(err)
		}
		xs, err := sess.Run(nil, []tf.Output{xv}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := sess.Run(map[tf.Output]*tf.Tensor{in: xs[0]}, []tf.Output{got, want}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if shape := out[0].Shape(); len(shape) != 4 || shape[0] != tc.wantShape[0] || shape[1] != tc.wantShape[1] || shape[2] != tc.wantShape[2] || shape[3] != tc.wantShape[3] {
			t.Fatalf("%s %dx%d rate %d: shape %v, want %v", tc.pad, tc.h, tc.w, tc.r, shape, tc.wantShape)
		}
		a, _ := Floats(out[0])
		b, _ := Floats(out[1])
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%d and %d values", len(a), len(b))
		}
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-4*math.Max(1, math.Abs(float64(b[i]))) {
				t.Fatalf("%s %dx%d rate %d: value %d is %g, Conv2D with dilations gives %g", tc.pad, tc.h, tc.w, tc.r, i, a[i], b[i])
			}
		}
	}
}

func TestDilatedConvNeedsStrideOne(t *testing.T) {
	g := NewGraph(1)
	c := NewConv2D(g, "c", 3, 3, 4, 2, "SAME", Linear, false)
	c.Dilation = 2
	in := op.Placeholder(g.Scope.SubScope("in"), tf.Float, op.PlaceholderShape(tf.MakeShape(1, 8, 8, 3)))
	c.Forward(g, in, true)
	if g.Scope.Err() == nil {
		t.Fatal("dilation with stride 2 built without an error")
	}
}
