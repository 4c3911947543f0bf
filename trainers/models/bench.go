package models

import (
	"math/rand/v2"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"

	"github.com/switchml/switchml-go/trainers/nn"
)

// Bench is a benchmark model of the SwitchML evaluation with its fixed
// input: the layer shapes of the standard definition, so that the gradient
// a step allreduces has the published size.
type Bench struct {
	Name string
	// Config states the configuration (and where it differs from the
	// reference).
	Config string
	// InputShape is one example's input; InputType is tf.Float or tf.Int32.
	InputShape []int64
	InputType  tf.DataType
	// IDs gives, for int32 inputs, the number of valid ids at each position
	// of the flattened example (synthetic inputs draw below it).
	IDs func(pos int) int
	// Classes is the width of the logits; LabelRows is how many rows of
	// logits one example produces (the sequence length of a language model).
	Classes, LabelRows int
	// Parameters is the trainable parameter count of this definition, and
	// Published the figure it is checked against (0 when the configuration
	// is ours and there is no single published figure).
	Parameters, Published int64
	// Build constructs the model; every top-level layer is named and owns
	// the variables under its name.
	Build func(g *nn.Graph) nn.Sequential
}

var benches = map[string]*Bench{}

func registerBench(b *Bench) {
	benches[b.Name] = b
	registry[b.Name] = Def{Name: b.Name, InputType: b.InputType, Bench: b,
		Build: func(g *nn.Graph, _, _, _, _ int) nn.Layer { return b.Build(g) }}
}

// LookupBench returns a benchmark model, or nil for the small models.
func LookupBench(name string) *Bench { return benches[name] }

// Synthetic returns a batch of random inputs and one-hot labels of the
// model's shapes.
func (b *Bench) Synthetic(rng *rand.Rand, batch int) (x, labels *tf.Tensor, err error) {
	per := 1
	for _, d := range b.InputShape {
		per *= int(d)
	}
	shape := append([]int64{int64(batch)}, b.InputShape...)
	if b.InputType == tf.Int32 {
		ids := make([]int32, batch*per)
		for i := range ids {
			ids[i] = int32(rng.IntN(b.IDs(i % per)))
		}
		x, err = nn.Int32Tensor(ids, shape...)
	} else {
		v := make([]float32, batch*per)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		x, err = nn.Float32Tensor(v, shape...)
	}
	if err != nil {
		return nil, nil, err
	}
	rows := batch * max(1, b.LabelRows)
	y := make([]float32, rows*b.Classes)
	for r := 0; r < rows; r++ {
		y[r*b.Classes+rng.IntN(b.Classes)] = 1
	}
	labels, err = nn.Float32Tensor(y, int64(rows), int64(b.Classes))
	return x, labels, err
}

func init() {
	registerBench(resnet50)
	registerBench(vgg19)
	registerBench(bertBase)
	registerBench(ncf)
	registerBench(lstmLM)
	registerBench(deepLight)
	registerBench(ssd300)
	registerBench(ugatit)
}

// ---- ResNet-50 -----------------------------------------------------------

// resnet50 is ResNet-50 v1.5 as in torchvision: 224x224x3 input, bottleneck
// blocks [3, 4, 6, 3] of widths 64/128/256/512 (expansion 4), stride on the
// 3x3 convolution, 1x1 projection shortcuts, convolutions without bias each
// followed by batch norm (trainable scale and offset), global average
// pooling and a 2048x1000 classifier: 25,557,032 parameters.
var resnet50 = &Bench{
	Name:       "resnet50",
	Config:     "ResNet-50 v1.5 (torchvision layout), 224x224x3, 1000 classes",
	InputShape: []int64{224, 224, 3}, InputType: tf.Float, Classes: 1000,
	Parameters: 25557032, Published: 25557032,
	Build: func(g *nn.Graph) nn.Sequential {
		q := nn.Sequential{&nn.Block{Name: "stem", Layers: nn.Sequential{
			nn.NewConv2D(g, "stem/conv", 7, 3, 64, 2, "SAME", nn.Linear, false),
			nn.NewBatchNorm(g, "stem/bn", 64, 4),
			&nn.Act{Name: "stem/relu", Fn: nn.ReLU},
			&nn.Pool2D{Name: "stem/pool", Max: true, Size: 3, Stride: 2, Padding: "SAME"},
		}}}
		in := 64
		for stage, blocks := range []int{3, 4, 6, 3} {
			width := 64 << stage
			for b := 0; b < blocks; b++ {
				stride := 1
				if b == 0 && stage > 0 {
					stride = 2
				}
				name := "layer" + itoa(stage+1) + "." + itoa(b)
				q = append(q, bottleneck(g, name, in, width, stride))
				in = 4 * width
			}
		}
		q = append(q, &nn.Block{Name: "fc", Layers: nn.Sequential{
			&nn.MeanOver{Name: "fc/gap", Axis: 1},
			&nn.MeanOver{Name: "fc/gap2", Axis: 1},
			nn.NewDense(g, "fc/dense", 2048, 1000, nn.Linear),
		}})
		return q
	},
}

