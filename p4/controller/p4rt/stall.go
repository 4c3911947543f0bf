package p4rt

// Which ranks a job's waiting slots lack: what tells a lost switch from a
// rank that stopped sending.

import (
	"context"
	"errors"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// stallBitmapRanks is how many ranks a bitmap read names: the low 64 bits
// of a slot's bitmap (the P4 programs' bitmaps are 32 bits wide).
const stallBitmapRanks = 64

// WaitingFor reads the countdown of the slots [base, base+size) of both
// sets (slots per set), and for those still waiting for contributions, the
// bitmap of the ranks that gave theirs. It returns, for each of the job's
// first world ranks (up to 64) missing from some waiting slot, how many
// slots wait for it. An empty map: no slot of the job waits.
func (c *Client) WaitingFor(ctx context.Context, base, size, slots, world int) (map[int]int, error) {
	ids := c.IDs()
	if ids.RegisterPoolBitmap == 0 {
		return nil, errors.New("p4rt: this program keeps its bitmaps in pair registers, which the controller does not read")
	}
	var idx []int64
	for set := range 2 {
		for i := base; i < base+size; i++ {
			idx = append(idx, int64(set*slots+i))
		}
	}
	counts, err := c.readCells(ctx, ids.RegisterPoolCount, idx)
	if err != nil {
		return nil, err
	}
	var waiting []int64
	for _, i := range idx {
		if counts[i] != 0 {
			waiting = append(waiting, i)
		}
	}
	missing := map[int]int{}
	if len(waiting) == 0 {
		return missing, nil
	}
	bitmaps, err := c.readCells(ctx, ids.RegisterPoolBitmap, waiting)
	if err != nil {
		return nil, err
	}
	for _, i := range waiting {
		for r := range min(world, stallBitmapRanks) {
			if bitmaps[i]&(1<<r) == 0 {
				missing[r]++
			}
		}
	}
	return missing, nil
}

// readCells reads the given cells of a register, as unsigned values.
func (c *Client) readCells(ctx context.Context, id uint32, idx []int64) (map[int64]uint64, error) {
	qs := make([]*p4v1.Entity, len(idx))
	for k, i := range idx {
		qs[k] = &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{RegisterId: id, Index: &p4v1.Index{Index: i}}}}
	}
	ents, err := c.Read(ctx, qs...)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]uint64, len(ents))
	for _, e := range ents {
		re := e.GetRegisterEntry()
		b := re.GetData().GetBitstring()
		if len(b) > 8 {
			b = b[len(b)-8:]
		}
		var v uint64
		for _, x := range b {
			v = v<<8 | uint64(x)
		}
		out[re.GetIndex().GetIndex()] = v
	}
	return out, nil
}
