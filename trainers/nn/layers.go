package nn

import (
	"fmt"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"
)

// Layer maps a tensor to a tensor. Layers own their variables, created when
// the layer is constructed, so calling Forward twice (training and
// inference) shares the weights.
type Layer interface {
	Forward(g *Graph, x tf.Output, training bool) tf.Output
}

// Activation names the nonlinearity applied after a dense or conv layer.
type Activation int

const (
	Linear Activation = iota
	ReLU
)

func activate(s *op.Scope, a Activation, x tf.Output) tf.Output {
	if a == ReLU {
		return op.Relu(s, x)
	}
	return x
}

// Sequential applies layers in order.
type Sequential []Layer

func (q Sequential) Forward(g *Graph, x tf.Output, training bool) tf.Output {
	for _, l := range q {
		x = l.Forward(g, x, training)
	}
	return x
}

// Dense is x·W + b for x of shape [batch, In].
type Dense struct {
	Name    string
	In, Out int
	Act     Activation
	W, B    *Variable
}

// NewDense creates a fully connected layer with Glorot (linear) or He (ReLU)
// initialised weights and zero bias.
func NewDense(g *Graph, name string, in, out int, act Activation) *Dense {
	init := GlorotUniform
	if act == ReLU {
		init = HeNormal
	}
	return &Dense{
		Name: name, In: in, Out: out, Act: act,
		W: g.NewVariable(name+"/kernel", []int64{int64(in), int64(out)}, Trainable, init),
		B: g.NewVariable(name+"/bias", []int64{int64(out)}, Trainable, Zeros),
	}
}

func (d *Dense) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	s := g.Scope.SubScope(d.Name)
	y := op.BiasAdd(s, op.MatMul(s, x, d.W.Value), d.B.Value)
	return activate(s, d.Act, y)
}

// Conv2D is a 2-D convolution over NHWC input with a HWIO filter.
type Conv2D struct {
	Name            string
	Kernel, In, Out int
	Stride          int
	Padding         string // "SAME" or "VALID"
	// Dilation is the atrous rate (0 or 1: none). A dilated convolution
	// needs stride 1 and an input of known height and width; it is built
	// from SpaceToBatchND, a plain convolution and BatchToSpaceND, whose
	// gradients the C API has (the dilations attribute of Conv2D is not
	// carried into its registered gradient).
	Dilation     int
	Act          Activation
	Filter, Bias *Variable
	UseBias      bool
}

// NewConv2D creates a square-kernel convolution. Bias is omitted when a
// batch norm follows (it would be cancelled by the mean subtraction).
func NewConv2D(g *Graph, name string, kernel, in, out, stride int, padding string, act Activation, useBias bool) *Conv2D {
	init := GlorotUniform
	if act == ReLU {
		init = HeNormal
	}
	c := &Conv2D{Name: name, Kernel: kernel, In: in, Out: out, Stride: stride, Padding: padding, Act: act, UseBias: useBias,
		Filter: g.NewVariable(name+"/kernel", []int64{int64(kernel), int64(kernel), int64(in), int64(out)}, Trainable, init)}
	if useBias {
		c.Bias = g.NewVariable(name+"/bias", []int64{int64(out)}, Trainable, Zeros)
	}
	return c
}

func (c *Conv2D) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	s := g.Scope.SubScope(c.Name)
	st := int64(c.Stride)
	var y tf.Output
	if c.Dilation > 1 {
		y = c.atrous(s, x)
	} else {
		y = op.Conv2D(s, x, c.Filter.Value, []int64{1, st, st, 1}, c.Padding)
	}
	if c.UseBias {
		y = op.BiasAdd(s, y, c.Bias.Value)
	}
	return activate(s, c.Act, y)
}

