package models

import (
	"math/rand/v2"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"

	"github.com/switchml/switchml-go/trainers/nn"
)

// ---- UGATIT ----------------------------------------------------------------

// U-GAT-IT (Kim et al., ICLR 2020), the full version of the reference
// PyTorch code (github.com/znxlwm/UGATIT-pytorch, networks.py with main.py's
// defaults: 64 base channels, 4 residual blocks, 256x256 images, light
// off): two generators (A to B and B to A) and four discriminators (a
// global one of 7 layers and a local one of 5 for each domain).
//
// A generator: reflection-padded 7x7 convolution to 64, two stride-2 3x3
// convolutions to 128 and 256 (no bias, instance norm, ReLU), 4 residual
// blocks; the class activation map (1x1 weights of global average and max
// pooling, 256 each, no bias, and a 1x1 convolution of the 512 weighted maps
// to 256 with bias); the gamma/beta network of the full version, whose first
// layer sees the whole 64x64x256 map (1,048,576 x 256 without bias, then
// 256x256, gamma and beta 256x256, no bias); 4 residual blocks with adaptive
// layer-instance norm (a rho of 256 each); two nearest-neighbour upsamplings
// with 3x3 convolutions to 128 and 64 and layer-instance norm (rho, gamma,
// beta), and a 7x7 convolution to 3 with tanh: 278,959,808 parameters.
//
// A discriminator of n layers: reflection-padded 4x4 stride-2 convolutions
// with bias from 3 to 64 and doubling n-3 times, a stride-1 4x4 convolution
// doubling once more, the class activation map (two 1xC weights and a 1x1
// convolution from 2C to C with bias) and a 4x4 convolution to one channel
// without bias: 53,130,176 parameters for the global (n = 7) and 3,290,560
// for the local one (n = 5). Spectral normalisation keeps the weight as the
// parameter; its power-iteration vectors are buffers and are left out.
//
// The whole model has 2 x (278,959,808 + 53,130,176 + 3,290,560) =
// 670,761,088 parameters (2.68 GB of float32 gradient).
//
// One step here is one backward pass through one loss that every weight
// feeds: each generator translates the (synthetic) input once, each
// discriminator judges its domain's translation, and the logit is the sum
// of the discriminators' mean outputs, every class-activation logit and the
// mean absolute difference between input and translations. The reference
// trains the discriminators and then the generators, and its generator loss
// also runs the cycle and identity translations (four more generator
// passes): a real iteration computes about three times as much, with the
// same gradient size.
const (
	ugatitSize = 256
	ugatitCh   = 64
	ugatitRes  = 4
)

var ugatit = &Bench{
	Name:       "ugatit",
	Config:     "U-GAT-IT full (reference PyTorch layout): 2 generators (64 channels, 4+4 residual blocks, full gamma/beta MLP), global (7-layer) and local (5-layer) discriminators per domain, 256x256x3; one generator and one discriminator pass each per step",
	InputShape: []int64{ugatitSize, ugatitSize, 3}, InputType: tf.Float,
	Classes:    2,
	Parameters: 670761088, Published: 670761088,
	Build: buildUGATIT,
}

// Parameter counts of the reference networks, for the tests.
const (
	ugatitGenerator  = 278959808
	ugatitGlobalDisc = 53130176
	ugatitLocalDisc  = 3290560
	ugatitImageCh    = 3 // channels of one image
)

