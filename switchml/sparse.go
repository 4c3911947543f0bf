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

// sparseRecord is what a Sparse session knows of one tensor size: the
// shares of blocks held at its last two calls, latest first (-1: none).
type sparseRecord struct{ held [2]float64 }

// sparseDense decides whether the call of a tensor of n values runs
// dense. Callers hold s.mu.
func (s *Session) sparseDense(n int) bool {
	r := s.sparse[n]
	c := s.cfg.SparseCrossover
	return r != nil && r.held[0] >= c && r.held[1] >= c
}

// sparseHeld is the share of blocks some rank held in the call of h that
// the lanes ran on ranges: counted by the lanes for a sparse call, from
// the result for a dense one.
func (s *Session) sparseHeld(h *Handle, dense bool, ranges []engine.Range) float64 {
	held, blocks := 0, 0
	if dense {
		k, size := max(s.cfg.PacketElements, 1), h.op.DType.Size()
		for lo := 0; lo < h.n; lo += k {
			blocks++
			if !engine.AllZero(h.op.Data[lo*size : min(lo+k, h.n)*size]) {
				held++
			}
		}
	} else {
		for i, l := range s.lanes {
			if ranges[i].Len == 0 {
				continue // no op: the lane's figures are an earlier call's
			}
			if hb, b, ok := l.eng.SparseBlocks(); ok {
				held, blocks = held+hb, blocks+b
			}
		}
	}
	if blocks == 0 {
		return 0
	}
	return float64(held) / float64(blocks)
}

// sparseDone records a completed call of n values with held of its
// blocks held. Callers hold s.mu.
func (s *Session) sparseDone(n int, dense bool, held float64) {
	if s.sparse == nil {
		s.sparse = make(map[int]*sparseRecord)
	}
	r := s.sparse[n]
	if r == nil {
		r = &sparseRecord{held: [2]float64{-1, -1}}
		s.sparse[n] = r
	}
	r.held[1], r.held[0] = r.held[0], held
	if dense {
		s.stats.DenseCalls++
	}
}