func bottleneck(g *nn.Graph, name string, in, width, stride int) nn.Layer {
	out := 4 * width
	body := nn.Sequential{
		nn.NewConv2D(g, name+"/conv1", 1, in, width, 1, "SAME", nn.Linear, false),
		nn.NewBatchNorm(g, name+"/bn1", width, 4),
		&nn.Act{Name: name + "/relu1", Fn: nn.ReLU},
		nn.NewConv2D(g, name+"/conv2", 3, width, width, stride, "SAME", nn.Linear, false),
		nn.NewBatchNorm(g, name+"/bn2", width, 4),
		&nn.Act{Name: name + "/relu2", Fn: nn.ReLU},
		nn.NewConv2D(g, name+"/conv3", 1, width, out, 1, "SAME", nn.Linear, false),
		nn.NewBatchNorm(g, name+"/bn3", out, 4),
	}
	var sc nn.Sequential
	if stride != 1 || in != out {
		sc = nn.Sequential{
			nn.NewConv2D(g, name+"/downsample/conv", 1, in, out, stride, "SAME", nn.Linear, false),
			nn.NewBatchNorm(g, name+"/downsample/bn", out, 4),
		}
	}
	return &nn.Residual{Name: name, Body: body, Shortcut: sc, Act: nn.ReLU}
}

// ---- VGG-19 --------------------------------------------------------------

// vgg19 is VGG-19 (configuration E) as in torchvision: sixteen 3x3
// convolutions with bias (64, 64, M, 128, 128, M, 256 x4, M, 512 x4, M,
// 512 x4, M), then 25088-4096-4096-1000 fully connected layers with dropout:
// 143,667,240 parameters.
var vgg19 = &Bench{
	Name:       "vgg19",
	Config:     "VGG-19 (configuration E, torchvision layout without batch norm), 224x224x3, 1000 classes",
	InputShape: []int64{224, 224, 3}, InputType: tf.Float, Classes: 1000,
	Parameters: 143667240, Published: 143667240,
	Build: func(g *nn.Graph) nn.Sequential {
		var q nn.Sequential
		in, n := 3, 0
		for _, c := range []int{64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0} {
			if c == 0 {
				q = append(q, &nn.Pool2D{Name: "pool" + itoa(len(q)), Max: true, Size: 2, Stride: 2, Padding: "VALID"})
				continue
			}
			n++
			q = append(q, nn.NewConv2D(g, "conv"+itoa(n), 3, in, c, 1, "SAME", nn.ReLU, true))
			in = c
		}
		return append(q,
			&nn.Flatten{Name: "flatten", Size: 7 * 7 * 512},
			nn.NewDense(g, "fc6", 7*7*512, 4096, nn.ReLU),
			&nn.Dropout{Name: "drop6", Rate: 0.5},
			nn.NewDense(g, "fc7", 4096, 4096, nn.ReLU),
			&nn.Dropout{Name: "drop7", Rate: 0.5},
			nn.NewDense(g, "fc8", 4096, 1000, nn.Linear),
		)
	},
}

// ---- BERT-base -----------------------------------------------------------

