// Package nn is a small layer library that builds TensorFlow graphs from Go
// with graft's op package: resource variables, layers whose gradients come
// from the graph (TF_AddGradients), and optimizers that update variables with
// the ResourceApply* kernels.
//
// Variables are initialised from Go with a seeded generator, so every worker
// that builds the same model with the same seed starts from identical
// weights without a broadcast.
package nn

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"
)

// Role tells what a variable is for, which decides how training treats it.
type Role int

const (
	// Trainable variables receive gradients.
	Trainable Role = iota
	// State variables are updated by the forward pass (batch-norm moving
	// statistics); workers average them before evaluation.
	State
	// Slot variables belong to an optimizer (momentum, Adam moments).
	Slot
)

// Initializer fills a new variable's values.
type Initializer func(rng *rand.Rand, shape []int64) []float32

// Variable is a float32 resource variable with its read value and an assign
// op fed from Go.
type Variable struct {
	Name  string
	Shape []int64
	Role  Role
	Init  Initializer

	Handle tf.Output // the resource handle
	Value  tf.Output // ReadVariableOp: the value layers compute with

	assignPH tf.Output
	assign   *tf.Operation
}

// Size is the number of elements.
func (v *Variable) Size() int {
	n := 1
	for _, d := range v.Shape {
		n *= int(d)
	}
	return n
}

// Graph is the model under construction: the op scope plus the variables and
// side effects that the layers register.
type Graph struct {
	Scope *op.Scope
	Seed  int64 // drives variable initialisation (same on every worker)
	// OpSeed drives random ops such as dropout; workers use different ones
	// so their masks differ.
	OpSeed int64

	vars    []*Variable
	byName  map[string]*Variable
	updates []*tf.Operation // state updates of the training forward pass
	losses  []tf.Output     // auxiliary loss terms of the training pass
	nextOp  int64
}

// NewGraph starts an empty graph. The seed drives variable initialisation
// and the graph-level random ops (dropout).
func NewGraph(seed int64) *Graph {
	return &Graph{Scope: op.NewScope(), Seed: seed, OpSeed: seed, byName: map[string]*Variable{}}
}

// Variables returns every variable in creation order.
func (g *Graph) Variables() []*Variable { return g.vars }

// VariablesWith returns the variables with the given role, in creation order.
func (g *Graph) VariablesWith(r Role) []*Variable {
	var out []*Variable
	for _, v := range g.vars {
		if v.Role == r {
			out = append(out, v)
		}
	}
	return out
}

// Variable looks a variable up by name.
func (g *Graph) Variable(name string) *Variable { return g.byName[name] }

// Updates returns the state updates that a training step must run.
func (g *Graph) Updates() []*tf.Operation { return g.updates }

// AddUpdate registers an op that a training step must run (e.g. a moving
// average assignment).
func (g *Graph) AddUpdate(o *tf.Operation) { g.updates = append(g.updates, o) }

// AddLoss registers a scalar term that the training loss adds to the mean
// cross-entropy of the logits (e.g. a detector's box regression loss).
// Layers register it from their training forward pass only.
func (g *Graph) AddLoss(t tf.Output) { g.losses = append(g.losses, t) }

// WithLosses returns loss plus every registered auxiliary term.
func (g *Graph) WithLosses(s *op.Scope, loss tf.Output) tf.Output {
	for _, aux := range g.losses {
		loss = op.AddV2(s.SubScope("aux"), loss, aux)
	}
	return loss
}

