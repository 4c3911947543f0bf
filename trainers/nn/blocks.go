package nn

import (
	"math"
	"math/rand/v2"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"
)

// Named is implemented by layers that have a name. Their variables' names
// start with that name and a slash, which is how a profile attributes
// parameters to the top-level layers of a model.
type Named interface {
	LayerName() string
}

func (d *Dense) LayerName() string      { return d.Name }
func (c *Conv2D) LayerName() string     { return c.Name }
func (p *Pool2D) LayerName() string     { return p.Name }
func (b *BatchNorm) LayerName() string  { return b.Name }
func (d *Dropout) LayerName() string    { return d.Name }
func (f *Flatten) LayerName() string    { return f.Name }
func (e *Embedding) LayerName() string  { return e.Name }
func (m *MeanOver) LayerName() string   { return m.Name }
func (a *Act) LayerName() string        { return a.Name }
func (b *Block) LayerName() string      { return b.Name }
func (f *Func) LayerName() string       { return f.Name }
func (l *LayerNorm) LayerName() string  { return l.Name }
func (l *LSTM) LayerName() string       { return l.Name }
func (r *Reshape) LayerName() string    { return r.Name }
func (r *Residual) LayerName() string   { return r.Name }
func (s *SliceLast) LayerName() string  { return s.Name }
func (c *ConcatZero) LayerName() string { return c.Name }

// NameOf returns a layer's name, or "" for unnamed layers.
func NameOf(l Layer) string {
	if n, ok := l.(Named); ok {
		return n.LayerName()
	}
	return ""
}

// Ops hands out fresh sub-scopes of s: graft names an op after its type, so
// two ops of one type need two scopes.
func Ops(s *op.Scope) func() *op.Scope {
	return func() *op.Scope { return s.SubScope("op") }
}

// Block is a named sequence of layers: one unit for profiling and for
// gradient release order.
type Block struct {
	Name   string
	Layers Sequential
}

func (b *Block) Forward(g *Graph, x tf.Output, training bool) tf.Output {
	return b.Layers.Forward(g, x, training)
}

// Func is a layer given by a function; its variables are created by the
// caller (with names under Name/).
type Func struct {
	Name string
	Fn   func(g *Graph, s *op.Scope, x tf.Output, training bool) tf.Output
}

func (f *Func) Forward(g *Graph, x tf.Output, training bool) tf.Output {
	return f.Fn(g, g.Scope.SubScope(f.Name), x, training)
}

// Residual computes Act(Body(x) + Shortcut(x)); a nil Shortcut is the
// identity.
type Residual struct {
	Name     string
	Body     Sequential
	Shortcut Sequential
	Act      Activation
}

func (r *Residual) Forward(g *Graph, x tf.Output, training bool) tf.Output {
	y := r.Body.Forward(g, x, training)
	sc := x
	if r.Shortcut != nil {
		sc = r.Shortcut.Forward(g, x, training)
	}
	s := g.Scope.SubScope(r.Name)
	return activate(s, r.Act, op.AddV2(s, y, sc))
}

// Reshape reshapes to Shape (one dimension may be -1).
type Reshape struct {
	Name  string
	Shape []int32
}

func (r *Reshape) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	s := g.Scope.SubScope(r.Name)
	return op.Reshape(s, x, op.Const(s.SubScope("shape"), r.Shape))
}

// LayerNorm normalises over the last axis with a learned scale and offset
// (built from elementary ops so the C API has every gradient).
type LayerNorm struct {
	Name        string
	Dim         int
	Epsilon     float32
	Gamma, Beta *Variable
}

func NewLayerNorm(g *Graph, name string, dim int, eps float32) *LayerNorm {
	c := []int64{int64(dim)}
	return &LayerNorm{Name: name, Dim: dim, Epsilon: eps,
		Gamma: g.NewVariable(name+"/gamma", c, Trainable, Ones),
		Beta:  g.NewVariable(name+"/beta", c, Trainable, Zeros)}
}

func (l *LayerNorm) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	u := Ops(g.Scope.SubScope(l.Name))
	ax := op.Const(u(), []int32{-1})
	mean := op.Mean(u(), x, ax, op.MeanKeepDims(true))
	d := op.Sub(u(), x, mean)
	variance := op.Mean(u(), op.Square(u(), d), ax, op.MeanKeepDims(true))
	inv := op.Rsqrt(u(), op.AddV2(u(), variance, op.Const(u(), l.Epsilon)))
	return op.AddV2(u(), op.Mul(u(), op.Mul(u(), d, inv), l.Gamma.Value), l.Beta.Value)
}

