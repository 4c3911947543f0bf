//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A multicast hands WriteBatch one buffer for many destinations (the
// software switch's result for every rank of a job). With
// Options.ShareCopies the writer copies such a datagram once, into its
// outbox, a file of its own in Options.Dir that the readers map read-only,
// and gives each destination's ring a reference (the outbox's token and
// the datagram's offset) in place of the bytes. The reader returns a
// message that points into the outbox.
//
// An outbox slot is reused once every ring it was referenced from has been
// read past the reference: the reader hands slots back at its next read,
// so a message stays valid exactly as long as one in the ring. The writer
// learns this from the heads it already reads for its rings, so nothing
// is shared beyond the rings and the outbox's bytes. An outbox that is
// full (a reader fell behind) or could not be made leaves datagrams to be
// copied into the rings, as without the option.

// outbox is a writer's shared copies.
type outbox struct {
	mem    []byte
	fd     int
	path   string
	slots  int
	stride int
	// head is the oldest slot maybe still referenced, tail the next to
	// fill; slot i sits at outHeader + (i % slots) * stride.
	head, tail uint64
	refs       [][]outRef // per slot, the rings that reference it
	failed     bool       // could not be made: copy instead
}

// outRef is a reference to an outbox slot in a ring: the peer, its
// mapping's epoch and the ring position of the reference.
type outRef struct {
	p     *peer
	epoch uint64
	pos   uint64
}

// Outbox layout.
const (
	outMagic   = 0x31305842534d5353 // "SSMSBX01"
	outHeader  = 4096
	outVersion = 8 // uint32
	outSlots   = 12
	outStride  = 16

	// maxOutboxSlots bounds an outbox (36 MiB with the largest
	// datagrams).
	maxOutboxSlots = 4096

	// minShared is the smallest datagram worth sharing: a reference
	// costs a cache line in each ring and the reader's indirection.
	minShared = 128
)

// outboxPath is the outbox of the writer whose inbox is at inbox and whose
// token is tok.
func outboxPath(inbox string, tok uint64) string { return fmt.Sprintf("%s.%x.out", inbox, tok) }

// openOutbox makes the Conn's outbox: made aside, locked (so that a sweep
// takes it for its owner's until the owner is gone), allocated whole (so
// that writes into it cannot fault) and renamed into place.
func (c *Conn) openOutbox() bool {
	o := &c.out
	if o.mem != nil || o.failed {
		return o.mem != nil
	}
	o.failed = true
	o.slots = min(4*c.opts.Slots, maxOutboxSlots)
	o.stride = (c.opts.MaxDatagram + 63) &^ 63
	size := outHeader + o.slots*o.stride
	tmp := filepath.Join(c.opts.Dir, fmt.Sprintf(".switchml-new-%x.out", c.token))
	fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false
	}
	fail := func() bool {
		unix.Close(fd)
		os.Remove(tmp)
		return false
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil || unix.Fallocate(fd, 0, 0, int64(size)) != nil {
		return fail()
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail()
	}
	le := binary.LittleEndian
	le.PutUint32(mem[outVersion:], version)
	le.PutUint32(mem[outSlots:], uint32(o.slots))
	le.PutUint32(mem[outStride:], uint32(o.stride))
	le.PutUint64(mem, outMagic)
	path := outboxPath(c.path, c.token)
	if os.Rename(tmp, path) != nil {
		unix.Munmap(mem)
		return fail()
	}
	o.mem, o.fd, o.path, o.failed = mem, fd, path, false
	o.refs = make([][]outRef, o.slots)
	return true
}

// closeOutbox removes the outbox. Readers that mapped it keep what they
// mapped.
func (c *Conn) closeOutbox() {
	o := &c.out
	if o.mem == nil {
		return
	}
	os.Remove(o.path)
	unix.Munmap(o.mem)
	unix.Close(o.fd)
	o.mem, o.refs = nil, nil
	o.failed = true
}

// put copies b into a free outbox slot and returns the slot's offset, or
// -1 when there is no outbox or no free slot.
func (c *Conn) put(b []byte) int {
	o := &c.out
	if o.mem == nil && !c.openOutbox() {
		return -1
	}
	if o.tail-o.head == uint64(o.slots) && !c.reclaim() {
		return -1
	}
	i := int(o.tail % uint64(o.slots))
	off := outHeader + i*o.stride
	c.inOutbox = true
	copy(o.mem[off:off+o.stride], b)
	c.inOutbox = false
	o.refs[i] = o.refs[i][:0]
	o.tail++
	return off
}

// ref notes that p's ring holds a reference to the slot at off, at the
// ring's current tail.
func (c *Conn) ref(off int, p *peer) {
	o := &c.out
	i := (off - outHeader) / o.stride
	o.refs[i] = append(o.refs[i], outRef{p: p, epoch: p.epoch, pos: p.tail})
}