// NewVariable creates a resource variable. Names must be unique; they are
// the keys of checkpoints and ONNX initializers.
func (g *Graph) NewVariable(name string, shape []int64, role Role, init Initializer) *Variable {
	if _, dup := g.byName[name]; dup {
		g.Scope.UpdateErr("NewVariable", fmt.Errorf("nn: variable %q defined twice", name))
		return &Variable{Name: name}
	}
	s := g.Scope.SubScope(name)
	h := op.VarHandleOp(s, tf.Float, tf.MakeShape(shape...), op.VarHandleOpSharedName(name))
	v := &Variable{Name: name, Shape: append([]int64(nil), shape...), Role: role, Init: init, Handle: h}
	v.Value = op.ReadVariableOp(s, h, tf.Float)
	v.assignPH = op.Placeholder(s.SubScope("init"), tf.Float, op.PlaceholderShape(tf.MakeShape(shape...)))
	v.assign = op.AssignVariableOp(s, h, v.assignPH)
	g.vars = append(g.vars, v)
	g.byName[name] = v
	return v
}

// nextSeed hands out distinct op-level seeds for random ops so runs are
// reproducible for a given graph seed.
func (g *Graph) nextSeed() int64 {
	g.nextOp++
	return g.nextOp
}

// rngFor derives a generator from the graph seed and the variable name, so a
// variable's initial value does not depend on creation order.
func (g *Graph) rngFor(name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(uint64(g.Seed), h.Sum64()))
}

// InitialValues computes every variable's initial value.
func (g *Graph) InitialValues() map[string][]float32 {
	out := make(map[string][]float32, len(g.vars))
	for _, v := range g.vars {
		init := v.Init
		if init == nil {
			init = Zeros
		}
		out[v.Name] = init(g.rngFor(v.Name), v.Shape)
	}
	return out
}

// Constant adds a float32 scalar constant.
func (g *Graph) Constant(x float32) tf.Output { return op.Const(g.Scope.SubScope("c"), x) }

// Int32s adds an int32 vector constant (shapes, axes).
func (g *Graph) Int32s(x ...int32) tf.Output { return op.Const(g.Scope.SubScope("c"), x) }

func fanInOut(shape []int64) (fanIn, fanOut float64) {
	switch len(shape) {
	case 0:
		return 1, 1
	case 1:
		return float64(shape[0]), float64(shape[0])
	case 2:
		return float64(shape[0]), float64(shape[1])
	default:
		// Convolution filters HWIO: the receptive field multiplies both.
		rf := 1.0
		for _, d := range shape[:len(shape)-2] {
			rf *= float64(d)
		}
		return rf * float64(shape[len(shape)-2]), rf * float64(shape[len(shape)-1])
	}
}

func numel(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

// Zeros fills with 0.
func Zeros(_ *rand.Rand, shape []int64) []float32 { return make([]float32, numel(shape)) }

// Ones fills with 1.
func Ones(_ *rand.Rand, shape []int64) []float32 {
	x := make([]float32, numel(shape))
	for i := range x {
		x[i] = 1
	}
	return x
}

// GlorotUniform is Keras' default dense/conv initializer.
func GlorotUniform(rng *rand.Rand, shape []int64) []float32 {
	in, out := fanInOut(shape)
	limit := math.Sqrt(6 / (in + out))
	x := make([]float32, numel(shape))
	for i := range x {
		x[i] = float32((rng.Float64()*2 - 1) * limit)
	}
	return x
}

// HeNormal suits ReLU layers: normal with variance 2/fan_in, truncated at
// two standard deviations like Keras.
func HeNormal(rng *rand.Rand, shape []int64) []float32 {
	in, _ := fanInOut(shape)
	std := math.Sqrt(2/in) / 0.87962566103423978 // stddev correction for truncation
	x := make([]float32, numel(shape))
	for i := range x {
		for {
			z := rng.NormFloat64()
			if z >= -2 && z <= 2 {
				x[i] = float32(z * std)
				break
			}
		}
	}
	return x
}

// Normal returns an initializer drawing from N(0, std²).
func Normal(std float64) Initializer {
	return func(rng *rand.Rand, shape []int64) []float32 {
		x := make([]float32, numel(shape))
		for i := range x {
			x[i] = float32(rng.NormFloat64() * std)
		}
		return x
	}
}