// atrous is the dilated convolution: pad so that each spatial size is a
// multiple of the rate, move the rate x rate phases into the batch, convolve
// each phase with the undilated filter, move them back and crop the extra.
func (c *Conv2D) atrous(s *op.Scope, x tf.Output) tf.Output {
	r := int32(c.Dilation)
	if c.Stride != 1 {
		s.UpdateErr("Conv2D", fmt.Errorf("nn: %s: dilation %d needs stride 1, have %d", c.Name, r, c.Stride))
		return x
	}
	shape := x.Shape()
	if shape.NumDimensions() != 4 {
		s.UpdateErr("Conv2D", fmt.Errorf("nn: %s: dilated convolution needs NHWC input of known rank", c.Name))
		return x
	}
	span := int32(c.Kernel-1) * r // the dilated kernel's size minus one
	var pads, crops []int32
	for _, axis := range []int{1, 2} {
		in := shape.Size(axis)
		if in < 0 {
			s.UpdateErr("Conv2D", fmt.Errorf("nn: %s: dilated convolution needs a known height and width, have %v", c.Name, shape))
			return x
		}
		before, after := int32(0), int32(0)
		if c.Padding == "SAME" {
			before, after = span/2, span-span/2
		}
		extra := (r - (int32(in)+before+after)%r) % r
		pads = append(pads, before, after+extra)
		crops = append(crops, 0, extra)
	}
	u := Ops(s)
	block := op.Const(u(), []int32{r, r})
	phases := op.SpaceToBatchND(u(), x, block, op.Const(u(), [][]int32{pads[:2], pads[2:]}))
	y := op.Conv2D(u(), phases, c.Filter.Value, []int64{1, 1, 1, 1}, "VALID")
	return op.BatchToSpaceND(u(), y, block, op.Const(u(), [][]int32{crops[:2], crops[2:]}))
}

// Pool2D is max or average pooling over NHWC input.
type Pool2D struct {
	Name         string
	Max          bool
	Size, Stride int
	Padding      string
}

func (p *Pool2D) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	s := g.Scope.SubScope(p.Name)
	k := []int64{1, int64(p.Size), int64(p.Size), 1}
	st := []int64{1, int64(p.Stride), int64(p.Stride), 1}
	if p.Max {
		return op.MaxPool(s, x, k, st, p.Padding)
	}
	return op.AvgPool(s, x, k, st, p.Padding)
}

// BatchNorm normalises over every axis but the last (channels). It is built
// from elementary ops rather than FusedBatchNormV3 so that its gradient
// comes from gradients registered in the C API.
type BatchNorm struct {
	Name                  string
	Channels              int
	Rank                  int // rank of the input: 2 (dense) or 4 (NHWC)
	Momentum, Epsilon     float32
	Gamma, Beta           *Variable
	MovingMean, MovingVar *Variable
}

func NewBatchNorm(g *Graph, name string, channels, rank int) *BatchNorm {
	c := []int64{int64(channels)}
	return &BatchNorm{
		Name: name, Channels: channels, Rank: rank, Momentum: 0.9, Epsilon: 1e-3,
		Gamma:      g.NewVariable(name+"/gamma", c, Trainable, Ones),
		Beta:       g.NewVariable(name+"/beta", c, Trainable, Zeros),
		MovingMean: g.NewVariable(name+"/moving_mean", c, State, Zeros),
		MovingVar:  g.NewVariable(name+"/moving_variance", c, State, Ones),
	}
}

func (b *BatchNorm) Forward(g *Graph, x tf.Output, training bool) tf.Output {
	s := g.Scope.SubScope(b.Name)
	// Every op gets its own sub-scope: graft names ops by type, so two ops
	// of one type in one scope would collide.
	u := func() *op.Scope { return s.SubScope("op") }
	mean, variance := b.MovingMean.Value, b.MovingVar.Value
	if training {
		axes := make([]int32, b.Rank-1)
		for i := range axes {
			axes[i] = int32(i)
		}
		ax := op.Const(u(), axes)
		mean = op.Mean(u(), x, ax)
		variance = op.Mean(u(), op.Square(u(), op.Sub(u(), x, mean)), ax)
		m := op.Const(u(), b.Momentum)
		one := op.Const(u(), 1-b.Momentum)
		upd := func(v *Variable, batch tf.Output) {
			nv := op.AddV2(u(), op.Mul(u(), v.Value, m), op.Mul(u(), op.StopGradient(u(), batch), one))
			g.AddUpdate(op.AssignVariableOp(u(), v.Handle, nv))
		}
		upd(b.MovingMean, mean)
		upd(b.MovingVar, variance)
	}
	inv := op.Mul(u(), op.Rsqrt(u(), op.AddV2(u(), variance, op.Const(u(), b.Epsilon))), b.Gamma.Value)
	return op.AddV2(u(), op.Mul(u(), op.Sub(u(), x, mean), inv), b.Beta.Value)
}

