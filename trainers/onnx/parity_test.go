package onnx

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/switchml/switchml-go/trainers/data"
	"github.com/switchml/switchml-go/trainers/nn"
	"github.com/switchml/switchml-go/trainers/train"
)

type nop struct{}

func (nop) AllReduceFloat32(context.Context, []float32) error { return nil }
func (nop) Close() error                                      { return nil }

// trained returns a model trained for one short epoch, so batch-norm
// statistics and weights are far from their initial values.
func trained(t *testing.T, model string, set *data.Set) *nn.Program {
	t.Helper()
	o := train.Options{Model: model, Train: set, Test: set.Subset(100), Epochs: 1, Batch: 32,
		Optimizer: "adam", Seed: 11, Rank: 0, Workers: 1, IntraOpThreads: 1, InterOpThreads: 1}
	_, p, err := train.Run(context.Background(), o, nop{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func initORT(t *testing.T) {
	t.Helper()
	lib := os.Getenv("ONNXRUNTIME_LIB")
	if lib == "" {
		t.Skip("ONNXRUNTIME_LIB is not set; run eval \"$(./setup.sh)\" first")
	}
	if !ort.IsInitialized() {
		ort.SetSharedLibraryPath(lib)
		if err := ort.InitializeEnvironment(); err != nil {
			t.Fatalf("onnxruntime from %s: %v", lib, err)
		}
	}
}

func runORT(t *testing.T, path string, x []float32, n, h, w, c, classes int) []float32 {
	t.Helper()
	in, err := ort.NewTensor(ort.NewShape(int64(n), int64(h), int64(w), int64(c)), x)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Destroy()
	out, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(n), int64(classes)))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Destroy()
	s, err := ort.NewAdvancedSession(path, []string{InputName}, []string{OutputName}, []ort.Value{in}, []ort.Value{out}, nil)
	if err != nil {
		t.Fatalf("onnxruntime rejected %s: %v", path, err)
	}
	defer s.Destroy()
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), out.GetData()...)
}

func checkParity(t *testing.T, model string, set *data.Set) {
	initORT(t)
	p := trained(t, model, set)
	defer p.Close()
	path := filepath.Join(t.TempDir(), model+".onnx")
	if err := ExportFile(path, p); err != nil {
		t.Fatal(err)
	}
	const n = 32
	batch := set.Subset(n)
	xt, err := nn.Float32Tensor(batch.Images, n, int64(set.H), int64(set.W), int64(set.C))
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.Predict(xt)
	if err != nil {
		t.Fatal(err)
	}
	got := runORT(t, path, batch.Images, n, set.H, set.W, set.C, set.Classes)
	if len(got) != len(want) {
		t.Fatalf("onnxruntime gave %d values, TensorFlow %d", len(got), len(want))
	}
	scale := 0.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	worst := 0.0
	for i := range want {
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	t.Logf("%s: max |logit| %.3f, max |onnxruntime - tensorflow| %.2e", model, scale, worst)
	if worst > 1e-4*math.Max(1, scale) {
		t.Fatalf("onnxruntime and TensorFlow logits differ by %.3g (scale %.3g)", worst, scale)
	}
	// The argmax must agree everywhere.
	for r := 0; r < n; r++ {
		if argmax(got[r*set.Classes:(r+1)*set.Classes]) != argmax(want[r*set.Classes:(r+1)*set.Classes]) {
			t.Fatalf("row %d: predictions differ", r)
		}
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func fashionOrSynthetic(t *testing.T) *data.Set {
	tr, _, err := data.LoadFashionMNIST("")
	if err != nil {
		t.Logf("Fashion-MNIST not available (%v); using synthetic data", err)
		return data.Synthetic(2000, 28, 28, 10, 3)
	}
	return tr.Subset(2000)
}

func TestONNXParityCNN(t *testing.T) { checkParity(t, "cnn", fashionOrSynthetic(t)) }

func TestONNXParityMLP(t *testing.T) { checkParity(t, "mlp", fashionOrSynthetic(t)) }

// TestONNXDetectsWrongLayout checks that the parity test can fail: a model
// exported without the NHWC->NCHW filter transpose must not match.
func TestONNXDetectsWrongLayout(t *testing.T) {
	initORT(t)
	set := fashionOrSynthetic(t)
	p := trained(t, "cnn", set)
	defer p.Close()
	m, err := Export(p)
	if err != nil {
		t.Fatal(err)
	}
	// Swap the first two channels of the NHWC->NCHW transpose.
	for _, nd := range m.Graph.Node {
		if nd.OpType == "Transpose" {
			nd.Attribute[0].Ints = []int64{0, 3, 2, 1}
			break
		}
	}
	path := filepath.Join(t.TempDir(), "bad.onnx")
	raw, _ := protoMarshal(m)
	os.WriteFile(path, raw, 0o644)
	const n = 8
	batch := set.Subset(n)
	xt, _ := nn.Float32Tensor(batch.Images, n, 28, 28, 1)
	want, _ := p.Predict(xt)
	got := runORT(t, path, batch.Images, n, 28, 28, 1, 10)
	worst := 0.0
	for i := range want {
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if worst < 1e-3 {
		t.Fatalf("a transposed image gave the same logits (diff %.2g): the parity check would not notice layout bugs", worst)
	}
}
