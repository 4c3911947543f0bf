// Package density measures how many packet-sized blocks of a model's
// gradient are not all zero, on the buffers the training harness hands to
// the allreduce: per worker, and united over the workers of a step (a block
// that any worker has comes back to every worker in a block-sparse
// allreduce). It runs real TensorFlow training steps of the benchmark models
// (Run), writes one step's gradients of every rank as raw float32 files for
// the allreduce benchmarks (WriteDump), and estimates the density of the
// paper-size models from the measured embedding density (Paper).
package density

import (
	"fmt"
	"strings"
)

// Var is one variable's span in a bucket, in the bucket's order.
type Var struct {
	Name string
	Size int
}

// Layout is how a step's gradient reaches the allreduce: one flat buffer
// per bucket, each cut into blocks of K values from its own start (the last
// block of a bucket may be short), blocks numbered across the buckets in
// order. A block is an embedding block when every one of its values
// belongs to a variable of the embedding unit.
type Layout struct {
	K       int
	Buckets []int
	// Embedding marks the embedding blocks.
	Embedding []bool
	// Elements and EmbeddingElements count values: all of them, and those
	// of the embedding unit's variables.
	Elements, EmbeddingElements int
}

// NewLayout lays out buckets of the given variables in blocks of k values;
// isEmbedding tells which variables belong to the embedding unit.
func NewLayout(k int, buckets [][]Var, isEmbedding func(name string) bool) (*Layout, error) {
	if k < 1 {
		return nil, fmt.Errorf("density: block size %d: want at least 1 value per block", k)
	}
	l := &Layout{K: k}
	for bi, vars := range buckets {
		size := 0
		for _, v := range vars {
			if v.Size < 0 {
				return nil, fmt.Errorf("density: bucket %d: variable %q has negative size %d", bi, v.Name, v.Size)
			}
			size += v.Size
		}
		l.Buckets = append(l.Buckets, size)
		l.Elements += size
		// Walk the bucket block by block; a block is an embedding block
		// when no value of it lies in a non-embedding variable.
		emb := make([]bool, (size+k-1)/k)
		for i := range emb {
			emb[i] = true
		}
		off := 0
		for _, v := range vars {
			if v.Size == 0 {
				continue
			}
			if isEmbedding(v.Name) {
				l.EmbeddingElements += v.Size
			} else {
				for b := off / k; b <= (off+v.Size-1)/k; b++ {
					emb[b] = false
				}
			}
			off += v.Size
		}
		l.Embedding = append(l.Embedding, emb...)
	}
	return l, nil
}

// UnitPrefix returns a test for the variables of a top-level layer: the
// layers name their variables "<unit>/...".
func UnitPrefix(unit string) func(string) bool {
	return func(name string) bool { return strings.HasPrefix(name, unit+"/") }
}

// Blocks is the number of blocks over all buckets.
func (l *Layout) Blocks() int { return len(l.Embedding) }

// Mark sets mask[i] for every block i of bufs (one buffer per bucket) that
// holds a value other than zero (NaN counts as non-zero: a block that
// carries it must be sent). It only sets, never clears, so marking the
// buffers of several workers into one mask gives their union.
func (l *Layout) Mark(bufs [][]float32, mask []bool) error {
	if len(bufs) != len(l.Buckets) {
		return fmt.Errorf("density: %d buffers, the layout has %d buckets", len(bufs), len(l.Buckets))
	}
	if len(mask) != l.Blocks() {
		return fmt.Errorf("density: mask of %d blocks, the layout has %d", len(mask), l.Blocks())
	}
	base := 0
	for bi, buf := range bufs {
		if len(buf) != l.Buckets[bi] {
			return fmt.Errorf("density: bucket %d has %d values, the layout says %d", bi, len(buf), l.Buckets[bi])
		}
		for b, off := 0, 0; off < len(buf); b, off = b+1, off+l.K {
			if mask[base+b] {
				continue
			}
			for _, v := range buf[off:min(off+l.K, len(buf))] {
				if v != 0 {
					mask[base+b] = true
					break
				}
			}
		}
		base += (len(buf) + l.K - 1) / l.K
	}
	return nil
}

// Share is the share of non-zero blocks: over all blocks, over the
// embedding blocks and over the others.
type Share struct {
	All       float64 `json:"all"`
	Embedding float64 `json:"embedding"`
	Rest      float64 `json:"rest"`
}

// Count returns the shares of marked blocks. A class without blocks has
// share 0.
func (l *Layout) Count(mask []bool) Share {
	var n, nz, emb, embNZ int
	for i, m := range mask {
		n++
		if l.Embedding[i] {
			emb++
		}
		if m {
			nz++
			if l.Embedding[i] {
				embNZ++
			}
		}
	}
	return Share{All: ratio(nz, n), Embedding: ratio(embNZ, emb), Rest: ratio(nz-embNZ, n-emb)}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Paper is the density of a model whose embedding unit holds share s of
// the gradient's values when its embedding blocks are non-zero with
// density d and every other block is: s*d + (1-s).
func Paper(s, d float64) float64 { return s*d + (1 - s) }
