package nn

import (
	"math"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"
)

// Optimizer turns an (already averaged) gradient into a variable update with
// one of TensorFlow's ResourceApply* kernels.
type Optimizer interface {
	// Apply adds the update of v by grad to the graph, creating slot
	// variables as needed.
	Apply(g *Graph, v *Variable, grad tf.Output) *tf.Operation
	// Feeds returns the per-step scalar inputs for update number step
	// (1-based).
	Feeds(step int) (map[tf.Output]*tf.Tensor, error)
}

// Momentum is SGD with (optionally Nesterov) momentum.
type Momentum struct {
	LR, Momentum float32
	Nesterov     bool

	lr, mom tf.Output
	built   bool
}

func (m *Momentum) build(g *Graph) {
	if m.built {
		return
	}
	s := g.Scope.SubScope("momentum")
	m.lr = op.Placeholder(s.SubScope("lr"), tf.Float, op.PlaceholderShape(tf.ScalarShape()))
	m.mom = op.Const(s.SubScope("momentum"), m.Momentum)
	m.built = true
}

func (m *Momentum) Apply(g *Graph, v *Variable, grad tf.Output) *tf.Operation {
	m.build(g)
	acc := g.NewVariable(v.Name+"/momentum", v.Shape, Slot, Zeros)
	return op.ResourceApplyMomentum(g.Scope.SubScope("apply"), v.Handle, acc.Handle, m.lr, grad, m.mom,
		op.ResourceApplyMomentumUseNesterov(m.Nesterov))
}

func (m *Momentum) Feeds(int) (map[tf.Output]*tf.Tensor, error) {
	lr, err := tf.NewTensor(m.LR)
	if err != nil {
		return nil, err
	}
	return map[tf.Output]*tf.Tensor{m.lr: lr}, nil
}

// Adam is Kingma & Ba's optimizer; the bias-correction powers are computed
// in Go from the step count and fed each step.
type Adam struct {
	LR, Beta1, Beta2, Epsilon float32

	lr, b1p, b2p, b1, b2, eps tf.Output
	built                     bool
}

// NewAdam returns Adam with the usual defaults for β and ε.
func NewAdam(lr float32) *Adam { return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-7} }

func (a *Adam) build(g *Graph) {
	if a.built {
		return
	}
	s := g.Scope.SubScope("adam")
	scalar := op.PlaceholderShape(tf.ScalarShape())
	a.lr = op.Placeholder(s.SubScope("lr"), tf.Float, scalar)
	a.b1p = op.Placeholder(s.SubScope("beta1_power"), tf.Float, scalar)
	a.b2p = op.Placeholder(s.SubScope("beta2_power"), tf.Float, scalar)
	a.b1 = op.Const(s.SubScope("beta1"), a.Beta1)
	a.b2 = op.Const(s.SubScope("beta2"), a.Beta2)
	a.eps = op.Const(s.SubScope("epsilon"), a.Epsilon)
	a.built = true
}

func (a *Adam) Apply(g *Graph, v *Variable, grad tf.Output) *tf.Operation {
	a.build(g)
	m := g.NewVariable(v.Name+"/adam_m", v.Shape, Slot, Zeros)
	u := g.NewVariable(v.Name+"/adam_v", v.Shape, Slot, Zeros)
	return op.ResourceApplyAdam(g.Scope.SubScope("apply"), v.Handle, m.Handle, u.Handle,
		a.b1p, a.b2p, a.lr, a.b1, a.b2, a.eps, grad)
}

func (a *Adam) Feeds(step int) (map[tf.Output]*tf.Tensor, error) {
	vals := map[tf.Output]float32{
		a.lr:  a.LR,
		a.b1p: float32(math.Pow(float64(a.Beta1), float64(step))),
		a.b2p: float32(math.Pow(float64(a.Beta2), float64(step))),
	}
	out := make(map[tf.Output]*tf.Tensor, len(vals))
	for k, v := range vals {
		t, err := tf.NewTensor(v)
		if err != nil {
			return nil, err
		}
		out[k] = t
	}
	return out, nil
}