// Gelu is the exact (erf) GELU of BERT.
func Gelu(s *op.Scope, x tf.Output) tf.Output {
	u := Ops(s)
	e := op.Erf(u(), op.Mul(u(), x, op.Const(u(), float32(1/math.Sqrt2))))
	return op.Mul(u(), op.Mul(u(), x, op.Const(u(), float32(0.5))), op.AddV2(u(), e, op.Const(u(), float32(1))))
}

// LSTM is one LSTM layer unrolled over a fixed number of steps: input
// [batch, Steps, In], output [batch, Steps, Hidden]. The gates are one
// matmul of [x_t, h] with a [In+Hidden, 4*Hidden] kernel plus a 4*Hidden
// bias (i, f, g, o order), the forget-gate bias starting at 1. Unrolling
// avoids while loops, whose gradients the C API cannot build.
type LSTM struct {
	Name              string
	In, Hidden, Steps int
	Kernel, Bias      *Variable
}

func NewLSTM(g *Graph, name string, in, hidden, steps int) *LSTM {
	h := hidden
	bias := func(_ *rand.Rand, shape []int64) []float32 {
		x := make([]float32, numel(shape))
		for i := h; i < 2*h; i++ {
			x[i] = 1
		}
		return x
	}
	return &LSTM{Name: name, In: in, Hidden: hidden, Steps: steps,
		Kernel: g.NewVariable(name+"/kernel", []int64{int64(in + hidden), int64(4 * hidden)}, Trainable, GlorotUniform),
		Bias:   g.NewVariable(name+"/bias", []int64{int64(4 * hidden)}, Trainable, bias)}
}

func (l *LSTM) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	u := Ops(g.Scope.SubScope(l.Name))
	xs := op.Unpack(u(), x, int64(l.Steps), op.UnpackAxis(1))
	// Zero state shaped like the batch: x_0[:, :1] * 0 tiled to Hidden.
	zero := op.Tile(u(), op.Mul(u(), op.Slice(u(), xs[0], op.Const(u(), []int32{0, 0}), op.Const(u(), []int32{-1, 1})), op.Const(u(), float32(0))),
		op.Const(u(), []int32{1, int32(l.Hidden)}))
	h, c := zero, zero
	sizes := op.Const(u(), []int32{int32(l.Hidden), int32(l.Hidden), int32(l.Hidden), int32(l.Hidden)})
	one := op.Const(u(), int32(1))
	outs := make([]tf.Output, l.Steps)
	for t := 0; t < l.Steps; t++ {
		z := op.BiasAdd(u(), op.MatMul(u(), op.ConcatV2(u(), []tf.Output{xs[t], h}, one), l.Kernel.Value), l.Bias.Value)
		gs := op.SplitV(u(), z, sizes, one, 4)
		i, f, gg, o := op.Sigmoid(u(), gs[0]), op.Sigmoid(u(), gs[1]), op.Tanh(u(), gs[2]), op.Sigmoid(u(), gs[3])
		c = op.AddV2(u(), op.Mul(u(), f, c), op.Mul(u(), i, gg))
		h = op.Mul(u(), o, op.Tanh(u(), c))
		outs[t] = h
	}
	return op.Pack(u(), outs, op.PackAxis(1))
}

// SliceLast keeps columns [From, From+Size) of the last axis of a rank-2
// input.
type SliceLast struct {
	Name       string
	From, Size int
}

func (sl *SliceLast) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	u := Ops(g.Scope.SubScope(sl.Name))
	return op.Slice(u(), x, op.Const(u(), []int32{0, int32(sl.From)}), op.Const(u(), []int32{-1, int32(sl.Size)}))
}

// ConcatZero turns one logit z per example ([batch, 1]) into the two-class
// logits [0, z]: softmax cross-entropy over them is exactly the logistic
// loss of z, so a model with one output keeps its parameter count.
type ConcatZero struct {
	Name string
}

func (c *ConcatZero) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	u := Ops(g.Scope.SubScope(c.Name))
	return op.ConcatV2(u(), []tf.Output{op.ZerosLike(u(), x), x}, op.Const(u(), int32(1)))
}

// ParameterCount is the number of trainable values of g.
func ParameterCount(g *Graph) int64 {
	var n int64
	for _, v := range g.VariablesWith(Trainable) {
		n += int64(v.Size())
	}
	return n
}
