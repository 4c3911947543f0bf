package models

import (
	"fmt"
	"math/rand/v2"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"

	"github.com/switchml/switchml-go/trainers/nn"
)

// ---- SSD300 (VGG-16) -------------------------------------------------------

// SSD300 with a VGG-16 backbone as in torchvision's ssd300_vgg16 (COCO, 91
// classes): VGG-16's thirteen 3x3 convolutions with bias (pool3 rounding up,
// so conv4_3 sees 38x38), a learned L2-normalisation scale on conv4_3 (512
// parameters, initialised to 20), pool5 3x3/1, fc6 as a 3x3 convolution of
// rate 6 to 1024 and fc7 1x1 to 1024, then four extra blocks (1x1 to 256 and
// 3x3/2 to 512; 1x1 to 128 and 3x3/2 to 256; twice 1x1 to 128 and a valid
// 3x3 to 256). Six feature maps (38, 19, 10, 5, 3, 1) with 4, 6, 6, 6, 4, 4
// default boxes per location give 8,732 boxes; each map has a 3x3 class
// head (boxes x 91) and a 3x3 box head (boxes x 4): 35,641,826 parameters.
//
// The loss is the mean softmax cross-entropy of the 8,732 class scores plus
// the smooth-L1 loss of the box offsets against fixed synthetic targets;
// hard negative mining and the matching of default boxes to ground truth
// are left out (they have no parameters and do not change the gradient's
// size).
const (
	ssdClasses = 91
	ssdBoxes   = 8732
	ssdSize    = 300
)

// ssdMaps are the feature maps' heights (and widths).
var ssdMaps = []int{38, 19, 10, 5, 3, 1}

var ssd300 = &Bench{
	Name:       "ssd",
	Config:     "SSD300 with a VGG-16 backbone (torchvision ssd300_vgg16 layout), 300x300x3, 91 COCO classes, 8732 default boxes",
	InputShape: []int64{ssdSize, ssdSize, 3}, InputType: tf.Float,
	Classes: ssdClasses, LabelRows: ssdBoxes,
	Parameters: 35641826, Published: 35641826,
	Build: buildSSD,
}

func buildSSD(g *nn.Graph) nn.Sequential {
	// The units run in order; each of the six feature maps is kept for the
	// heads, which form the last unit.
	var feats []tf.Output
	conv := func(name string, k, in, out, stride int, padding string) *nn.Conv2D {
		return nn.NewConv2D(g, name, k, in, out, stride, padding, nn.ReLU, true)
	}
	pool := func(name string) *nn.Pool2D {
		return &nn.Pool2D{Name: name, Max: true, Size: 2, Stride: 2, Padding: "SAME"}
	}
	unit := func(name string, layers nn.Sequential, keep bool) nn.Layer {
		return &nn.Func{Name: name, Fn: func(g *nn.Graph, _ *op.Scope, x tf.Output, training bool) tf.Output {
			if name == "conv1" {
				feats = feats[:0]
			}
			y := layers.Forward(g, x, training)
			if keep {
				feats = append(feats, y)
			}
			return y
		}}
	}
	q := nn.Sequential{
		unit("conv1", nn.Sequential{conv("conv1/conv1_1", 3, 3, 64, 1, "SAME"), conv("conv1/conv1_2", 3, 64, 64, 1, "SAME"), pool("conv1/pool")}, false),
		unit("conv2", nn.Sequential{conv("conv2/conv2_1", 3, 64, 128, 1, "SAME"), conv("conv2/conv2_2", 3, 128, 128, 1, "SAME"), pool("conv2/pool")}, false),
		unit("conv3", nn.Sequential{conv("conv3/conv3_1", 3, 128, 256, 1, "SAME"), conv("conv3/conv3_2", 3, 256, 256, 1, "SAME"),
			conv("conv3/conv3_3", 3, 256, 256, 1, "SAME"), pool("conv3/pool")}, false),
	}
	// conv4_3 feeds the heads through a learned per-channel scale of its
	// L2-normalised activations, and the backbone unnormalised.
	conv4 := nn.Sequential{conv("conv4/conv4_1", 3, 256, 512, 1, "SAME"), conv("conv4/conv4_2", 3, 512, 512, 1, "SAME"), conv("conv4/conv4_3", 3, 512, 512, 1, "SAME")}
	scale := g.NewVariable("conv4/l2norm_scale", []int64{512}, nn.Trainable, func(_ *rand.Rand, shape []int64) []float32 {
		v := make([]float32, shape[0])
		for i := range v {
			v[i] = 20
		}
		return v
	})
	q = append(q, &nn.Func{Name: "conv4", Fn: func(g *nn.Graph, s *op.Scope, x tf.Output, training bool) tf.Output {
		y := conv4.Forward(g, x, training)
		u := nn.Ops(s)
		sq := op.Sum(u(), op.Square(u(), y), op.Const(u(), []int32{3}), op.SumKeepDims(true))
		inv := op.Rsqrt(u(), op.Maximum(u(), sq, op.Const(u(), float32(1e-24))))
		feats = append(feats, op.Mul(u(), op.Mul(u(), y, inv), scale.Value))
		return y
	}})
	fc6 := conv("fc/fc6", 3, 512, 1024, 1, "SAME")
	fc6.Dilation = 6
	q = append(q,
		unit("conv5", nn.Sequential{pool("conv5/pool4"), conv("conv5/conv5_1", 3, 512, 512, 1, "SAME"),
			conv("conv5/conv5_2", 3, 512, 512, 1, "SAME"), conv("conv5/conv5_3", 3, 512, 512, 1, "SAME")}, false),
		unit("fc", nn.Sequential{&nn.Pool2D{Name: "fc/pool5", Max: true, Size: 3, Stride: 1, Padding: "SAME"},
			fc6, conv("fc/fc7", 1, 1024, 1024, 1, "SAME")}, true),
		unit("extra1", nn.Sequential{conv("extra1/conv1", 1, 1024, 256, 1, "SAME"), conv("extra1/conv2", 3, 256, 512, 2, "SAME")}, true),
		unit("extra2", nn.Sequential{conv("extra2/conv1", 1, 512, 128, 1, "SAME"), conv("extra2/conv2", 3, 128, 256, 2, "SAME")}, true),
		unit("extra3", nn.Sequential{conv("extra3/conv1", 1, 256, 128, 1, "SAME"), conv("extra3/conv2", 3, 128, 256, 1, "VALID")}, true),
		unit("extra4", nn.Sequential{conv("extra4/conv1", 1, 256, 128, 1, "SAME"), conv("extra4/conv2", 3, 128, 256, 1, "VALID")}, true),
	)
	return append(q, ssdHeads(g, "head", &feats))
}