// reclaim frees the oldest slots whose references have all been read
// past, and reports whether one is free now.
func (c *Conn) reclaim() bool {
	o := &c.out
	for o.head != o.tail {
		i := int(o.head % uint64(o.slots))
		for len(o.refs[i]) > 0 {
			r := o.refs[i][len(o.refs[i])-1]
			if !r.passed() {
				return o.tail-o.head < uint64(o.slots)
			}
			o.refs[i] = o.refs[i][:len(o.refs[i])-1]
		}
		o.head++
	}
	return true
}

// passed tells whether the reader of r's ring is done with the reference:
// it read past it, or the ring is not the one referenced any more.
func (r outRef) passed() bool {
	p := r.p
	if p.epoch != r.epoch || p.head > r.pos {
		return true
	}
	p.head = p.in.u64(p.in.g.entry(p.entry) + eHead).Load()
	return p.head > r.pos
}

// stampRef writes a ring slot that refers to n bytes at off in this Conn's
// outbox.
func (c *Conn) stampRef(s []byte, n, off int) {
	binary.LittleEndian.PutUint32(s[sLen:], uint32(n))
	binary.LittleEndian.PutUint16(s[sPort:], c.srcPort)
	binary.LittleEndian.PutUint16(s[sFamily:], c.srcFam|famRef)
	copy(s[sAddr:sAddr+16], c.srcAddr[:])
	binary.LittleEndian.PutUint64(s[slotHeader:], c.token)
	binary.LittleEndian.PutUint64(s[slotHeader+8:], uint64(off))
}

// mappedOutbox is a writer's outbox as a reader maps it.
type mappedOutbox struct {
	tok uint64
	mem []byte
}

// outboxOf returns the mapped outbox with token tok of the producer at
// entry e, whose address is src, mapping it on first use.
func (c *Conn) outboxOf(e int, tok uint64, src netip.AddrPort) []byte {
	if c.outs == nil {
		c.outs = make([]mappedOutbox, c.in.g.producers)
	}
	m := &c.outs[e]
	if m.mem != nil && m.tok == tok {
		return m.mem
	}
	c.unmapOutbox(e)
	if m.tok == tok {
		return nil // failed before: the datagrams are lost, as a dead producer's
	}
	m.tok = tok
	path := outboxPath(filepath.Join(c.opts.Dir, inboxName(c.ns, src)), tok)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Size < outHeader {
		return nil
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	if binary.LittleEndian.Uint64(mem) != outMagic || binary.LittleEndian.Uint32(mem[outVersion:]) != version {
		unix.Munmap(mem)
		return nil
	}
	m.mem = mem
	return mem
}

// unmapOutbox lets go of the outbox mapped for entry e.
func (c *Conn) unmapOutbox(e int) {
	if c.outs == nil || c.outs[e].mem == nil {
		return
	}
	unix.Munmap(c.outs[e].mem)
	c.outs[e].mem = nil
}

// blankOutboxes puts anonymous memory where the mapped outboxes were, as
// Close does for the inbox, so that messages a caller holds stay readable.
func (c *Conn) blankOutboxes() {
	for _, m := range c.outs {
		if len(m.mem) > 0 {
			_, _ = unix.MmapPtr(-1, 0, unsafe.Pointer(&m.mem[0]), uintptr(len(m.mem)), unix.PROT_READ,
				unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
		}
	}
}

// copies finds the buffers a batch sends more than once, by the address
// of their first byte. Its entries are told apart from the last batch's
// by a generation, so it is never cleared.
type copies struct {
	gen uint32
	e   []copyEntry
}

type copyEntry struct {
	gen  uint32
	n    int32 // messages with this buffer
	off  int   // outbox offset, 0 until put, -1 if it could not be
	ptr  uintptr
	size int
}

// count makes the table for the messages of ms, counting each buffer's
// messages.
func (t *copies) count(ms []Message) {
	want := 2
	for want < 2*len(ms) {
		want *= 2
	}
	if len(t.e) < want {
		t.e = make([]copyEntry, want)
		t.gen = 0
	}
	t.gen++
	if t.gen == 0 {
		clear(t.e)
		t.gen = 1
	}
	for i := range ms {
		if b := ms[i].Buf; len(b) >= minShared {
			t.find(b).n++
		}
	}
}

// find returns b's entry, adding it.
func (t *copies) find(b []byte) *copyEntry {
	ptr := uintptr(unsafe.Pointer(&b[0]))
	mask := uint64(len(t.e) - 1)
	for i := (uint64(ptr) >> 6) * 0x9e3779b97f4a7c15 >> 20 & mask; ; i = (i + 1) & mask {
		e := &t.e[i]
		if e.gen != t.gen {
			*e = copyEntry{gen: t.gen, ptr: ptr, size: len(b)}
			return e
		}
		if e.ptr == ptr && e.size == len(b) {
			return e
		}
	}
}
