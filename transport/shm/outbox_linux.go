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
// Datagrams are packed in the outbox in the order they are put, each at a
// cache-line boundary, wrapping at its end, so that small ones share
// pages: a reader of 1 KiB results touches a quarter of the pages (and
// of the TLB entries) that one slot per largest datagram would take.
//
// A datagram's space is reused once every ring it was referenced from has
// been read past the reference: the reader hands slots back at its next
// read, so a message stays valid exactly as long as one in the ring. The
// writer learns this from the heads it already reads for its rings, so
// nothing is shared beyond the rings and the outbox's bytes. An outbox that
// is full (a reader fell behind) or could not be made leaves datagrams to
// be copied into the rings, as without the option.

// outbox is a writer's shared copies.
type outbox struct {
	mem  []byte
	fd   int
	path string
	size uint64 // bytes for datagrams, after outHeader
	// entries records the datagrams in the order they were put, from head
	// to tail (indices that only grow, taken modulo len(entries)). start
	// and end bound the bytes in use, as positions that only grow: a
	// datagram at position x sits at outHeader + x%size.
	entries    []outEntry
	head, tail uint64
	start, end uint64
	failed     bool // could not be made: copy instead
}

// outEntry is a datagram in the outbox: where it ends, and the rings that
// reference it.
type outEntry struct {
	end  uint64
	refs []outRef
}

// outRef is a reference to an outbox datagram in a ring: the peer, its
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
	outVersion = 8  // uint32
	outEntries = 12 // uint32
	outSize    = 16 // uint64

	// maxOutboxDatagrams bounds an outbox's bytes to this many of the
	// largest datagrams (36 MiB of 9000-byte ones).
	maxOutboxDatagrams = 4096

	// minShared is the smallest datagram worth sharing: a reference
	// costs a cache line in each ring and the reader's indirection.
	minShared = 128
)

// outboxPath is the outbox of the writer whose inbox is at inbox and whose
// token is tok.
func outboxPath(inbox string, tok uint64) string { return fmt.Sprintf("%s.%x.out", inbox, tok) }

// openOutbox makes the Conn's outbox: made aside, locked (so that a sweep
// takes it for its owner's until the owner is gone), allocated whole (so
// that writes into it cannot fault) and renamed into place. It holds
// 4 × Slots of the largest datagrams, and up to four times as many
// smaller ones.
func (c *Conn) openOutbox() bool {
	o := &c.out
	if o.mem != nil || o.failed {
		return o.mem != nil
	}
	o.failed = true
	largest := min(4*c.opts.Slots, maxOutboxDatagrams)
	o.size = uint64(largest * ((c.opts.MaxDatagram + 63) &^ 63))
	entries := 4 * largest
	size := outHeader + int(o.size)
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
	le.PutUint32(mem[outEntries:], uint32(entries))
	le.PutUint64(mem[outSize:], o.size)
	le.PutUint64(mem, outMagic)
	path := outboxPath(c.path, c.token)
	if os.Rename(tmp, path) != nil {
		unix.Munmap(mem)
		return fail()
	}
	o.mem, o.fd, o.path, o.failed = mem, fd, path, false
	o.entries = make([]outEntry, entries)
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
	o.mem, o.entries = nil, nil
	o.failed = true
}

// put copies b into the outbox and returns its offset in the file and
// its entry, or -1 when there is no outbox or no room.
func (c *Conn) put(b []byte) (off, entry int) {
	o := &c.out
	if o.mem == nil && !c.openOutbox() {
		return -1, 0
	}
	n := uint64(len(b)+63) &^ 63
	if n > o.size {
		return -1, 0
	}
	pos := o.place(n)
	if o.tail-o.head == uint64(len(o.entries)) || pos+n > o.start+o.size {
		c.reclaim()
		if pos = o.place(n); o.tail-o.head == uint64(len(o.entries)) || pos+n > o.start+o.size {
			return -1, 0
		}
	}
	off = outHeader + int(pos%o.size)
	c.inOutbox = true
	copy(o.mem[off:off+len(b)], b)
	c.inOutbox = false
	entry = int(o.tail % uint64(len(o.entries)))
	o.entries[entry] = outEntry{end: pos + n, refs: o.entries[entry].refs[:0]}
	o.tail++
	o.end = pos + n
	return off, entry
}

// place is where the next datagram of n bytes goes: after the last one,
// or at the start of the area when it would run past its end.
func (o *outbox) place(n uint64) uint64 {
	pos := o.end
	if r := pos % o.size; r+n > o.size {
		pos += o.size - r
	}
	return pos
}

// ref notes that p's ring holds a reference to the datagram of entry, at
// the ring's current tail.
func (c *Conn) ref(entry int, p *peer) {
	e := &c.out.entries[entry]
	e.refs = append(e.refs, outRef{p: p, epoch: p.epoch, pos: p.tail})
}

// reclaim frees the oldest datagrams whose references have all been read
// past.
func (c *Conn) reclaim() {
	o := &c.out
	for o.head != o.tail {
		e := &o.entries[o.head%uint64(len(o.entries))]
		for len(e.refs) > 0 {
			if !e.refs[len(e.refs)-1].passed() {
				return
			}
			e.refs = e.refs[:len(e.refs)-1]
		}
		o.start = e.end
		o.head++
	}
	o.start = o.end
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
	c.stamp(s, n)
	binary.LittleEndian.PutUint16(s[sFamily:], c.srcFam|famRef)
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
		blank(m.mem)
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
	ent  int   // outbox entry, once put
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
