package nn

import (
	"bytes"
	"fmt"
	"unsafe"

	tf "github.com/wamuir/graft/tensorflow"
)

// Float32Tensor wraps data (row-major) as a TensorFlow tensor of the given
// shape. The data is copied once into TensorFlow-owned memory.
func Float32Tensor(data []float32, shape ...int64) (*tf.Tensor, error) {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if n != int64(len(data)) {
		return nil, fmt.Errorf("nn: %d values do not fill shape %v", len(data), shape)
	}
	var raw []byte
	if len(data) > 0 {
		// float32 is little-endian on every platform TensorFlow ships for, so
		// the in-memory bytes are the serialized tensor contents.
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*len(data))
	}
	return tf.ReadTensor(tf.Float, shape, bytes.NewReader(raw))
}

// Int32Tensor is Float32Tensor for int32 values.
func Int32Tensor(data []int32, shape ...int64) (*tf.Tensor, error) {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if n != int64(len(data)) {
		return nil, fmt.Errorf("nn: %d values do not fill shape %v", len(data), shape)
	}
	var raw []byte
	if len(data) > 0 {
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*len(data))
	}
	return tf.ReadTensor(tf.Int32, shape, bytes.NewReader(raw))
}

// Floats returns the values of a float32 tensor of any shape, flattened.
func Floats(t *tf.Tensor) ([]float32, error) {
	if t.DataType() != tf.Float {
		return nil, fmt.Errorf("nn: tensor has type %v, want float32", t.DataType())
	}
	n := 1
	for _, d := range t.Shape() {
		n *= int(d)
	}
	out := make([]float32, n)
	if n == 0 {
		return out, nil
	}
	w := sliceWriter{b: unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*n)}
	if _, err := t.WriteContentsTo(&w); err != nil {
		return nil, err
	}
	if w.off != len(w.b) {
		return nil, fmt.Errorf("nn: tensor holds %d bytes, want %d", w.off, len(w.b))
	}
	return out, nil
}

// Scalar returns the value of a float32 scalar tensor.
func Scalar(t *tf.Tensor) (float32, error) {
	v, ok := t.Value().(float32)
	if !ok {
		return 0, fmt.Errorf("nn: tensor is %T, want float32 scalar", t.Value())
	}
	return v, nil
}

// sliceWriter copies into a fixed buffer, avoiding an intermediate
// bytes.Buffer for large tensors.
type sliceWriter struct {
	b   []byte
	off int
}

func (w *sliceWriter) Write(p []byte) (int, error) {
	if len(p) > len(w.b)-w.off {
		return 0, fmt.Errorf("nn: tensor larger than expected")
	}
	copy(w.b[w.off:], p)
	w.off += len(p)
	return len(p), nil
}
