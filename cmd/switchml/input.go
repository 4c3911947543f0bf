package main

import (
	le "encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/switchml/switchml-go/switchml/dtype"
)

// tensorInput says what an allreduce run's tensors hold: generated data
// (from seed and the rank, with only a share density of the blocks
// holding values), or recorded gradients.
type tensorInput struct {
	seed      uint64
	density   float64
	gradients string // directory of rank<r>.f32 files
}

func (in tensorInput) file(rank int) string {
	return filepath.Join(in.gradients, fmt.Sprintf("rank%d.f32", rank))
}

// gradientElements is the type and length of rank's recorded gradient.
func (in tensorInput) gradientElements(rank int) (dtype.Codec, int, error) {
	fi, err := os.Stat(in.file(rank))
	if err != nil {
		return nil, 0, fmt.Errorf("--gradients: %w (want DIR/rank<r>.f32 for every rank, as the trainers' density command writes them)", err)
	}
	if fi.Size()%4 != 0 {
		return nil, 0, fmt.Errorf("--gradients: %s holds %d bytes, not a whole number of float32 values", in.file(rank), fi.Size())
	}
	return dtype.Float32, int(fi.Size() / 4), nil
}

// fill writes rank's tensor into data; k is the packet size, whose
// blocks --density counts.
func (in tensorInput) fill(c dtype.Codec, data []byte, rank, k int) error {
	if in.gradients == "" {
		dtype.FillDensity(c, data, in.seed, rank, k, in.density)
		return nil
	}
	b, err := os.ReadFile(in.file(rank))
	if err != nil {
		return fmt.Errorf("--gradients: %w", err)
	}
	if len(b) != len(data) {
		return fmt.Errorf("--gradients: %s holds %d bytes, rank 0's file %d: every rank's gradient must have the same size", in.file(rank), len(b), len(data))
	}
	v := dtype.As[float32](data)
	for i := range v {
		v[i] = math.Float32frombits(le.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

// expect is what every rank holds after the allreduce of every rank's
// tensor.
func (in tensorInput) expect(c dtype.Codec, workers, n, k int) (dtype.Expectation, error) {
	return dtype.ExpectInputs(c, workers, n, k, func(buf []byte, r int) error { return in.fill(c, buf, r, k) })
}