// BERT-base (uncased): vocabulary 30,522, hidden 768, 12 layers of 12 heads,
// feed-forward 3072, 512 positions, 2 token types, layer norm epsilon 1e-12,
// erf GELU, tanh pooler on [CLS]. Encoder and pooler have 109,482,240
// parameters (the published count of bert-base-uncased); the sequence
// classification head adds 768x2+2 = 1,538, so the model has 109,483,778.
const (
	bertVocab     = 30522
	bertHidden    = 768
	bertLayers    = 12
	bertHeads     = 12
	bertFF        = 3072
	bertPositions = 512
	bertSeq       = 128
)

var bertBase = &Bench{
	Name:       "bert",
	Config:     "BERT-base uncased (vocab 30522, 12x768, 12 heads, FF 3072) with a 2-class sequence classification head, sequence length 128",
	InputShape: []int64{bertSeq}, InputType: tf.Int32, IDs: func(int) int { return bertVocab },
	Classes:    2,
	Parameters: 109483778, Published: 109482240,
	Build: func(g *nn.Graph) nn.Sequential {
		q := nn.Sequential{bertEmbeddings(g, "embeddings")}
		for i := 0; i < bertLayers; i++ {
			q = append(q, bertLayer(g, "encoder.layer"+itoa(i)))
		}
		w := g.NewVariable("pooler/kernel", []int64{bertHidden, bertHidden}, nn.Trainable, nn.Normal(0.02))
		b := g.NewVariable("pooler/bias", []int64{bertHidden}, nn.Trainable, nn.Zeros)
		q = append(q, &nn.Func{Name: "pooler", Fn: func(g *nn.Graph, s *op.Scope, x tf.Output, _ bool) tf.Output {
			u := nn.Ops(s)
			seq := op.Reshape(u(), x, op.Const(u(), []int32{-1, bertSeq, bertHidden}))
			first := op.Reshape(u(), op.Slice(u(), seq, op.Const(u(), []int32{0, 0, 0}), op.Const(u(), []int32{-1, 1, -1})),
				op.Const(u(), []int32{-1, bertHidden}))
			return op.Tanh(u(), op.BiasAdd(u(), op.MatMul(u(), first, w.Value), b.Value))
		}})
		return append(q, nn.NewDense(g, "classifier", bertHidden, 2, nn.Linear))
	},
}

// bertEmbeddings maps ids [batch, seq] to [batch*seq, hidden]: word +
// position + token type 0 embeddings, then layer norm.
func bertEmbeddings(g *nn.Graph, name string) nn.Layer {
	word := g.NewVariable(name+"/word_embeddings", []int64{bertVocab, bertHidden}, nn.Trainable, nn.Normal(0.02))
	pos := g.NewVariable(name+"/position_embeddings", []int64{bertPositions, bertHidden}, nn.Trainable, nn.Normal(0.02))
	typ := g.NewVariable(name+"/token_type_embeddings", []int64{2, bertHidden}, nn.Trainable, nn.Normal(0.02))
	ln := nn.NewLayerNorm(g, name+"/LayerNorm", bertHidden, 1e-12)
	return &nn.Func{Name: name, Fn: func(g *nn.Graph, s *op.Scope, ids tf.Output, training bool) tf.Output {
		u := nn.Ops(s)
		flat := op.Reshape(u(), ids, op.Const(u(), []int32{-1}))
		w := op.Reshape(u(), op.GatherV2(u(), word.Value, flat, op.Const(u(), int32(0))), op.Const(u(), []int32{-1, bertSeq, bertHidden}))
		p := op.Slice(u(), pos.Value, op.Const(u(), []int32{0, 0}), op.Const(u(), []int32{bertSeq, bertHidden}))
		t := op.Slice(u(), typ.Value, op.Const(u(), []int32{0, 0}), op.Const(u(), []int32{1, bertHidden}))
		x := op.AddV2(u(), op.AddV2(u(), w, p), t)
		return ln.Forward(g, op.Reshape(u(), x, op.Const(u(), []int32{-1, bertHidden})), training)
	}}
}

