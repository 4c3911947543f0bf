package afxdp

import (
	"net/netip"
	"sync/atomic"
)

// rxEntry is a received datagram that one Conn's reader took off the
// shared RX ring for another Conn: the UMEM frame holding it, where its
// payload starts in the UMEM and how long it is, and its source.
type rxEntry struct {
	frame uint64
	off   uint64
	n     int
	src   netip.AddrPort
}

// rxQueue is a bounded FIFO of hand-offs. Pushes and pops happen under
// the device's RX lock; count may be read without it, so that a reader
// about to sleep can see that a hand-off arrived.
type rxQueue struct {
	buf   []rxEntry
	head  int
	n     int
	count atomic.Int32
}

func newRxQueue(size int) rxQueue { return rxQueue{buf: make([]rxEntry, size)} }

// push appends e; it reports false, leaving the queue as it was, when the
// queue is full.
func (q *rxQueue) push(e rxEntry) bool {
	if q.n == len(q.buf) {
		return false
	}
	q.buf[(q.head+q.n)%len(q.buf)] = e
	q.n++
	q.count.Store(int32(q.n))
	return true
}

// pop removes the oldest entry.
func (q *rxQueue) pop() (rxEntry, bool) {
	if q.n == 0 {
		return rxEntry{}, false
	}
	e := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	q.count.Store(int32(q.n))
	return e, true
}
