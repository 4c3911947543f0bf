package switchml

import "github.com/switchml/switchml-go/switchml/engine"

// DefaultSparseCrossover is the default of Config.SparseCrossover: the
// share of a tensor's blocks, held by some rank, from which a Sparse
// session sends a tensor of that size dense: the
// results come back for those blocks anyway, so the sparse mode saves
// little there and costs its directory round trip, its scan for zero
// blocks and 8 header bytes a packet. A size runs dense once its last two
// calls found at least this share held, and sparse again once one call
// found less. A sparse call counts the blocks that travelled; a dense
// call counts the blocks of its result that are not all zero, which is
// the same share. Every rank sees the same results, so all of them decide
// alike. The figure comes from the density sweep in docs/performance.md,
// "Block-sparse aggregation".
const DefaultSparseCrossover = 0.9

// sparseCrossover is what a rank registers as its crossover: nothing
// without the sparse mode.
func sparseCrossover(c Config) float64 {
	if !c.Sparse {
		return 0
	}
	return c.SparseCrossover
}

// sparseBook is what a Sparse session knows of the tensor sizes it met:
// for each element count, the shares of blocks held at its last two
// calls, latest first (-1: none). Callers hold the session's lock.
type sparseBook map[int]*[2]float64

// dense decides whether the call of a tensor of n values runs dense: its
// last two calls found at least crossover of its blocks held.
func (b sparseBook) dense(n int, crossover float64) bool {
	r := b[n]
	return r != nil && r[0] >= crossover && r[1] >= crossover
}

// done records a completed call of n values with held of its blocks
// held.
func (b *sparseBook) done(n int, held float64) {
	if *b == nil {
		*b = make(sparseBook)
	}
	r := (*b)[n]
	if r == nil {
		r = &[2]float64{-1, -1}
		(*b)[n] = r
	}
	r[1], r[0] = r[0], held
}

// heldInResult is the share of op's blocks of k values (n in all) that
// are not all zero: a dense call's count of the blocks some rank held.
func heldInResult(op engine.Op, n, k int) float64 {
	held, blocks := 0, 0
	size := op.DType.Size()
	for lo := 0; lo < n; lo += k {
		blocks++
		if !engine.AllZero(op.Data[lo*size : min(lo+k, n)*size]) {
			held++
		}
	}
	if blocks == 0 {
		return 0
	}
	return float64(held) / float64(blocks)
}
