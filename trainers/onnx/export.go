// Package onnx exports trained image classifiers to the ONNX format, written
// directly as protobuf from Go.
//
// TensorFlow computes in NHWC with HWIO filters while ONNX convolutions are
// NCHW with OIHW filters: the exporter keeps the model's NHWC input and
// output, transposes activations around the convolutional part and
// transposes the filters once at export.
package onnx

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/switchml/switchml-go/trainers/nn"
	pb "github.com/switchml/switchml-go/trainers/onnx/onnxpb"
)

const (
	irVersion = 8
	opset     = 17
	// InputName and OutputName are the graph's input (NHWC images) and
	// output (logits).
	InputName  = "input"
	OutputName = "logits"
)

type builder struct {
	g      *pb.GraphProto
	vals   map[string][]float32
	cur    string
	nchw   bool // current activation layout when rank 4
	rank   int
	nextID int
}

func (b *builder) fresh(prefix string) string {
	b.nextID++
	return fmt.Sprintf("%s_%d", prefix, b.nextID)
}

func (b *builder) node(opType string, inputs []string, attrs ...*pb.AttributeProto) string {
	out := b.fresh(opType)
	b.g.Node = append(b.g.Node, &pb.NodeProto{
		Name: out, OpType: opType, Input: inputs, Output: []string{out}, Attribute: attrs,
	})
	b.cur = out
	return out
}

func (b *builder) init(name string, dims []int64, x []float32) string {
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	b.g.Initializer = append(b.g.Initializer, &pb.TensorProto{
		Name: name, Dims: dims, DataType: int32(pb.TensorProto_FLOAT), RawData: raw,
	})
	return name
}

func (b *builder) value(v *nn.Variable) (string, error) {
	x, ok := b.vals[v.Name]
	if !ok {
		return "", fmt.Errorf("onnx: no value for %s", v.Name)
	}
	return b.init(v.Name, v.Shape, x), nil
}

func ints(name string, v ...int64) *pb.AttributeProto {
	return &pb.AttributeProto{Name: name, Type: pb.AttributeProto_INTS, Ints: v}
}

func intAttr(name string, v int64) *pb.AttributeProto {
	return &pb.AttributeProto{Name: name, Type: pb.AttributeProto_INT, I: v}
}

func floatAttr(name string, v float32) *pb.AttributeProto {
	return &pb.AttributeProto{Name: name, Type: pb.AttributeProto_FLOAT, F: v}
}

func strAttr(name, v string) *pb.AttributeProto {
	return &pb.AttributeProto{Name: name, Type: pb.AttributeProto_STRING, S: []byte(v)}
}

func autoPad(padding string) (*pb.AttributeProto, error) {
	switch padding {
	case "SAME":
		// TensorFlow puts the odd padding element at the end: SAME_UPPER.
		return strAttr("auto_pad", "SAME_UPPER"), nil
	case "VALID":
		return strAttr("auto_pad", "VALID"), nil
	}
	return nil, fmt.Errorf("onnx: padding %q not supported", padding)
}

func (b *builder) toNCHW() {
	if b.rank == 4 && !b.nchw {
		b.node("Transpose", []string{b.cur}, ints("perm", 0, 3, 1, 2))
		b.nchw = true
	}
}

func (b *builder) toNHWC() {
	if b.rank == 4 && b.nchw {
		b.node("Transpose", []string{b.cur}, ints("perm", 0, 2, 3, 1))
		b.nchw = false
	}
}