// bertLayer is one encoder layer on [batch*seq, hidden].
func bertLayer(g *nn.Graph, name string) nn.Layer {
	dense := func(n string, in, out int) (*nn.Variable, *nn.Variable) {
		return g.NewVariable(name+"/"+n+"/kernel", []int64{int64(in), int64(out)}, nn.Trainable, nn.Normal(0.02)),
			g.NewVariable(name+"/"+n+"/bias", []int64{int64(out)}, nn.Trainable, nn.Zeros)
	}
	qw, qb := dense("attention.query", bertHidden, bertHidden)
	kw, kb := dense("attention.key", bertHidden, bertHidden)
	vw, vb := dense("attention.value", bertHidden, bertHidden)
	ow, ob := dense("attention.output", bertHidden, bertHidden)
	ln1 := nn.NewLayerNorm(g, name+"/attention.LayerNorm", bertHidden, 1e-12)
	iw, ib := dense("intermediate", bertHidden, bertFF)
	fw, fb := dense("output", bertFF, bertHidden)
	ln2 := nn.NewLayerNorm(g, name+"/output.LayerNorm", bertHidden, 1e-12)
	const dh = bertHidden / bertHeads
	return &nn.Func{Name: name, Fn: func(g *nn.Graph, s *op.Scope, x tf.Output, training bool) tf.Output {
		u := nn.Ops(s)
		lin := func(x tf.Output, w, b *nn.Variable) tf.Output {
			return op.BiasAdd(u(), op.MatMul(u(), x, w.Value), b.Value)
		}
		heads := func(x tf.Output) tf.Output { // [b*T, H] -> [b, heads, T, dh]
			r := op.Reshape(u(), x, op.Const(u(), []int32{-1, bertSeq, bertHeads, dh}))
			return op.Transpose(u(), r, op.Const(u(), []int32{0, 2, 1, 3}))
		}
		q, k, v := heads(lin(x, qw, qb)), heads(lin(x, kw, kb)), heads(lin(x, vw, vb))
		scores := op.Mul(u(), op.BatchMatMulV2(u(), q, k, op.BatchMatMulV2AdjY(true)), op.Const(u(), float32(0.125)))
		probs := op.Reshape(u(), op.Softmax(u(), op.Reshape(u(), scores, op.Const(u(), []int32{-1, bertSeq}))),
			op.Const(u(), []int32{-1, bertHeads, bertSeq, bertSeq}))
		ctx := op.Transpose(u(), op.BatchMatMulV2(u(), probs, v), op.Const(u(), []int32{0, 2, 1, 3}))
		ctx = op.Reshape(u(), ctx, op.Const(u(), []int32{-1, bertHidden}))
		a := ln1.Forward(g, op.AddV2(u(), lin(ctx, ow, ob), x), training)
		h := nn.Gelu(u(), lin(a, iw, ib))
		return ln2.Forward(g, op.AddV2(u(), lin(h, fw, fb), a), training)
	}}
}

// ---- NCF -----------------------------------------------------------------

// NeuMF as in the MLPerf recommendation benchmark on MovieLens-20M: 138,493
// users, 26,744 items, GMF factors 64, MLP layers 256-256-128-64 (user and
// item MLP embeddings of 128 each), one output logit over [GMF, MLP]:
// 31,832,577 parameters. The logit z is fed to the loss as two-class logits
// [0, z], which is the logistic loss without extra parameters.
const (
	ncfUsers = 138493
	ncfItems = 26744
	ncfMF    = 64
)

