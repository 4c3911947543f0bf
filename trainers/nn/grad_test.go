package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"
)

// gradCheck builds loss = Σ R ⊙ layer(x) with x a variable, computes the
// graph gradients with respect to every variable and compares a sample of
// coordinates with central finite differences.
func gradCheck(t *testing.T, inShape []int64, training bool, mk func(g *Graph) Layer) {
	t.Helper()
	g := NewGraph(7)
	s := g.Scope
	x := g.NewVariable("input", inShape, Trainable, Normal(1))
	layer := mk(g)
	y := layer.Forward(g, x.Value, training)
	// Random projection so every output coordinate matters differently.
	r := op.RandomStandardNormal(s.SubScope("r"), op.Shape(s.SubScope("r"), y), tf.Float, op.RandomStandardNormalSeed(3), op.RandomStandardNormalSeed2(4))
	rv := op.Identity(s.SubScope("r"), r)
	proj := op.Placeholder(s.SubScope("proj"), tf.Float)
	ls := s.SubScope("loss")
	loss := op.Sum(ls, op.Mul(ls, y, proj), op.Range(ls, op.Const(ls.SubScope("r0"), int32(0)), op.Rank(ls, y), op.Const(ls.SubScope("r1"), int32(1))))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	vars := g.VariablesWith(Trainable)
	xs := make([]tf.Output, len(vars))
	for i, v := range vars {
		xs[i] = v.Value
	}
	grads := op.Gradients(s, []tf.Output{loss}, xs)
	p := testProgram(t, g)
	sess := p.Sess
	vals := g.InitialValues()
	// Non-trivial biases and BN parameters so their gradients are exercised
	// away from the initial point.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, v := range vars {
		for i := range vals[v.Name] {
			vals[v.Name][i] += float32(rng.NormFloat64() * 0.1)
		}
	}
	if err := p.SetValues(vals); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(nil, []tf.Output{rv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	projT := out[0]

	eval := func() float64 {
		o, err := sess.Run(map[tf.Output]*tf.Tensor{proj: projT}, []tf.Output{loss}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return float64(o[0].Value().(float32))
	}
	o, err := sess.Run(map[tf.Output]*tf.Tensor{proj: projT}, grads, nil)
	if err != nil {
		t.Fatal(err)
	}
	const eps = 1e-3
	for i, v := range vars {
		got, err := Floats(o[i])
		if err != nil {
			t.Fatal(err)
		}
		base := vals[v.Name]
		// Up to 12 coordinates spread over the variable.
		step := max(1, len(base)/12)
		for k := 0; k < len(base); k += step {
			orig := base[k]
			base[k] = orig + eps
			p.SetValues(map[string][]float32{v.Name: base})
			up := eval()
			base[k] = orig - eps
			p.SetValues(map[string][]float32{v.Name: base})
			down := eval()
			base[k] = orig
			p.SetValues(map[string][]float32{v.Name: base})
			fd := (up - down) / (2 * eps)
			if d := math.Abs(fd - float64(got[k])); d > 2e-2*math.Max(1, math.Abs(fd)) {
				t.Errorf("%s[%d]: graph gradient %.5f, finite difference %.5f", v.Name, k, got[k], fd)
			}
		}
	}
}

// testProgram finalizes g's graph and opens a session on it, closed when
// the test ends; the variables still need values.
func testProgram(t *testing.T, g *Graph) *Program {
	t.Helper()
	graph, err := g.Scope.Finalize()
	if err != nil {
		t.Fatal(err)
	}
	sess, err := tf.NewSession(graph, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return &Program{G: g, Sess: sess}
}

func TestGradDense(t *testing.T) {
	gradCheck(t, []int64{4, 6}, true, func(g *Graph) Layer { return NewDense(g, "d", 6, 5, Linear) })
}

func TestGradConvPool(t *testing.T) {
	gradCheck(t, []int64{2, 6, 6, 3}, true, func(g *Graph) Layer {
		return Sequential{
			NewConv2D(g, "c", 3, 3, 4, 1, "SAME", Linear, true),
			&Pool2D{Name: "p", Max: true, Size: 2, Stride: 2, Padding: "VALID"},
		}
	})
}

func TestGradAvgPoolStride2Conv(t *testing.T) {
	gradCheck(t, []int64{2, 7, 7, 2}, true, func(g *Graph) Layer {
		return Sequential{
			NewConv2D(g, "c", 3, 2, 3, 2, "VALID", Linear, true),
			&Pool2D{Name: "p", Size: 3, Stride: 1, Padding: "SAME"},
		}
	})
}

func TestGradBatchNormTraining(t *testing.T) {
	gradCheck(t, []int64{8, 3, 3, 4}, true, func(g *Graph) Layer { return NewBatchNorm(g, "bn", 4, 4) })
}

func TestGradBatchNormInference(t *testing.T) {
	gradCheck(t, []int64{5, 4}, false, func(g *Graph) Layer { return NewBatchNorm(g, "bn", 4, 2) })
}

func TestGradEmbedding(t *testing.T) {
	// ids are constants; the gradient flows into the table only.
	g0 := func(g *Graph) Layer {
		e := NewEmbedding(g, "emb", 7, 3)
		return layerFunc(func(g *Graph, x tf.Output, training bool) tf.Output {
			ids := op.Const(g.Scope.SubScope("ids"), [][]int32{{1, 3, 3}, {6, 0, 1}})
			// Multiply by x so the input variable stays connected.
			return op.Mul(g.Scope.SubScope("mul"), e.Forward(g, ids, training), x)
		})
	}
	gradCheck(t, []int64{2, 3, 3}, true, g0)
}

func TestGradSoftmaxCrossEntropy(t *testing.T) {
	gradCheck(t, []int64{4, 5}, true, func(g *Graph) Layer {
		return layerFunc(func(g *Graph, x tf.Output, _ bool) tf.Output {
			labels := op.Const(g.Scope.SubScope("labels"), [][]float32{{0, 1, 0, 0, 0}, {1, 0, 0, 0, 0}, {0, 0, 0, 0, 1}, {0, 0, 1, 0, 0}})
			return SoftmaxCrossEntropy(g, x, labels)
		})
	})
}

func TestGradReLUDropoutInference(t *testing.T) {
	gradCheck(t, []int64{4, 8}, false, func(g *Graph) Layer {
		return Sequential{NewDense(g, "d", 8, 6, ReLU), &Dropout{Name: "drop", Rate: 0.5}, &Flatten{Name: "f", Size: 6}}
	})
}

// TestGradCheckDetectsWrongGradient makes sure the checker can fail: a
// layer whose forward pass hides a factor from the gradient is rejected.
func TestGradCheckDetectsWrongGradient(t *testing.T) {
	ft := &testing.T{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		gradCheck(ft, []int64{3, 4}, true, func(g *Graph) Layer {
			return layerFunc(func(g *Graph, x tf.Output, _ bool) tf.Output {
				s := g.Scope.SubScope("wrong")
				// y = x * stop_gradient(x): true gradient 2x, graph says x.
				return op.Mul(s, x, op.StopGradient(s, x))
			})
		})
	}()
	<-done
	if !ft.Failed() {
		t.Fatal("gradient checker accepted a wrong gradient")
	}
}

type layerFunc func(g *Graph, x tf.Output, training bool) tf.Output

func (f layerFunc) Forward(g *Graph, x tf.Output, training bool) tf.Output { return f(g, x, training) }
