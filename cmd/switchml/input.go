package main

import (
	"context"
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

// fillAt writes values lo.. of rank's tensor of n values into piece; k
// is the packet size, whose blocks --density counts.
func (in tensorInput) fillAt(c dtype.Codec, piece []byte, rank, k, lo, n int) error {
	if in.gradients == "" {
		dtype.FillDensityAt(c, piece, in.seed, rank, k, in.density, lo)
		return nil
	}
	f, err := os.Open(in.file(rank))
	if err != nil {
		return fmt.Errorf("--gradients: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("--gradients: %w", err)
	}
	if fi.Size() != int64(n)*4 {
		return fmt.Errorf("--gradients: %s holds %d bytes, this rank's own %d: every rank's gradient must have the same size", in.file(rank), fi.Size(), n*4)
	}
	if _, err := f.ReadAt(piece, int64(lo)*4); err != nil {
		return fmt.Errorf("--gradients: %w", err)
	}
	v := dtype.As[float32](piece)
	for i := range v {
		v[i] = math.Float32frombits(le.LittleEndian.Uint32(piece[4*i:]))
	}
	return nil
}

// fill writes rank's tensor into data, a piece at a time (steps.each).
func (in tensorInput) fill(ctx context.Context, st *steps, what string, c dtype.Codec, data []byte, rank, k int) error {
	n, sz := len(data)/c.Size(), c.Size()
	return st.each(ctx, what, n, func(lo, hi int) error {
		return in.fillAt(c, data[lo*sz:hi*sz], rank, k, lo, n)
	})
}

// expect is what every rank holds after the allreduce of every rank's
// tensor of n values: the ranks' tensors are made again and added, a
// piece of each at a time, so that the sums stay in the cache while
// every rank's piece is added.
func (in tensorInput) expect(ctx context.Context, st *steps, c dtype.Codec, workers, n, k int) (*dtype.Expectation, error) {
	e := dtype.NewExpectation(c, workers, n, k)
	piece := dtype.New(c, min(n, pieceValues))
	err := st.each(ctx, "computing the expected sums of every rank's tensor", n, func(lo, hi int) error {
		p := piece[:(hi-lo)*c.Size()]
		for r := range workers {
			if err := in.fillAt(c, p, r, k, lo, n); err != nil {
				return err
			}
			e.Add(lo, p)
		}
		return nil
	})
	return e, err
}
