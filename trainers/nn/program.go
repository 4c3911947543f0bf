package nn

import (
	"fmt"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/core/protobuf/for_core_protos_go_proto"
	"github.com/wamuir/graft/tensorflow/op"
	"google.golang.org/protobuf/proto"
)

// Spec describes a classifier to build.
type Spec struct {
	Seed int64
	// OpSeed seeds random ops (dropout); 0 means Seed.
	OpSeed     int64
	InputShape []int64     // per example, e.g. {28, 28, 1}
	InputType  tf.DataType // tf.Float (images) or tf.Int32 (token ids)
	Classes    int
	// Model constructs the layers (and their variables) on g.
	Model     func(g *Graph) Layer
	Optimizer Optimizer
	// BucketElems caps the elements of one fused gradient bucket; each
	// bucket is one allreduce. 0 means 1<<20.
	BucketElems int
	// Workers divides the allreduced gradient sum into the average.
	Workers int
	// IntraOpThreads and InterOpThreads size TensorFlow's thread pools so
	// several worker processes can share the cores; 0 lets TensorFlow
	// decide.
	IntraOpThreads, InterOpThreads int
}

// Bucket is one fused gradient: the flattened gradients of Vars
// concatenated, produced by Grad and fed back averaged through Sum.
type Bucket struct {
	Vars []*Variable
	Size int
	Grad tf.Output // computed gradient (this worker's)
	Sum  tf.Output // placeholder for the allreduced sum
}

// Program is a built, initialised classifier with its session.
type Program struct {
	G      *Graph
	Model  Layer
	Graph  *tf.Graph
	Sess   *tf.Session
	X      tf.Output // input placeholder [batch, InputShape...]
	Labels tf.Output // one-hot labels [batch, Classes]

	Loss    tf.Output // mean training loss
	Logits  tf.Output // inference logits
	LossSum tf.Output // inference loss summed over the batch
	Correct tf.Output // number of correct inference predictions

	Buckets []Bucket
	// Units are the training-pass outputs of the model's top-level layers
	// when the model is a Sequential (for per-layer profiling).
	Units []tf.Output
	// VarGrads are the gradients of the trainable variables, in the order
	// of Graph.VariablesWith(Trainable).
	VarGrads []tf.Output
	apply    *tf.Operation
	spec     Spec
}

// Build constructs the training and inference graphs, opens a session and
// initialises the variables from the seed.
func Build(spec Spec) (*Program, error) {
	spec = spec.withDefaults()
	if spec.Optimizer == nil {
		return nil, fmt.Errorf("nn: Spec.Optimizer is nil")
	}
	g := NewGraph(spec.Seed)
	if spec.OpSeed != 0 {
		g.OpSeed = spec.OpSeed
	}
	s := g.Scope
	p := &Program{G: g, spec: spec}
	xs := append([]int64{-1}, spec.InputShape...)
	p.X = op.Placeholder(s.SubScope("x"), spec.InputType, op.PlaceholderShape(tf.MakeShape(xs...)))
	p.Labels = op.Placeholder(s.SubScope("labels"), tf.Float, op.PlaceholderShape(tf.MakeShape(-1, int64(spec.Classes))))
	p.Model = spec.Model(g)

	trainable, err := p.buildTraining()
	if err != nil {
		return nil, err
	}
	p.buildBuckets(trainable)
	p.buildUpdate()
	p.buildInference()
	if err := p.openSession(); err != nil {
		return nil, err
	}
	if err := p.SetValues(g.InitialValues()); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (spec Spec) withDefaults() Spec {
	if spec.Workers <= 0 {
		spec.Workers = 1
	}
	if spec.BucketElems <= 0 {
		spec.BucketElems = 1 << 20
	}
	if spec.InputType == 0 {
		spec.InputType = tf.Float
	}
	return spec
}

// buildTraining adds the training pass, its loss and the gradients of the
// trainable variables, which it returns.
func (p *Program) buildTraining() ([]*Variable, error) {
	g := p.G
	s := g.Scope
	ts := s.SubScope("train")
	var logits tf.Output
	if q, ok := p.Model.(Sequential); ok {
		logits = p.X
		for _, l := range q {
			logits = l.Forward(g, logits, true)
			p.Units = append(p.Units, logits)
		}
	} else {
		logits = p.Model.Forward(g, p.X, true)
	}
	p.Loss = g.WithLosses(ts, op.Mean(ts, SoftmaxCrossEntropy(g, logits, p.Labels), op.Const(ts.SubScope("axis"), []int32{0})))
	trainable := g.VariablesWith(Trainable)
	xsVals := make([]tf.Output, len(trainable))
	for i, v := range trainable {
		xsVals[i] = v.Value
	}
	grads := op.Gradients(s, []tf.Output{p.Loss}, xsVals)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("nn: building gradients: %w", err)
	}
	p.VarGrads = grads
	return trainable, nil
}