var ncf = &Bench{
	Name:       "ncf",
	Config:     "NeuMF (MLPerf NCF on MovieLens-20M): 138493 users, 26744 items, GMF 64, MLP 256-256-128-64, one logit",
	InputShape: []int64{2}, InputType: tf.Int32,
	IDs:        func(pos int) int { return [2]int{ncfUsers, ncfItems}[pos] },
	Classes:    2,
	Parameters: 31832577, Published: 31832577,
	Build: func(g *nn.Graph) nn.Sequential {
		const name = "embeddings"
		umf := g.NewVariable(name+"/mf_user", []int64{ncfUsers, ncfMF}, nn.Trainable, nn.Normal(0.01))
		imf := g.NewVariable(name+"/mf_item", []int64{ncfItems, ncfMF}, nn.Trainable, nn.Normal(0.01))
		umlp := g.NewVariable(name+"/mlp_user", []int64{ncfUsers, 128}, nn.Trainable, nn.Normal(0.01))
		imlp := g.NewVariable(name+"/mlp_item", []int64{ncfItems, 128}, nn.Trainable, nn.Normal(0.01))
		// Every layer carries the GMF vector (first 64 columns) along with
		// the MLP activations.
		q := nn.Sequential{&nn.Func{Name: name, Fn: func(g *nn.Graph, s *op.Scope, ids tf.Output, _ bool) tf.Output {
			u := nn.Ops(s)
			cols := op.Unpack(u(), ids, 2, op.UnpackAxis(1))
			ax := op.Const(u(), int32(0))
			gather := func(t *nn.Variable, i tf.Output) tf.Output { return op.GatherV2(u(), t.Value, i, ax) }
			gmf := op.Mul(u(), gather(umf, cols[0]), gather(imf, cols[1]))
			return op.ConcatV2(u(), []tf.Output{gmf, gather(umlp, cols[0]), gather(imlp, cols[1])}, op.Const(u(), int32(1)))
		}}}
		in := 256
		for i, out := range []int{256, 128, 64} {
			q = append(q, carryDense(g, "mlp"+itoa(i+1), ncfMF, in, out))
			in = out
		}
		return append(q, nn.NewDense(g, "predict", ncfMF+64, 1, nn.Linear), &nn.ConcatZero{Name: "logits"})
	},
}

// carryDense applies a ReLU dense layer to the columns after the first
// `carry` ones and passes those through unchanged.
func carryDense(g *nn.Graph, name string, carry, in, out int) nn.Layer {
	d := nn.NewDense(g, name, in, out, nn.ReLU)
	return &nn.Func{Name: name, Fn: func(g *nn.Graph, s *op.Scope, x tf.Output, training bool) tf.Output {
		u := nn.Ops(s)
		parts := op.SplitV(u(), x, op.Const(u(), []int32{int32(carry), int32(in)}), op.Const(u(), int32(1)), 2)
		return op.ConcatV2(u(), []tf.Output{parts[0], d.Forward(g, parts[1], training)}, op.Const(u(), int32(1)))
	}}
}

// ---- LSTM language model ---------------------------------------------------

// The "large" word-level LSTM of Zaremba et al. (Penn Treebank): vocabulary
// 10,000, embedding 1500, two LSTM layers of 1500 units unrolled over 35
// steps, untied 1500x10000 softmax: 66,022,000 parameters (published as
// 66M). Dropout is left out (it has no parameters).
const (
	lmVocab  = 10000
	lmHidden = 1500
	lmSteps  = 35
)

var lstmLM = &Bench{
	Name:       "lstm",
	Config:     "2-layer LSTM language model (Zaremba et al. large): vocab 10000, 1500 units, 35 steps, untied softmax",
	InputShape: []int64{lmSteps}, InputType: tf.Int32, IDs: func(int) int { return lmVocab },
	Classes: lmVocab, LabelRows: lmSteps,
	Parameters: 66022000, Published: 66022000,
	Build: func(g *nn.Graph) nn.Sequential {
		return nn.Sequential{
			nn.NewEmbedding(g, "embedding", lmVocab, lmHidden),
			nn.NewLSTM(g, "lstm1", lmHidden, lmHidden, lmSteps),
			nn.NewLSTM(g, "lstm2", lmHidden, lmHidden, lmSteps),
			&nn.Block{Name: "softmax", Layers: nn.Sequential{
				&nn.Reshape{Name: "softmax/flat", Shape: []int32{-1, lmHidden}},
				nn.NewDense(g, "softmax/dense", lmHidden, lmVocab, nn.Linear),
			}},
		}
	},
}

// ---- DeepLight (CTR) -------------------------------------------------------

// A DeepLight-style CTR model (DeepFwFM, the dense model that DeepLight
// prunes) on Criteo's 39 fields (13 bucketized numeric + 26 categorical):
// feature ids hashed into 2^20 buckets shared by all fields (each field
// draws from its own range), embeddings of 10, first-order weights and a
// global bias, field-weighted pairwise interactions (39*38/2 = 741 weights)
// and a 390-400-400-400-1 ReLU network; the logit is the sum of the linear,
// FwFM and network terms: 12,012,679 parameters.
const (
	ctrFields = 39
	ctrVocab  = 1 << 20
	ctrDim    = 10
)