// Dropout zeroes a fraction Rate of the activations while training and
// rescales the rest; it is the identity at inference.
type Dropout struct {
	Name string
	Rate float32
}

func (d *Dropout) Forward(g *Graph, x tf.Output, training bool) tf.Output {
	if !training || d.Rate <= 0 {
		return x
	}
	s := g.Scope.SubScope(d.Name)
	keep := op.Const(s.SubScope("keep"), 1-d.Rate)
	u := op.RandomUniform(s, op.Shape(s, x), tf.Float, op.RandomUniformSeed(g.OpSeed), op.RandomUniformSeed2(g.nextSeed()))
	mask := op.Floor(s, op.AddV2(s, u, keep))
	return op.RealDiv(s, op.Mul(s, x, mask), keep)
}

// Flatten reshapes [batch, ...] to [batch, Size].
type Flatten struct {
	Name string
	Size int
}

func (f *Flatten) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	s := g.Scope.SubScope(f.Name)
	return op.Reshape(s, x, op.Const(s.SubScope("shape"), []int32{-1, int32(f.Size)}))
}

// Embedding maps int32 ids of any shape to vectors: [..] -> [.., Dim].
type Embedding struct {
	Name       string
	Vocab, Dim int
	Table      *Variable
}

func NewEmbedding(g *Graph, name string, vocab, dim int) *Embedding {
	return &Embedding{Name: name, Vocab: vocab, Dim: dim,
		Table: g.NewVariable(name+"/embeddings", []int64{int64(vocab), int64(dim)}, Trainable, Normal(0.05))}
}

func (e *Embedding) Forward(g *Graph, ids tf.Output, _ bool) tf.Output {
	s := g.Scope.SubScope(e.Name)
	// Gather on the read value: its gradient (GatherV2) is registered in the
	// C API and yields a dense gradient, which is what the allreduce needs.
	return op.GatherV2(s, e.Table.Value, ids, op.Const(s.SubScope("axis"), int32(0)))
}

// MeanOver averages over one axis (e.g. the sequence axis after an embedding).
type MeanOver struct {
	Name string
	Axis int
}

func (m *MeanOver) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	s := g.Scope.SubScope(m.Name)
	return op.Mean(s, x, op.Const(s.SubScope("axis"), []int32{int32(m.Axis)}))
}

// SoftmaxCrossEntropy returns the per-example loss of logits against one-hot
// (or soft) labels. The sparse variant is avoided on purpose: its gradient
// is not registered in the C API.
func SoftmaxCrossEntropy(g *Graph, logits, labels tf.Output) tf.Output {
	s := g.Scope.SubScope("xent")
	loss, _ := op.SoftmaxCrossEntropyWithLogits(s, logits, labels)
	return loss
}

// Describe returns a one-line summary of a layer for logs.
func Describe(l Layer) string {
	switch l := l.(type) {
	case *Dense:
		return fmt.Sprintf("dense %s %dx%d", l.Name, l.In, l.Out)
	case *Conv2D:
		return fmt.Sprintf("conv2d %s %dx%d %d->%d", l.Name, l.Kernel, l.Kernel, l.In, l.Out)
	case *Pool2D:
		return fmt.Sprintf("pool %s %d/%d", l.Name, l.Size, l.Stride)
	case *BatchNorm:
		return fmt.Sprintf("batchnorm %s %d", l.Name, l.Channels)
	case *Dropout:
		return fmt.Sprintf("dropout %s %.2f", l.Name, l.Rate)
	case *Flatten:
		return fmt.Sprintf("flatten %s %d", l.Name, l.Size)
	case *Embedding:
		return fmt.Sprintf("embedding %s %dx%d", l.Name, l.Vocab, l.Dim)
	default:
		return fmt.Sprintf("%T", l)
	}
}

// Act applies an activation as its own layer (after a batch norm).
type Act struct {
	Name string
	Fn   Activation
}

func (a *Act) Forward(g *Graph, x tf.Output, _ bool) tf.Output {
	return activate(g.Scope.SubScope(a.Name), a.Fn, x)
}