// buildBuckets fuses the gradients into buckets of at most BucketElems
// elements (one variable may exceed it alone), in reverse creation order:
// the last layers' gradients are complete first, the order DDP-style
// overlap would use.
func (p *Program) buildBuckets(trainable []*Variable) {
	bs := p.G.Scope.SubScope("bucket")
	var cur []int
	size := 0
	for i := len(trainable) - 1; i >= 0; i-- {
		n := trainable[i].Size()
		if size > 0 && size+n > p.spec.BucketElems {
			p.addBucket(bs, trainable, cur, size)
			cur, size = nil, 0
		}
		cur = append(cur, i)
		size += n
	}
	if len(cur) > 0 {
		p.addBucket(bs, trainable, cur, size)
	}
}

// addBucket adds the bucket of the trainable variables at indices vars,
// size elements in all: their gradients flattened and concatenated, and
// the placeholder its sum is fed back through.
func (p *Program) addBucket(bs *op.Scope, trainable []*Variable, vars []int, size int) {
	b := Bucket{Size: size}
	flat := make([]tf.Output, len(vars))
	for j, i := range vars {
		b.Vars = append(b.Vars, trainable[i])
		gr := p.VarGrads[i]
		if gr.Op == nil { // not connected to the loss
			gr = op.ZerosLike(bs.SubScope("zeros"), trainable[i].Value)
		}
		flat[j] = op.Reshape(bs.SubScope("flat"), gr, op.Const(bs.SubScope("shape"), []int32{-1}))
	}
	if len(flat) == 1 {
		b.Grad = flat[0]
	} else {
		b.Grad = op.ConcatV2(bs.SubScope("concat"), flat, op.Const(bs.SubScope("axis"), int32(0)))
	}
	b.Sum = op.Placeholder(bs.SubScope("sum"), tf.Float, op.PlaceholderShape(tf.MakeShape(int64(size))))
	p.Buckets = append(p.Buckets, b)
}

// buildUpdate adds the update: each summed bucket is split back into its
// variables, averaged over the workers and handed to the optimizer.
func (p *Program) buildUpdate() {
	g := p.G
	as := g.Scope.SubScope("update")
	inv := op.Const(as.SubScope("inv_workers"), float32(1)/float32(p.spec.Workers))
	var applies []*tf.Operation
	for _, b := range p.Buckets {
		sizes := make([]int32, len(b.Vars))
		for j, v := range b.Vars {
			sizes[j] = int32(v.Size())
		}
		parts := []tf.Output{b.Sum}
		if len(b.Vars) > 1 {
			parts = op.SplitV(as.SubScope("split"), b.Sum, op.Const(as.SubScope("sizes"), sizes), op.Const(as.SubScope("axis"), int32(0)), int64(len(b.Vars)))
		}
		for j, v := range b.Vars {
			shape := make([]int32, len(v.Shape))
			for k, d := range v.Shape {
				shape[k] = int32(d)
			}
			gr := op.Mul(as.SubScope("avg"), op.Reshape(as.SubScope("reshape"), parts[j], op.Const(as.SubScope("shape"), shape)), inv)
			applies = append(applies, p.spec.Optimizer.Apply(g, v, gr))
		}
	}
	p.apply = op.NoOp(as.WithControlDependencies(applies...))
}

// buildInference adds the inference pass: logits, the summed loss and the
// number of correct predictions.
func (p *Program) buildInference() {
	g := p.G
	es := g.Scope.SubScope("eval")
	p.Logits = p.Model.Forward(g, p.X, false)
	p.LossSum = op.Sum(es, SoftmaxCrossEntropy(g, p.Logits, p.Labels), op.Const(es.SubScope("axis"), []int32{0}))
	one := op.Const(es.SubScope("one"), int32(1))
	hit := op.Equal(es, op.ArgMax(es.SubScope("pred"), p.Logits, one), op.ArgMax(es.SubScope("truth"), p.Labels, one))
	p.Correct = op.Sum(es.SubScope("correct"), op.Cast(es, hit, tf.Float), op.Const(es.SubScope("axis0"), []int32{0}))
}