func buildUGATIT(g *nn.Graph) nn.Sequential {
	genA2B := newUGATITGenerator(g, "genA2B")
	genB2A := newUGATITGenerator(g, "genB2A")
	discs := []struct {
		name   string
		layers int
		// image is 0 for the B-domain translation (A to B), 1 for the
		// A-domain one.
		image int
	}{{"disGA", 7, 1}, {"disGB", 7, 0}, {"disLA", 5, 1}, {"disLB", 5, 0}}

	// The units run in order within one forward pass and hand each other
	// the input, the translations and the running logit terms here.
	var input tf.Output
	var terms []tf.Output
	q := nn.Sequential{
		&nn.Func{Name: "genA2B", Fn: func(g *nn.Graph, s *op.Scope, x tf.Output, _ bool) tf.Output {
			input, terms = x, nil
			fake, cam := genA2B.forward(g, s, x)
			terms = append(terms, cam, meanAbsDiff(s, fake, x))
			return fake
		}},
		&nn.Func{Name: "genB2A", Fn: func(g *nn.Graph, s *op.Scope, fakeB tf.Output, _ bool) tf.Output {
			fakeA, cam := genB2A.forward(g, s, input)
			terms = append(terms, cam, meanAbsDiff(s, fakeA, input))
			return op.ConcatV2(s.SubScope("both"), []tf.Output{fakeB, fakeA}, op.Const(s.SubScope("axis"), int32(3)))
		}},
	}
	for _, d := range discs {
		disc := newUGATITDiscriminator(g, d.name, d.layers)
		image := d.image
		q = append(q, &nn.Func{Name: d.name, Fn: func(g *nn.Graph, s *op.Scope, both tf.Output, _ bool) tf.Output {
			u := nn.Ops(s)
			img := op.Slice(u(), both, op.Const(u(), []int32{0, 0, 0, int32(ugatitImageCh * image)}),
				op.Const(u(), []int32{-1, -1, -1, ugatitImageCh}))
			out, cam := disc.forward(g, s, img)
			score := op.Mean(u(), out, op.Const(u(), []int32{1, 2, 3}))
			terms = append(terms, score, cam)
			// The images pass on; the zero-weighted score makes this
			// unit's output depend on its work, so the profile times it
			// here and not in the next unit.
			return op.AddV2(u(), both, op.Mul(u(), op.Reshape(u(), score, op.Const(u(), []int32{-1, 1, 1, 1})), op.Const(u(), float32(0))))
		}})
	}
	return append(q, &nn.Func{Name: "terms", Fn: func(g *nn.Graph, s *op.Scope, _ tf.Output, _ bool) tf.Output {
		u := nn.Ops(s)
		z := terms[0]
		for _, t := range terms[1:] {
			z = op.AddV2(u(), z, t)
		}
		return op.Reshape(u(), z, op.Const(u(), []int32{-1, 1}))
	}}, &nn.ConcatZero{Name: "logits"})
}