func (b *builder) layer(l nn.Layer) error {
	switch l := l.(type) {
	case nn.Sequential:
		for _, x := range l {
			if err := b.layer(x); err != nil {
				return err
			}
		}
	case *nn.Conv2D:
		if b.rank != 4 {
			return fmt.Errorf("onnx: %s needs a rank-4 input", l.Name)
		}
		b.toNCHW()
		hwio := b.vals[l.Filter.Name]
		k, ci, co := l.Kernel, l.In, l.Out
		if len(hwio) != k*k*ci*co {
			return fmt.Errorf("onnx: %s filter has %d values", l.Name, len(hwio))
		}
		oihw := make([]float32, len(hwio))
		for h := 0; h < k; h++ {
			for w := 0; w < k; w++ {
				for i := 0; i < ci; i++ {
					for o := 0; o < co; o++ {
						oihw[((o*ci+i)*k+h)*k+w] = hwio[((h*k+w)*ci+i)*co+o]
					}
				}
			}
		}
		in := []string{b.cur, b.init(l.Filter.Name, []int64{int64(co), int64(ci), int64(k), int64(k)}, oihw)}
		if l.UseBias {
			bias, err := b.value(l.Bias)
			if err != nil {
				return err
			}
			in = append(in, bias)
		}
		pad, err := autoPad(l.Padding)
		if err != nil {
			return err
		}
		s := int64(l.Stride)
		b.node("Conv", in, ints("kernel_shape", int64(k), int64(k)), ints("strides", s, s), pad)
		if l.Act == nn.ReLU {
			b.node("Relu", []string{b.cur})
		}
	case *nn.Pool2D:
		b.toNCHW()
		pad, err := autoPad(l.Padding)
		if err != nil {
			return err
		}
		typ := "AveragePool"
		if l.Max {
			typ = "MaxPool"
		}
		s := int64(l.Stride)
		b.node(typ, []string{b.cur}, ints("kernel_shape", int64(l.Size), int64(l.Size)), ints("strides", s, s), pad)
	case *nn.BatchNorm:
		// ONNX normalises along axis 1: channels for NCHW and for [N, C].
		b.toNCHW()
		var in []string
		for _, v := range []*nn.Variable{l.Gamma, l.Beta, l.MovingMean, l.MovingVar} {
			n, err := b.value(v)
			if err != nil {
				return err
			}
			in = append(in, n)
		}
		b.node("BatchNormalization", append([]string{b.cur}, in...), floatAttr("epsilon", l.Epsilon))
	case *nn.Act:
		if l.Fn == nn.ReLU {
			b.node("Relu", []string{b.cur})
		}
	case *nn.Dropout:
		// Identity at inference.
	case *nn.Flatten:
		// TensorFlow flattens NHWC order.
		b.toNHWC()
		b.node("Flatten", []string{b.cur}, intAttr("axis", 1))
		b.rank = 2
	case *nn.Dense:
		if b.rank != 2 {
			return fmt.Errorf("onnx: %s needs a rank-2 input", l.Name)
		}
		w, err := b.value(l.W)
		if err != nil {
			return err
		}
		bias, err := b.value(l.B)
		if err != nil {
			return err
		}
		b.node("Gemm", []string{b.cur, w, bias})
		if l.Act == nn.ReLU {
			b.node("Relu", []string{b.cur})
		}
	default:
		return fmt.Errorf("onnx: layer %s cannot be exported", nn.Describe(l))
	}
	return nil
}

func tensorType(dims ...int64) *pb.TypeProto {
	shape := &pb.TensorShapeProto{}
	for i, d := range dims {
		dim := &pb.TensorShapeProto_Dimension{}
		if d < 0 {
			dim.Value = &pb.TensorShapeProto_Dimension_DimParam{DimParam: fmt.Sprintf("N%d", i)}
		} else {
			dim.Value = &pb.TensorShapeProto_Dimension_DimValue{DimValue: d}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &pb.TypeProto{Value: &pb.TypeProto_TensorType{TensorType: &pb.TypeProto_Tensor{
		ElemType: int32(pb.TensorProto_FLOAT), Shape: shape}}}
}

// Export builds the ONNX model of p's inference graph with p's current
// weights. The input is NHWC float32 images, the output the logits.
func Export(p *nn.Program) (*pb.ModelProto, error) {
	vals, err := p.Values(nil)
	if err != nil {
		return nil, err
	}
	xs := p.X.Shape()
	if xs.NumDimensions() != 4 {
		return nil, fmt.Errorf("onnx: only image models (NHWC input) are exported, input has rank %d", xs.NumDimensions())
	}
	dims, _ := xs.ToSlice()
	b := &builder{g: &pb.GraphProto{Name: "switchml_trainers"}, vals: vals, cur: InputName, rank: 4}
	b.g.Input = []*pb.ValueInfoProto{{Name: InputName, Type: tensorType(-1, dims[1], dims[2], dims[3])}}
	if err := b.layer(p.Model); err != nil {
		return nil, err
	}
	if b.rank != 2 {
		return nil, fmt.Errorf("onnx: model output has rank %d, want [batch, classes]", b.rank)
	}
	b.g.Node = append(b.g.Node, &pb.NodeProto{Name: "output", OpType: "Identity", Input: []string{b.cur}, Output: []string{OutputName}})
	classes := p.Labels.Shape()
	cd, _ := classes.ToSlice()
	b.g.Output = []*pb.ValueInfoProto{{Name: OutputName, Type: tensorType(-1, cd[1])}}
	return &pb.ModelProto{
		IrVersion:       irVersion,
		ProducerName:    "switchml-go trainers",
		ProducerVersion: "1",
		Graph:           b.g,
		OpsetImport:     []*pb.OperatorSetIdProto{{Domain: "", Version: opset}},
	}, nil
}

// ExportFile writes the ONNX model of p to path.
func ExportFile(path string, p *nn.Program) error {
	m, err := Export(p)
	if err != nil {
		return err
	}
	raw, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}