// openSession finalizes the graph and opens its session with the spec's
// thread pools.
func (p *Program) openSession() error {
	graph, err := p.G.Scope.Finalize()
	if err != nil {
		return fmt.Errorf("nn: building graph: %w", err)
	}
	p.Graph = graph
	cfg, err := proto.Marshal(&for_core_protos_go_proto.ConfigProto{
		IntraOpParallelismThreads: int32(p.spec.IntraOpThreads),
		InterOpParallelismThreads: int32(p.spec.InterOpThreads),
	})
	if err != nil {
		return err
	}
	p.Sess, err = tf.NewSession(graph, &tf.SessionOptions{Config: cfg})
	if err != nil {
		return fmt.Errorf("nn: new session: %w", err)
	}
	return nil
}

// Close releases the session.
func (p *Program) Close() error {
	if p.Sess == nil {
		return nil
	}
	err := p.Sess.Close()
	p.Sess = nil
	return err
}

// SetValues assigns variables by name; unknown names are an error so a
// checkpoint from another model is not half-loaded silently.
func (p *Program) SetValues(vals map[string][]float32) error {
	feeds := map[tf.Output]*tf.Tensor{}
	var targets []*tf.Operation
	for name, x := range vals {
		v := p.G.Variable(name)
		if v == nil {
			return fmt.Errorf("nn: no variable %q in this model", name)
		}
		t, err := Float32Tensor(x, v.Shape...)
		if err != nil {
			return fmt.Errorf("nn: variable %q: %w", name, err)
		}
		feeds[v.assignPH] = t
		targets = append(targets, v.assign)
	}
	if len(targets) == 0 {
		return nil
	}
	_, err := p.Sess.Run(feeds, nil, targets)
	return err
}

// Values reads the given variables (all when vars is nil).
func (p *Program) Values(vars []*Variable) (map[string][]float32, error) {
	if vars == nil {
		vars = p.G.Variables()
	}
	fetch := make([]tf.Output, len(vars))
	for i, v := range vars {
		fetch[i] = v.Value
	}
	out, err := p.Sess.Run(nil, fetch, nil)
	if err != nil {
		return nil, err
	}
	vals := make(map[string][]float32, len(vars))
	for i, v := range vars {
		if vals[v.Name], err = Floats(out[i]); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// Gradients runs the training forward and backward pass on one batch and
// returns the mean loss and this worker's fused gradient buckets. It also
// runs the state updates (batch-norm moving statistics).
func (p *Program) Gradients(x, labels *tf.Tensor) (float32, [][]float32, error) {
	fetch := make([]tf.Output, 0, 1+len(p.Buckets))
	fetch = append(fetch, p.Loss)
	for _, b := range p.Buckets {
		fetch = append(fetch, b.Grad)
	}
	out, err := p.Sess.Run(map[tf.Output]*tf.Tensor{p.X: x, p.Labels: labels}, fetch, p.G.Updates())
	if err != nil {
		return 0, nil, err
	}
	loss, err := Scalar(out[0])
	if err != nil {
		return 0, nil, err
	}
	bufs := make([][]float32, len(p.Buckets))
	for i := range p.Buckets {
		if bufs[i], err = Floats(out[1+i]); err != nil {
			return 0, nil, err
		}
	}
	return loss, bufs, nil
}

// Apply feeds the allreduced bucket sums, divides them by the number of
// workers and applies the optimizer; step is the 1-based update count.
func (p *Program) Apply(sums [][]float32, step int) error {
	if len(sums) != len(p.Buckets) {
		return fmt.Errorf("nn: %d buckets given, model has %d", len(sums), len(p.Buckets))
	}
	feeds, err := p.spec.Optimizer.Feeds(step)
	if err != nil {
		return err
	}
	for i, b := range p.Buckets {
		if feeds[b.Sum], err = Float32Tensor(sums[i], int64(b.Size)); err != nil {
			return err
		}
	}
	_, err = p.Sess.Run(feeds, nil, []*tf.Operation{p.apply})
	return err
}

// Evaluate returns the summed loss and the number of correct predictions
// of the inference graph on one batch.
func (p *Program) Evaluate(x, labels *tf.Tensor) (lossSum, correct float64, err error) {
	out, err := p.Sess.Run(map[tf.Output]*tf.Tensor{p.X: x, p.Labels: labels}, []tf.Output{p.LossSum, p.Correct}, nil)
	if err != nil {
		return 0, 0, err
	}
	l, err := Scalar(out[0])
	if err != nil {
		return 0, 0, err
	}
	c, err := Scalar(out[1])
	if err != nil {
		return 0, 0, err
	}
	return float64(l), float64(c), nil
}

// Predict returns the inference logits for a batch, flattened row-major.
func (p *Program) Predict(x *tf.Tensor) ([]float32, error) {
	out, err := p.Sess.Run(map[tf.Output]*tf.Tensor{p.X: x}, []tf.Output{p.Logits}, nil)
	if err != nil {
		return nil, err
	}
	return Floats(out[0])
}