// constant initialises every value to v.
func constant(v float32) nn.Initializer {
	return func(_ *rand.Rand, shape []int64) []float32 {
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
}

// meanAbsDiff is the per-example mean |a - b| over an image, shape [batch].
func meanAbsDiff(s *op.Scope, a, b tf.Output) tf.Output {
	u := nn.Ops(s.SubScope("l1"))
	return op.Mean(u(), op.Abs(u(), op.Sub(u(), a, b)), op.Const(u(), []int32{1, 2, 3}))
}

// reflectConv is a reflection-padded, VALID convolution (PyTorch's
// ReflectionPad2d followed by Conv2d with padding 0).
type reflectConv struct {
	pad  int
	conv *nn.Conv2D
}

func newReflectConv(g *nn.Graph, name string, kernel, pad, in, out, stride int, bias bool) reflectConv {
	return reflectConv{pad: pad, conv: nn.NewConv2D(g, name, kernel, in, out, stride, "VALID", nn.Linear, bias)}
}

func (c reflectConv) forward(g *nn.Graph, s *op.Scope, x tf.Output) tf.Output {
	if c.pad > 0 {
		p := int32(c.pad)
		x = op.MirrorPad(s.SubScope("pad"), x, op.Const(s.SubScope("pads"), [][]int32{{0, 0}, {p, p}, {p, p}, {0, 0}}), "REFLECT")
	}
	return c.conv.Forward(g, x, true)
}

// normalize returns (x - mean) / sqrt(var + 1e-5) over the given axes.
func normalize(s *op.Scope, x tf.Output, axes []int32) tf.Output {
	u := nn.Ops(s)
	ax := op.Const(u(), axes)
	mean := op.Mean(u(), x, ax, op.MeanKeepDims(true))
	d := op.Sub(u(), x, mean)
	variance := op.Mean(u(), op.Square(u(), d), ax, op.MeanKeepDims(true))
	return op.Mul(u(), d, op.Rsqrt(u(), op.AddV2(u(), variance, op.Const(u(), float32(1e-5)))))
}

// instanceNorm normalises each channel of each example over its spatial
// positions, without parameters (PyTorch's InstanceNorm2d default).
func instanceNorm(s *op.Scope, x tf.Output) tf.Output {
	return normalize(s.SubScope("in"), x, []int32{1, 2})
}

// layerInstance mixes instance and layer normalisation by rho per channel:
// rho * IN(x) + (1 - rho) * LN(x).
func layerInstance(s *op.Scope, x tf.Output, rho *nn.Variable) tf.Output {
	u := nn.Ops(s)
	in := normalize(s.SubScope("in"), x, []int32{1, 2})
	ln := normalize(s.SubScope("ln"), x, []int32{1, 2, 3})
	return op.AddV2(u(), op.Mul(u(), in, rho.Value), op.Mul(u(), ln, op.Sub(u(), op.Const(u(), float32(1)), rho.Value)))
}

// cam is a class activation map: logits of the average- and max-pooled
// channels through two 1xC weights, the map weighted by each, concatenated
// and brought back to C channels by a 1x1 convolution with bias.
type cam struct {
	gap, gmp *nn.Variable
	conv     *nn.Conv2D
}

func newCAM(g *nn.Graph, name string, ch int) cam {
	return cam{
		gap:  g.NewVariable(name+"/gap_fc", []int64{int64(ch)}, nn.Trainable, nn.Normal(0.02)),
		gmp:  g.NewVariable(name+"/gmp_fc", []int64{int64(ch)}, nn.Trainable, nn.Normal(0.02)),
		conv: nn.NewConv2D(g, name+"/conv1x1", 1, 2*ch, ch, 1, "VALID", nn.Linear, true),
	}
}

// forward returns the re-weighted map (before its activation) and the
// summed CAM logits, shape [batch].
func (c cam) forward(g *nn.Graph, s *op.Scope, x tf.Output) (tf.Output, tf.Output) {
	u := nn.Ops(s)
	hw := op.Const(u(), []int32{1, 2})
	logit := func(pooled tf.Output, w *nn.Variable) tf.Output {
		return op.Sum(u(), op.Mul(u(), pooled, w.Value), op.Const(u(), []int32{1}))
	}
	logits := op.AddV2(u(), logit(op.Mean(u(), x, hw), c.gap), logit(op.Max(u(), x, hw), c.gmp))
	both := op.ConcatV2(u(), []tf.Output{op.Mul(u(), x, c.gap.Value), op.Mul(u(), x, c.gmp.Value)}, op.Const(u(), int32(3)))
	return c.conv.Forward(g, both, true), logits
}

type ugatitGen struct {
	name                   string
	down                   []reflectConv
	res                    [][2]reflectConv
	cam                    cam
	fc1, fc2, gamma, beta  *nn.Variable
	adaRes                 [][2]reflectConv
	adaRho                 [][2]*nn.Variable
	up                     []reflectConv
	upRho, upGamma, upBeta []*nn.Variable
	out                    reflectConv
}

func newUGATITGenerator(g *nn.Graph, name string) *ugatitGen {
	ch := ugatitCh
	deep := 4 * ch
	gen := &ugatitGen{name: name,
		down: []reflectConv{
			newReflectConv(g, name+"/down0", 7, 3, 3, ch, 1, false),
			newReflectConv(g, name+"/down1", 3, 1, ch, 2*ch, 2, false),
			newReflectConv(g, name+"/down2", 3, 1, 2*ch, deep, 2, false),
		},
		cam: newCAM(g, name+"/cam", deep),
	}
	for i := 0; i < ugatitRes; i++ {
		n := name + "/res" + itoa(i)
		gen.res = append(gen.res, [2]reflectConv{newReflectConv(g, n+"/conv1", 3, 1, deep, deep, 1, false), newReflectConv(g, n+"/conv2", 3, 1, deep, deep, 1, false)})
	}
	flat := int64(ugatitSize / 4 * ugatitSize / 4 * deep)
	d := int64(deep)
	gen.fc1 = g.NewVariable(name+"/fc1", []int64{flat, d}, nn.Trainable, nn.Normal(0.001))
	gen.fc2 = g.NewVariable(name+"/fc2", []int64{d, d}, nn.Trainable, nn.HeNormal)
	gen.gamma = g.NewVariable(name+"/gamma", []int64{d, d}, nn.Trainable, nn.GlorotUniform)
	gen.beta = g.NewVariable(name+"/beta", []int64{d, d}, nn.Trainable, nn.GlorotUniform)
	for i := 0; i < ugatitRes; i++ {
		n := name + "/adares" + itoa(i)
		gen.adaRes = append(gen.adaRes, [2]reflectConv{newReflectConv(g, n+"/conv1", 3, 1, deep, deep, 1, false), newReflectConv(g, n+"/conv2", 3, 1, deep, deep, 1, false)})
		gen.adaRho = append(gen.adaRho, [2]*nn.Variable{
			g.NewVariable(n+"/rho1", []int64{d}, nn.Trainable, constant(0.9)),
			g.NewVariable(n+"/rho2", []int64{d}, nn.Trainable, constant(0.9))})
	}
	in := deep
	for i := 0; i < 2; i++ {
		n := name + "/up" + itoa(i)
		gen.up = append(gen.up, newReflectConv(g, n+"/conv", 3, 1, in, in/2, 1, false))
		c := []int64{int64(in / 2)}
		gen.upRho = append(gen.upRho, g.NewVariable(n+"/rho", c, nn.Trainable, nn.Zeros))
		gen.upGamma = append(gen.upGamma, g.NewVariable(n+"/gamma", c, nn.Trainable, nn.Ones))
		gen.upBeta = append(gen.upBeta, g.NewVariable(n+"/beta", c, nn.Trainable, nn.Zeros))
		in /= 2
	}
	gen.out = newReflectConv(g, name+"/out", 7, 3, ch, 3, 1, false)
	return gen
}

// forward translates x and returns the image and the CAM logits.
func (gen *ugatitGen) forward(g *nn.Graph, s *op.Scope, x tf.Output) (tf.Output, tf.Output) {
	u := nn.Ops(s)
	for _, c := range gen.down {
		x = op.Relu(u(), instanceNorm(u(), c.forward(g, u(), x)))
	}
	for _, r := range gen.res {
		y := op.Relu(u(), instanceNorm(u(), r[0].forward(g, u(), x)))
		x = op.AddV2(u(), x, instanceNorm(u(), r[1].forward(g, u(), y)))
	}
	x, logits := gen.cam.forward(g, u(), x)
	x = op.Relu(u(), x)
	deep := int32(4 * ugatitCh)
	h := op.Reshape(u(), x, op.Const(u(), []int32{-1, int32(ugatitSize/4*ugatitSize/4) * deep}))
	h = op.Relu(u(), op.MatMul(u(), h, gen.fc1.Value))
	h = op.Relu(u(), op.MatMul(u(), h, gen.fc2.Value))
	four := op.Const(u(), []int32{-1, 1, 1, deep})
	gamma := op.Reshape(u(), op.MatMul(u(), h, gen.gamma.Value), four)
	beta := op.Reshape(u(), op.MatMul(u(), h, gen.beta.Value), four)
	adaILN := func(y tf.Output, rho *nn.Variable) tf.Output {
		return op.AddV2(u(), op.Mul(u(), layerInstance(u(), y, rho), gamma), beta)
	}
	for i, r := range gen.adaRes {
		y := op.Relu(u(), adaILN(r[0].forward(g, u(), x), gen.adaRho[i][0]))
		x = op.AddV2(u(), x, adaILN(r[1].forward(g, u(), y), gen.adaRho[i][1]))
	}
	size := int32(ugatitSize / 4)
	for i, c := range gen.up {
		size *= 2
		x = op.ResizeNearestNeighbor(u(), x, op.Const(u(), []int32{size, size}))
		y := layerInstance(u(), c.forward(g, u(), x), gen.upRho[i])
		x = op.Relu(u(), op.AddV2(u(), op.Mul(u(), y, gen.upGamma[i].Value), gen.upBeta[i].Value))
	}
	return op.Tanh(u(), gen.out.forward(g, u(), x)), logits
}

type ugatitDisc struct {
	convs []reflectConv
	cam   cam
	out   reflectConv
}

func newUGATITDiscriminator(g *nn.Graph, name string, layers int) *ugatitDisc {
	ch := ugatitCh
	d := &ugatitDisc{convs: []reflectConv{newReflectConv(g, name+"/conv0", 4, 1, 3, ch, 2, true)}}
	for i := 1; i < layers-2; i++ {
		in := ch << (i - 1)
		d.convs = append(d.convs, newReflectConv(g, name+"/conv"+itoa(i), 4, 1, in, 2*in, 2, true))
	}
	in := ch << (layers - 3)
	d.convs = append(d.convs, newReflectConv(g, name+"/conv"+itoa(layers-2), 4, 1, in, 2*in, 1, true))
	d.cam = newCAM(g, name+"/cam", 2*in)
	d.out = newReflectConv(g, name+"/out", 4, 1, 2*in, 1, 1, false)
	return d
}

// forward returns the patch scores and the CAM logits.
func (d *ugatitDisc) forward(g *nn.Graph, s *op.Scope, x tf.Output) (tf.Output, tf.Output) {
	u := nn.Ops(s)
	for _, c := range d.convs {
		x = op.LeakyRelu(u(), c.forward(g, u(), x), op.LeakyReluAlpha(0.2))
	}
	x, logits := d.cam.forward(g, u(), x)
	x = op.LeakyRelu(u(), x, op.LeakyReluAlpha(0.2))
	return d.out.forward(g, u(), x), logits
}
