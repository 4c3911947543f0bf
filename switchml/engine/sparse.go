package engine

// The block-sparse mode. A lane's slice is cut into blocks of Elements
// values as in the dense mode, and slot s of the W' = min(Window, blocks,
// Elements) slots serves the blocks s, s+W', s+2W', ... (its stripe). A
// worker sends only the blocks that are not all zero at it; a block that
// is zero at every worker is sent by no one and stays zero in the result.
//
// An op starts with one directory on slot 0: its payload holds, for every
// slot, the NextKey (wire.NextKey) of the worker's first non-zero block of
// that slot's stripe, with the block's exponent, and the switch keeps the
// element-wise minimum. The result thus names, per slot, the first block
// any worker holds and the exponent every worker quantizes it with. From
// then on every slot runs its own chain of steps: step k sums block c_k.
// Every worker sends one packet per step: the block's values if it holds
// them (quantized with the agreed exponent), else the header alone, and in
// both cases the key of its own next non-zero block of the stripe after
// c_k. The switch sums the values, counts header-only packets as
// contributions without values and keeps the minimum key, so the result
// of step k carries the sum of c_k and names c_{k+1} and its exponent. A
// result whose key is wire.NoNext ends the slot's chain.
//
// Because every worker sends at every step, the slot's uses alternate sets
// and clear bitmaps exactly as in the dense mode, and loss recovery is the
// dense mode's: a worker retransmits its step's packet (the same bytes)
// until the result comes, and the switch answers a retransmission to a
// completed use, with values or without, from the use's copy. Step k of
// slot s travels with packet id pidBase + k*W' + s; when the op ends every
// worker has seen every chain end, so all of them move pidBase past the
// longest chain alike.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/wire"
)

// sparseSlot is a slot's part of a sparse op.
type sparseSlot struct {
	step int // the slot's current use in the op: 0 the directory (slot 0 only), k >= 1 its chain's step k
	cur  int // the block step k sums
	// hasData says this worker sends cur's values in this step; key is
	// the Next key the step's packet carries. Both are fixed when the step
	// starts, so a retransmission repeats the same packet.
	hasData bool
	key     uint32
	// own is this worker's next non-zero block of the stripe not yet
	// sent (-1: none), ownExp its exponent.
	own    int
	ownExp int8
}

// sparseOp is a lane's sparse op state.
type sparseOp struct {
	dir     []uint32 // the directory this worker sends: one key per slot
	live    int      // chains still running; the directory counts until its result
	maxStep int      // the longest chain so far
	steps   int      // chain steps so far: the blocks some worker holds
}

// SparseBlocks reports, for the lane's last op if it ran the sparse mode,
// how many of its blocks some worker held (and so travelled) and how
// many it had; ok is false after a dense op. Every worker of a job sees
// the same figures, so they can decide alike from them.
func (l *Lane) SparseBlocks() (held, blocks int, ok bool) {
	return l.sp.steps, l.blocks, l.sparse
}

func (l *Lane) startSparse(op Op, now time.Duration) error {
	// The scan for non-zero blocks reads every block before the first
	// packet: check the floats then, not as packets go.
	op, n, err := l.prepare(op, false)
	if err != nil {
		return err
	}
	k := l.cfg.Elements
	if blocks := (n + k - 1) / k; blocks > wire.MaxSparseBlocks {
		return fmt.Errorf("engine: op %d: %d blocks of %d values on a lane, above %d: use more lanes or larger packets", op.Seq, blocks, k, wire.MaxSparseBlocks)
	}
	l.begin(op, n, now)
	l.win = min(l.win, k) // the directory holds a key per slot in one packet
	l.total = 0
	l.sp.live, l.sp.maxStep, l.sp.steps = 1, 0, 0
	l.active = l.blocks > 0
	if !l.active {
		return nil
	}
	l.sp.dir = l.sp.dir[:0]
	for s := 0; s < l.win; s++ {
		st := &l.slots[s]
		st.own, st.ownExp = l.scan(s)
		l.sp.dir = append(l.sp.dir, l.key(st.own, st.ownExp))
	}
	l.total++
	l.assign(0, 0)
	return nil
}

// scan returns the first block of b's stripe, from b on, that is not all
// zero at this worker, with its exponent; -1 if there is none.
func (l *Lane) scan(b int) (int, int8) {
	for ; b < l.blocks; b += l.win {
		lo, hi := l.block(b)
		d := l.blockData(lo, hi)
		if AllZero(d) {
			continue
		}
		switch {
		case !l.float:
			return b, quant.MinExponent
		case l.op.Exps != nil:
			return b, l.op.Exps[b]
		}
		e, _ := l.op.DType.Exponent(d, false)
		return b, e
	}
	return -1, 0
}

// AllZero reports whether every byte of b is zero: a block of values
// that the sparse mode does not send.
func AllZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// key is block b's Next key; wire.NoNext for b < 0.
func (l *Lane) key(b int, exp int8) uint32 {
	if b < 0 {
		return wire.NoNext
	}
	return wire.NextKey(b, exp)
}