var deepLight = &Bench{
	Name:       "deeplight",
	Config:     "DeepFwFM (DeepLight's dense model) on Criteo: 39 fields, 2^20 hashed ids, embedding 10, FwFM, DNN 400-400-400",
	InputShape: []int64{ctrFields}, InputType: tf.Int32,
	IDs:        func(pos int) int { return ctrVocab / ctrFields },
	Classes:    2,
	Parameters: 12012679,
	Build: func(g *nn.Graph) nn.Sequential {
		const name = "features"
		emb := g.NewVariable(name+"/embeddings", []int64{ctrVocab, ctrDim}, nn.Trainable, nn.Normal(0.01))
		lin := g.NewVariable(name+"/linear", []int64{ctrVocab, 1}, nn.Trainable, nn.Zeros)
		bias := g.NewVariable(name+"/bias", []int64{1}, nn.Trainable, nn.Zeros)
		pairs := ctrFields * (ctrFields - 1) / 2
		fw := g.NewVariable(name+"/fwfm", []int64{int64(pairs)}, nn.Trainable, nn.Normal(0.01))
		// Upper-triangle mask picks each field pair once.
		mask := make([]float32, ctrFields*ctrFields)
		for i := 0; i < ctrFields; i++ {
			for j := i + 1; j < ctrFields; j++ {
				mask[i*ctrFields+j] = 1
			}
		}
		// The first column carries the linear + FwFM logit, the rest the
		// embeddings for the network.
		q := nn.Sequential{&nn.Func{Name: name, Fn: func(g *nn.Graph, s *op.Scope, ids tf.Output, _ bool) tf.Output {
			u := nn.Ops(s)
			offs := make([]int32, ctrFields)
			for f := range offs {
				offs[f] = int32(f * (ctrVocab / ctrFields))
			}
			gid := op.AddV2(u(), ids, op.Const(u(), offs))
			ax := op.Const(u(), int32(0))
			e := op.GatherV2(u(), emb.Value, gid, ax) // [b, F, D]
			first := op.Sum(u(), op.GatherV2(u(), lin.Value, gid, ax), op.Const(u(), []int32{1, 2}))
			// FwFM: sum_{i<j} r_ij <e_i, e_j>; r scattered into an F x F
			// matrix through the mask.
			dots := op.BatchMatMulV2(u(), e, e, op.BatchMatMulV2AdjY(true)) // [b, F, F]
			idx := make([]int32, ctrFields*ctrFields)
			k := int32(0)
			for i := 0; i < ctrFields; i++ {
				for j := 0; j < ctrFields; j++ {
					if j > i {
						idx[i*ctrFields+j] = k
						k++
					}
				}
			}
			r := op.Mul(u(), op.GatherV2(u(), fw.Value, op.Const(u(), idx), ax), op.Const(u(), mask))
			r = op.Reshape(u(), r, op.Const(u(), []int32{1, ctrFields, ctrFields}))
			fm := op.Sum(u(), op.Mul(u(), dots, r), op.Const(u(), []int32{1, 2}))
			z := op.AddV2(u(), op.AddV2(u(), first, fm), bias.Value)
			flat := op.Reshape(u(), e, op.Const(u(), []int32{-1, ctrFields * ctrDim}))
			return op.ConcatV2(u(), []tf.Output{op.Reshape(u(), z, op.Const(u(), []int32{-1, 1})), flat}, op.Const(u(), int32(1)))
		}}}
		in := ctrFields * ctrDim
		for i := 1; i <= 3; i++ {
			q = append(q, carryDense(g, "dnn"+itoa(i), 1, in, 400))
			in = 400
		}
		out := nn.NewDense(g, "dnn_out", 400, 1, nn.Linear)
		q = append(q, &nn.Func{Name: "dnn_out", Fn: func(g *nn.Graph, s *op.Scope, x tf.Output, training bool) tf.Output {
			u := nn.Ops(s)
			parts := op.SplitV(u(), x, op.Const(u(), []int32{1, 400}), op.Const(u(), int32(1)), 2)
			return op.AddV2(u(), parts[0], out.Forward(g, parts[1], training))
		}}, &nn.ConcatZero{Name: "logits"})
		return q
	},
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