// ssdHeads maps the six feature maps to class logits [batch*8732, 91] and,
// in training, registers the box regression loss.
func ssdHeads(g *nn.Graph, name string, feats *[]tf.Output) nn.Layer {
	channels := []int{512, 1024, 512, 256, 256, 256}
	boxes := []int{4, 6, 6, 6, 4, 4}
	var cls, reg []*nn.Conv2D
	for i, c := range channels {
		cls = append(cls, nn.NewConv2D(g, name+"/cls"+itoa(i), 3, c, boxes[i]*ssdClasses, 1, "SAME", nn.Linear, true))
		reg = append(reg, nn.NewConv2D(g, name+"/box"+itoa(i), 3, c, boxes[i]*4, 1, "SAME", nn.Linear, true))
	}
	// Fixed synthetic box targets (encoded offsets), the same on every worker.
	rng := rand.New(rand.NewPCG(7, 300))
	target := make([][][]float32, 1)
	target[0] = make([][]float32, ssdBoxes)
	for i := range target[0] {
		target[0][i] = make([]float32, 4)
		for j := range target[0][i] {
			target[0][i][j] = float32(rng.NormFloat64())
		}
	}
	return &nn.Func{Name: name, Fn: func(g *nn.Graph, s *op.Scope, _ tf.Output, training bool) tf.Output {
		u := nn.Ops(s)
		if len(*feats) != len(channels) {
			s.UpdateErr("ssd", fmt.Errorf("models: ssd heads got %d feature maps, want %d", len(*feats), len(channels)))
			return (*feats)[0]
		}
		var scores, offsets []tf.Output
		for i, f := range *feats {
			n := int32(ssdMaps[i] * ssdMaps[i] * boxes[i])
			scores = append(scores, op.Reshape(u(), cls[i].Forward(g, f, training), op.Const(u(), []int32{-1, n, ssdClasses})))
			offsets = append(offsets, op.Reshape(u(), reg[i].Forward(g, f, training), op.Const(u(), []int32{-1, n, 4})))
		}
		axis := op.Const(u(), int32(1))
		logits := op.Reshape(u(), op.ConcatV2(u(), scores, axis), op.Const(u(), []int32{-1, ssdClasses}))
		if training {
			// Smooth L1 (Huber, delta 1): 0.5 m^2 + (|d| - m), m = min(|d|, 1),
			// summed over the 4 offsets, averaged over boxes and examples.
			d := op.Sub(u(), op.ConcatV2(u(), offsets, axis), op.Const(u(), target))
			ad := op.Abs(u(), d)
			m := op.Minimum(u(), ad, op.Const(u(), float32(1)))
			huber := op.AddV2(u(), op.Mul(u(), op.Const(u(), float32(0.5)), op.Square(u(), m)), op.Sub(u(), ad, m))
			perBox := op.Sum(u(), huber, op.Const(u(), []int32{2}))
			g.AddLoss(op.Mean(u(), perBox, op.Const(u(), []int32{0, 1})))
		}
		return logits
	}}
}
