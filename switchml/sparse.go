package switchml

import "github.com/switchml/switchml-go/switchml/engine"

// SparseCrossover is the share of a tensor's blocks, held by some rank,
// from which a Sparse session sends the tensor dense: the results come
// back for those blocks anyway, so the sparse mode saves little there and
// costs its directory round trip, its scan for zero blocks and 8 header
// bytes a packet. Every rank sees the same shares (they are the blocks
// that travelled), so all of them decide alike. The figure comes from the
// density sweep in docs/performance.md, "Block-sparse aggregation".
const SparseCrossover = 0.9

// sparseReprobe: a tensor size that runs dense runs sparse again every
// this many calls, to notice when its gradient became sparse.
const sparseReprobe = 16

// sparseRecord is what a Sparse session knows of one tensor size.
type sparseRecord struct {
	held  float64 // share of blocks some rank held at the latest sparse call
	dense int     // dense calls since then
}

// sparseDense decides whether the call of a tensor of n values runs
// dense: when the latest sparse call of that size found at least
// SparseCrossover of its blocks held, except every sparseReprobe-th call.
// Callers hold s.mu.
func (s *Session) sparseDense(n int) bool {
	r := s.sparse[n]
	return r != nil && r.held >= SparseCrossover && r.dense%sparseReprobe != sparseReprobe-1
}

// sparseDone records a completed call of n values, which the lanes ran
// on ranges. Callers hold s.mu.
func (s *Session) sparseDone(n int, dense bool, ranges []engine.Range) {
	if s.sparse == nil {
		s.sparse = make(map[int]*sparseRecord)
	}
	r := s.sparse[n]
	if r == nil {
		r = &sparseRecord{}
		s.sparse[n] = r
	}
	if dense {
		r.dense++
		s.stats.DenseCalls++
		return
	}
	held, blocks := 0, 0
	for i, l := range s.lanes {
		if ranges[i].Len == 0 {
			continue // no op: the lane's figures are an earlier call's
		}
		if h, b, ok := l.eng.SparseBlocks(); ok {
			held, blocks = held+h, blocks+b
		}
	}
	r.dense = 0
	if blocks > 0 {
		r.held = float64(held) / float64(blocks)
	}
}