// step starts step k of slot s's chain: block cur, quantized with exp.
func (l *Lane) step(s, k, cur int, exp int8) {
	st := &l.slots[s]
	st.step, st.cur, st.dataExp = k, cur, exp
	st.hasData = st.own == cur
	if st.hasData {
		st.own, st.ownExp = l.scan(cur + l.win)
	}
	st.key = l.key(st.own, st.ownExp)
	l.sp.maxStep = max(l.sp.maxStep, k)
	l.sp.steps++
	l.total++
	l.assign(s, k*l.win+s)
}

// appendSparse appends slot s's packet: the directory or a chain step.
func (l *Lane) appendSparse(b []byte, s int) ([]byte, bool) {
	st := &l.slots[s]
	h := wire.Header{
		Format:   wire.FormatExtended,
		Seq:      l.op.Seq,
		PacketID: l.pidBase + uint32(st.packet),
		Set:      st.set,
		Slot:     l.cfg.SlotBase + uint32(s),
		Exp0:     quant.MinExponent,
		Tagged:   l.tg != nil,
		Sparse:   true,
		Block:    wire.DirectoryBlock,
		Next:     wire.NoNext,
	}
	var lo, hi int
	switch {
	case st.step == 0:
		h.Elements = l.win
	case st.hasData:
		lo, hi = l.block(st.cur)
		h.Block, h.Next, h.Elements, h.Exp0 = uint32(st.cur), st.key, hi-lo, st.dataExp
	default:
		h.Block, h.Next = uint32(st.cur), st.key
	}
	start := len(b)
	b, dst, ok := l.appendHeader(b, &h, s)
	if !ok {
		return b, false
	}
	switch {
	case st.step == 0:
		for i, k := range l.sp.dir {
			binary.BigEndian.PutUint32(dst[4*i:], k)
		}
	case st.hasData:
		l.op.DType.Quantize(dst, l.blockData(lo, hi), l.cfg.NumWorkers, st.dataExp)
	}
	return l.sent(b, start, s), true
}

// receiveSparse handles a sparse result that parsed and belongs to the op.
func (l *Lane) receiveSparse(h *wire.Header, payload []byte) {
	rel := h.PacketID - l.pidBase
	if !l.active || l.win == 0 {
		l.stats.Duplicates++
		return
	}
	s := int(rel % uint32(l.win))
	st := &l.slots[s]
	if st.packet < 0 || uint32(st.packet) != rel || h.Slot != l.cfg.SlotBase+uint32(s) || h.Set != st.set {
		l.stats.Duplicates++
		return
	}
	if st.step == 0 {
		l.receiveDirectory(h, payload)
		return
	}
	lo, hi := l.block(st.cur)
	next, exp, more := wire.SplitKey(h.Next)
	// The switch's key is the minimum over every worker's, this one's
	// included, and names a later block of the same stripe.
	if h.Block != uint32(st.cur) || h.Elements != hi-lo && h.Elements != 0 || h.Next > st.key ||
		more && (next <= st.cur || next%l.win != s || next >= l.blocks) {
		l.stats.Malformed++
		return
	}
	l.accepted(s)
	l.received++
	if h.Elements == 0 {
		// No worker held values: the sum is zero.
		clear(l.blockData(lo, hi))
	} else {
		l.op.DType.Dequantize(l.blockData(lo, hi), payload, l.cfg.NumWorkers, st.dataExp)
	}
	if !more {
		l.chainEnded(s)
		return
	}
	l.step(s, st.step+1, next, exp)
}

// receiveDirectory starts every slot's chain from the directory's result.
func (l *Lane) receiveDirectory(h *wire.Header, payload []byte) {
	if h.Block != wire.DirectoryBlock || h.Elements != l.win {
		l.stats.Malformed++
		return
	}
	for j := 0; j < l.win; j++ {
		k := binary.BigEndian.Uint32(payload[4*j:])
		if b, _, ok := wire.SplitKey(k); k > l.sp.dir[j] || ok && (b%l.win != j || b >= l.blocks) {
			l.stats.Malformed++
			return
		}
	}
	l.accepted(0)
	l.received++
	l.slots[0].packet = -1
	l.sp.live-- // the directory's part
	for j := 0; j < l.win; j++ {
		if b, e, ok := wire.SplitKey(binary.BigEndian.Uint32(payload[4*j:])); ok {
			l.sp.live++
			l.step(j, 1, b, e)
		}
	}
	if l.sp.live == 0 {
		l.finishSparse()
	}
}

// chainEnded marks slot s idle; the op ends with its last chain.
func (l *Lane) chainEnded(s int) {
	l.slots[s].packet = -1
	if l.sp.live--; l.sp.live == 0 {
		l.finishSparse()
	}
}

func (l *Lane) finishSparse() {
	// Every worker saw every chain end: all of them skip the same ids.
	l.nextPID = l.pidBase + uint32((l.sp.maxStep+1)*l.win)
	l.finish()
}
