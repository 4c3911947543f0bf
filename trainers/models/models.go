// Package models holds the classifiers the training driver knows by name:
// the small Fashion-MNIST models (mlp, cnn, cnn-wide) and the benchmark models of the
// SwitchML evaluation (resnet50, vgg19, bert, ncf, lstm, deeplight, ssd, ugatit) with the
// layer shapes of their standard definitions.
package models

import (
	"fmt"
	"sort"

	tf "github.com/wamuir/graft/tensorflow"

	"github.com/switchml/switchml-go/trainers/nn"
)

// Def is a named model for images of a given shape.
type Def struct {
	Name  string
	Build func(g *nn.Graph, h, w, c, classes int) nn.Layer
	// InputType is tf.Float for images.
	InputType tf.DataType
	// Bench is set for the benchmark models, whose input is fixed (Build
	// then ignores the image size and class count).
	Bench *Bench
}

var registry = map[string]Def{
	"mlp":      {Name: "mlp", Build: MLP, InputType: tf.Float},
	"cnn":      {Name: "cnn", Build: CNN, InputType: tf.Float},
	"cnn-wide": {Name: "cnn-wide", Build: CNNWide, InputType: tf.Float},
}

// Lookup returns the named model.
func Lookup(name string) (Def, error) {
	d, ok := registry[name]
	if !ok {
		return Def{}, fmt.Errorf("unknown model %q (known: %v)", name, Names())
	}
	return d, nil
}

// Names lists the known models.
func Names() []string {
	var n []string
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// MLP is a two-hidden-layer perceptron over the flattened image.
func MLP(g *nn.Graph, h, w, c, classes int) nn.Layer {
	in := h * w * c
	return nn.Sequential{
		&nn.Flatten{Name: "flatten", Size: in},
		nn.NewDense(g, "fc1", in, 256, nn.ReLU),
		&nn.Dropout{Name: "drop1", Rate: 0.2},
		nn.NewDense(g, "fc2", 256, 128, nn.ReLU),
		nn.NewDense(g, "logits", 128, classes, nn.Linear),
	}
}

// CNN is the Fashion-MNIST convolutional network: two conv/batch-norm/ReLU/
// max-pool stages, a dense layer of 128 units with dropout and the
// classifier: 206,970 parameters. It is sized for CPUs (about 7 MFLOP per
// image for forward and backward).
func CNN(g *nn.Graph, h, w, c, classes int) nn.Layer { return cnn(g, h, w, c, classes, 128) }

// CNNWide is CNN with a dense layer of 1024 units: 1,621,754 parameters
// (6.5 MB of gradient, eight times CNN's) for about 16 MFLOP per image, the
// size of the common Fashion-MNIST CNNs whose dense layer dominates the
// parameters. Its gradient, not its compute, sets a step's time on slow
// links.
func CNNWide(g *nn.Graph, h, w, c, classes int) nn.Layer { return cnn(g, h, w, c, classes, 1024) }

func cnn(g *nn.Graph, h, w, c, classes, dense int) nn.Layer {
	flat := (h / 4) * (w / 4) * 32
	return nn.Sequential{
		nn.NewConv2D(g, "conv1", 3, c, 16, 1, "SAME", nn.Linear, false),
		nn.NewBatchNorm(g, "bn1", 16, 4),
		&nn.Act{Name: "relu1", Fn: nn.ReLU},
		&nn.Pool2D{Name: "pool1", Max: true, Size: 2, Stride: 2, Padding: "VALID"},
		nn.NewConv2D(g, "conv2", 3, 16, 32, 1, "SAME", nn.Linear, false),
		nn.NewBatchNorm(g, "bn2", 32, 4),
		&nn.Act{Name: "relu2", Fn: nn.ReLU},
		&nn.Pool2D{Name: "pool2", Max: true, Size: 2, Stride: 2, Padding: "VALID"},
		&nn.Flatten{Name: "flatten", Size: flat},
		nn.NewDense(g, "fc1", flat, dense, nn.ReLU),
		&nn.Dropout{Name: "drop1", Rate: 0.3},
		nn.NewDense(g, "logits", dense, classes, nn.Linear),
	}
}
