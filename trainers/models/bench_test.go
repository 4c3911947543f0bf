package models

import (
	"maps"
	"strings"
	"testing"

	tf "github.com/wamuir/graft/tensorflow"
	"github.com/wamuir/graft/tensorflow/op"

	"github.com/switchml/switchml-go/trainers/nn"
)

// The published figures: torchvision's resnet50 (25,557,032) and vgg19
// (143,667,240), bert-base-uncased without a head (109,482,240), MLPerf's
// NeuMF on MovieLens-20M, Zaremba et al.'s large PTB LSTM (66M),
// torchvision's ssd300_vgg16 (35,641,826), the full U-GAT-IT of the
// reference PyTorch code (670,761,088).
func TestBenchParameterCounts(t *testing.T) {
	want := map[string]int64{
		"resnet50":  25557032,
		"vgg19":     143667240,
		"bert":      109482240 + 768*2 + 2,
		"ncf":       31832577,
		"lstm":      66022000,
		"deeplight": 12012679,
		"ssd":       35641826,
		"ugatit":    670761088,
	}
	for name, n := range want {
		b := LookupBench(name)
		if b == nil {
			t.Fatalf("%s not registered", name)
		}
		g := nn.NewGraph(1)
		q := b.Build(g)
		if err := g.Scope.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := nn.ParameterCount(g); got != n || got != b.Parameters {
			t.Errorf("%s: %d parameters, want %d (declared %d)", name, got, n, b.Parameters)
		}
		// Every variable belongs to exactly one named top-level layer.
		owned := 0
		for _, l := range q {
			pre := nn.NameOf(l) + "/"
			if pre == "/" {
				t.Errorf("%s: unnamed top-level layer %T", name, l)
			}
			for _, v := range g.Variables() {
				if len(v.Name) > len(pre) && v.Name[:len(pre)] == pre {
					owned++
				}
			}
		}
		if owned != len(g.Variables()) {
			t.Errorf("%s: %d of %d variables under top-level layer names", name, owned, len(g.Variables()))
		}
	}
}

func TestBertBackboneIsPublishedCount(t *testing.T) {
	g := nn.NewGraph(1)
	bertBase.Build(g)
	var head int64
	for _, v := range g.VariablesWith(nn.Trainable) {
		if v.Name == "classifier/kernel" || v.Name == "classifier/bias" {
			head += int64(v.Size())
		}
	}
	if got := nn.ParameterCount(g) - head; got != bertBase.Published {
		t.Errorf("BERT-base encoder and pooler: %d parameters, want %d", got, bertBase.Published)
	}
}

// Each benchmark model's forward pass has the output shape of its labels
// and every trainable variable gets a gradient.
func TestBenchGraphsBuild(t *testing.T) {
	for _, name := range []string{"resnet50", "vgg19", "bert", "ncf", "lstm", "deeplight", "ssd", "ugatit"} {
		b := LookupBench(name)
		g := nn.NewGraph(1)
		q := b.Build(g)
		s := g.Scope
		shape := append([]int64{-1}, b.InputShape...)
		x := op.Placeholder(s.SubScope("x"), b.InputType, op.PlaceholderShape(tf.MakeShape(shape...)))
		y := op.Placeholder(s.SubScope("y"), tf.Float, op.PlaceholderShape(tf.MakeShape(-1, int64(b.Classes))))
		logits := q.Forward(g, x, true)
		loss := g.WithLosses(s, op.Mean(s, nn.SoftmaxCrossEntropy(g, logits, y), op.Const(s.SubScope("axis"), []int32{0})))
		var vals []tf.Output
		for _, v := range g.VariablesWith(nn.Trainable) {
			vals = append(vals, v.Value)
		}
		grads := op.Gradients(s, []tf.Output{loss}, vals)
		if err := s.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, gr := range grads {
			if gr.Op == nil {
				t.Errorf("%s: no gradient for %s", name, g.VariablesWith(nn.Trainable)[i].Name)
			}
		}
	}
}

// Each U-GAT-IT network has the count of its reference definition: the
// generators 278,959,808 (of which the full version's first gamma/beta
// layer, 64*64*256 x 256, is 268,435,456), the global discriminators
// 53,130,176 and the local ones 3,290,560.
func TestUGATITNetworks(t *testing.T) {
	g := nn.NewGraph(1)
	buildUGATIT(g)
	if err := g.Scope.Err(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, v := range g.VariablesWith(nn.Trainable) {
		got[strings.SplitN(v.Name, "/", 2)[0]] += int64(v.Size())
	}
	want := map[string]int64{
		"genA2B": ugatitGenerator, "genB2A": ugatitGenerator,
		"disGA": ugatitGlobalDisc, "disGB": ugatitGlobalDisc,
		"disLA": ugatitLocalDisc, "disLB": ugatitLocalDisc,
	}
	if !maps.Equal(got, want) {
		t.Errorf("parameters per network %v, want %v", got, want)
	}
	if fc := g.Variable("genA2B/fc1"); fc == nil || fc.Size() != 64*64*256*256 {
		t.Errorf("genA2B/fc1 is %v, want the 1048576 x 256 layer of the full version", fc)
	}
}
