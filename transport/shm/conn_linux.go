//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/transport/internal/netns"
	"golang.org/x/sys/unix"
)

// Message is one datagram in a batch.
type Message = transport.Message

var (
	_ transport.PacketConn    = (*Conn)(nil)
	_ transport.InPlaceWriter = (*Conn)(nil)
)

// recheck is how often a sender looks an address's inbox up again and an
// owner looks for producers that are gone.
const recheck = time.Second

// Conn is a UDP socket with a shared-memory inbox; see the package
// documentation. One reader and one writer may run at the same time.
type Conn struct {
	udp   *transport.Conn
	local netip.AddrPort
	opts  Options
	ns    uint64
	token uint64 // names this Conn in the entries it claims

	mu     sync.RWMutex // shared by reads and writes, exclusive in Close
	closed atomic.Bool

	// The inbox, read by this Conn.
	in   region
	fd   int
	path string

	// Reader state.
	gen      uint64
	active   []int
	heads    []uint64 // next slot to read, per entry
	pend     []pending
	rr       int
	nextReap time.Time

	// The UDP socket is read by a goroutine of its own, which hands each
	// batch over in udpSet (udpN messages, published atomically) and
	// reads again only when the reader has let the batch go (udpMore):
	// the messages may point into the socket's memory.
	udpSet  []Message
	udpBufs [][]byte
	udpN    atomic.Int32
	udpNext int
	udpMore chan struct{}
	udpStop chan struct{}
	udpDone chan struct{}

	// The reader sleeps reading bell, a FIFO beside the inbox, through
	// the runtime's poller; producers wake it with a byte, and so does the
	// UDP goroutine, through wake.
	bell      *os.File
	bellPath  string
	wake      int
	bellBuf   [64]byte
	bellRaw   syscall.RawConn
	drainBell func(fd uintptr) bool

	// Writer state.
	peers    map[netip.AddrPort]*peer
	last     *peer
	touched  []*peer
	viaUDP   []Message
	srcAddr  [16]byte
	srcFam   uint16
	srcPort  uint16
	peerList []*peer // for Close
	resv     [][]byte
	resvPeer *peer
	// Datagrams a batch sends to several inboxes are written once, into
	// the outbox (Options.ShareCopies); inOutbox is set while copying
	// into it, so that a fault there is told from one in a peer's inbox.
	out      outbox
	inOutbox bool
	dups     copies

	// The outboxes of the producers whose rings refer to them, by entry.
	outs []mappedOutbox

	// Wake-ups put off (Options.CoalesceWakeups), rung by the reader
	// before it blocks. owedMu guards owed and peer.owed, and is held
	// while a peer is unmapped, so that the reader never rings a bell
	// whose inbox is gone.
	owedMu    sync.Mutex
	owed      []*peer
	nowed     atomic.Int32
	owedSince atomic.Int64 // when owed became non-empty, in Unix nanoseconds

	shmTX, shmRX, udpTX, udpRX, dropped, bells, shared atomic.Uint64
	npeers                                             atomic.Int64
}

type pending struct {
	entry int
	head  uint64
}

// region is a mapped inbox.
type region struct {
	mem []byte
	g   geometry
}

func (r region) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off])) }
func (r region) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off])) }

// peer is a destination as this Conn's writer knows it: an inbox it holds
// an entry in, or (in == nil) one to reach over UDP until checked again.
type peer struct {
	addr netip.AddrPort
	in   region
	fd   int
	bell int // the reader's FIFO
	// reserved: the ring's memory is allocated, so datagrams can be built
	// in place without a fault; unreservable: it could not be.
	reserved, unreservable bool
	ino                    uint64
	entry                  int
	tail                   uint64
	head                   uint64 // last head seen
	checked                time.Time
	dirty                  bool
	owed                   bool   // in Conn.owed
	epoch                  uint64 // counts unmaps, so that outbox references to an earlier mapping are let go
	// stride is the ring's slot stride, chosen at attach for datagrams of
	// up to maxDgram bytes (the size the first Reserve asked for, kept in
	// sizeHint for a later attach).
	stride, maxDgram, sizeHint int
}

// Listen opens a UDP socket on addr (port 0 picks a free one) and creates
// the Conn's inbox. addr must name a specific address.
func Listen(addr netip.AddrPort, opts Options, udpOpts transport.Options) (*Conn, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if !addr.Addr().IsValid() || addr.Addr().IsUnspecified() {
		return nil, errNoAddr
	}
	if st, err := os.Stat(opts.Dir); err != nil {
		return nil, fmt.Errorf("shm: Options.Dir: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("shm: Options.Dir %s: not a directory", opts.Dir)
	}
	udp, err := transport.Listen(addr.String(), udpOpts)
	if err != nil {
		return nil, &listenError{err}
	}
	local := udp.LocalAddr()
	c := &Conn{udp: udp, local: netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), opts: opts, ns: netns.ID(), fd: -1, peers: map[netip.AddrPort]*peer{}}
	c.udpSet, c.udpBufs = make([]Message, udp.Batch()), make([][]byte, udp.Batch())
	for i := range c.udpBufs {
		c.udpBufs[i] = make([]byte, transport.MaxDatagram)
	}
	c.udpMore, c.udpStop, c.udpDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	if err := c.open(); err != nil {
		udp.Close()
		return nil, err
	}
	go c.readUDP()
	return c, nil
}

func (c *Conn) open() error {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	c.token = binary.LittleEndian.Uint64(tok[:]) | 1
	a := c.local.Addr()
	if a.Is4() {
		c.srcFam = 4
	} else {
		c.srcFam = 6
	}
	c.srcAddr = a.As16()
	c.srcPort = c.local.Port()

	g := newGeometry(c.opts)
	sweep(c.opts.Dir, c.ns)
	c.path = filepath.Join(c.opts.Dir, inboxName(c.ns, c.local))
	// The inbox is made under a temporary name and renamed into place once
	// locked and complete, so that nobody finds it half made, or unlocked
	// and takes it for a dead one. Its FIFO's name carries the Conn's
	// token, so that it cannot be taken for an earlier owner's.
	tmp := filepath.Join(c.opts.Dir, fmt.Sprintf(".switchml-new-%x", c.token))
	fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("shm: cannot create inbox %s: %v", tmp, err)
	}
	var mem []byte
	fail := func(what string, err error) error {
		if mem != nil {
			unix.Munmap(mem)
		}
		unix.Close(fd)
		os.Remove(tmp)
		return fmt.Errorf("shm: %s inbox %s: %v", what, c.path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail("cannot lock", err)
	}
	if err := unix.Ftruncate(fd, int64(g.size())); err != nil {
		return fail("cannot size", err)
	}
	if mem, err = unix.Mmap(fd, 0, g.size(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail("cannot map", err)
	}
	c.fd, c.in = fd, region{mem: mem, g: g}
	le := binary.LittleEndian
	le.PutUint32(mem[hVersion:], version)
	le.PutUint32(mem[hProducers:], uint32(g.producers))
	le.PutUint32(mem[hSlots:], uint32(g.slots))
	le.PutUint32(mem[hStride:], uint32(g.stride))
	le.PutUint32(mem[hMaxDgram:], uint32(g.maxDgram))
	le.PutUint32(mem[hOwnerPID:], uint32(os.Getpid()))
	le.PutUint64(mem[hToken:], c.token)
	c.heads = make([]uint64, g.producers)
	if err := c.openBell(); err != nil {
		return fail("cannot make the FIFO of", err)
	}
	c.in.u64(hMagic).Store(magic)
	// The UDP socket holds the address, so a file under its name is a
	// dead owner's: the rename replaces it.
	if err := os.Rename(tmp, c.path); err != nil {
		c.bell.Close()
		unix.Close(c.wake)
		os.Remove(c.bellPath)
		return fail("cannot publish", err)
	}
	return nil
}

// bellPath is the FIFO of the inbox at path whose owner's token is tok.
func bellPath(path string, tok uint64) string { return fmt.Sprintf("%s.%x.bell", path, tok) }

// openBell creates the FIFO the reader sleeps on and opens it for reading
// (through the runtime's poller) and for waking itself.
func (c *Conn) openBell() error {
	c.bellPath = bellPath(c.path, c.token)
	if err := unix.Mkfifo(c.bellPath, 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(c.bellPath, os.O_RDWR, 0)
	if err != nil {
		os.Remove(c.bellPath)
		return err
	}
	w, err := unix.Open(c.bellPath, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Close()
		os.Remove(c.bellPath)
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		unix.Close(w)
		f.Close()
		os.Remove(c.bellPath)
		return err
	}
	c.bell, c.wake, c.bellRaw = f, w, rc
	c.drainBell = func(fd uintptr) bool {
		_, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&c.bellBuf[0])), uintptr(len(c.bellBuf)))
		return e != unix.EAGAIN
	}
	return nil
}

// sweep removes the inboxes of network namespace ns in dir whose owners
// are gone, and their FIFOs, as a process that was killed leaves them.
func sweep(dir string, ns uint64) {
	names, err := filepath.Glob(filepath.Join(dir, inboxPrefix(ns)+"*"))
	if err != nil {
		return
	}
	for _, name := range names {
		if filepath.Ext(name) == ".bell" {
			continue
		}
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		// An outbox's owner holds its lock as it does its inbox's; only
		// an inbox has a FIFO.
		var hdr [hToken + 8]byte
		if ownerGone(fd) {
			if filepath.Ext(name) != ".out" {
				if n, _ := unix.Pread(fd, hdr[:], 0); n == len(hdr) {
					os.Remove(bellPath(name, binary.LittleEndian.Uint64(hdr[hToken:])))
				}
			}
			os.Remove(name)
		}
		unix.Close(fd)
	}
}

// LocalAddr is the address the Conn is bound to.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Batch is the most datagrams the UDP socket moves per call.
func (c *Conn) Batch() int { return c.udp.Batch() }

// Coalesced counts datagrams the UDP socket received coalesced.
func (c *Conn) Coalesced() uint64 { return c.udp.Coalesced() }

// Inbox is the path of the Conn's inbox file.
func (c *Conn) Inbox() string { return c.path }

// SetReadDeadline sets the deadline for reads; it may be called from any
// goroutine to wake a blocked reader.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	return c.bell.SetReadDeadline(t)
}

// Stats returns the Conn's counters.
func (c *Conn) Stats() Stats {
	return Stats{ShmTX: c.shmTX.Load(), ShmRX: c.shmRX.Load(), UDPTX: c.udpTX.Load(), UDPRX: c.udpRX.Load(),
		Dropped: c.dropped.Load(), Doorbells: c.bells.Load(), Shared: c.shared.Load(), Peers: int(c.npeers.Load())}
}

var oneByte = []byte{1}

// ring wakes the reader of inbox r, whose FIFO is open as fd, if it
// raised its flag: one wake-up per sleep, whoever publishes first.
func ring(r region, fd int) bool {
	sl := r.u32(hSleeping)
	if sl.Load() == 0 || !sl.CompareAndSwap(1, 0) {
		return false
	}
	// A full FIFO already holds a wake-up. The FIFO does not block, so
	// the write goes without the runtime's system-call bookkeeping, which
	// would wake its monitor thread every time.
	_, _, _ = unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&oneByte[0])), 1)
	return true
}

// Close closes the socket and the inbox; blocked reads return
// net.ErrClosed. Messages from earlier reads read as zeros afterwards.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	// Unpublish the inbox before the address is free for another Conn,
	// whose inbox would take the same name.
	_ = os.Remove(c.path)
	_ = os.Remove(c.bellPath)
	err := c.udp.Close()
	close(c.udpStop)
	c.bell.Close() // wakes a sleeping reader
	<-c.udpDone
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ringOwed()
	for _, p := range c.peerList {
		c.detach(p)
	}
	c.closeOutbox()
	unix.Close(c.wake)
	// Put anonymous memory where the inbox was, so that messages a caller
	// still holds stay readable, then let the file and its lock go.
	blank(c.in.mem)
	c.blankOutboxes()
	unix.Close(c.fd)
	return err
}

// blank puts anonymous read-only memory over the mapping mem: what a
// caller still holds of it reads as zeros, and the file can go.
func blank(mem []byte) {
	if len(mem) > 0 {
		_, _ = unix.MmapPtr(-1, 0, unsafe.Pointer(&mem[0]), uintptr(len(mem)), unix.PROT_READ,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	}
}

// ReadBatch waits until at least one datagram arrives, from the inbox or
// the UDP socket, or the deadline passes (a zero deadline waits forever),
// and fills ms[:n]. Each message points at the whole datagram in memory of
// the Conn's, valid until the next read. On a deadline it returns 0 and an
// error for which transport.IsTimeout is true.
func (c *Conn) ReadBatch(ms []Message, deadline time.Time) (n int, err error) {
	if len(ms) == 0 {
		return 0, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	defer c.readFault(&n, &err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	c.release()
	c.ringOverdue()
	if err := c.bell.SetReadDeadline(deadline); err != nil {
		return 0, net.ErrClosed
	}
	sleeping := c.in.u32(hSleeping)
	for {
		if n = c.take(ms); n > 0 {
			return n, nil
		}
		c.reap()
		if c.opts.YieldsBeforeSleep > 0 {
			// Peers put off waking are woken first: the CPU may go
			// to one of them.
			c.ringOwed()
			for i := 0; i < c.opts.YieldsBeforeSleep; i++ {
				_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
				if n = c.take(ms); n > 0 {
					return n, nil
				}
			}
		}
		// Raise the flag, then look again: a producer that published
		// before seeing it is found here, one after writes to the FIFO.
		sleeping.Store(1)
		c.ringOwed()
		if n = c.take(ms); n > 0 {
			sleeping.Store(0)
			return n, nil
		}
		if c.closed.Load() {
			sleeping.Store(0)
			return 0, net.ErrClosed
		}
		// The FIFO does not block: read it without the runtime's
		// system-call bookkeeping, and wait for it in the poller.
		rerr := c.bellRaw.Read(c.drainBell)
		sleeping.Store(0)
		switch {
		case c.closed.Load():
			return 0, net.ErrClosed
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			return 0, os.ErrDeadlineExceeded
		case rerr != nil:
			return 0, fmt.Errorf("shm: waiting on %s: %w", c.bellPath, rerr)
		}
	}
}

// take fills ms from the UDP socket's last batch, then from the rings:
// the UDP batch first, so that busy rings cannot starve it.
func (c *Conn) take(ms []Message) int {
	n := 0
	if avail := int(c.udpN.Load()); c.udpNext < avail {
		n = copy(ms, c.udpSet[c.udpNext:avail])
		c.udpNext += n
		c.udpRX.Add(uint64(n))
	}
	return n + c.drain(ms[n:])
}

// TryReadBatch is ReadBatch without waiting: it returns what the inbox and
// the socket already hold, possibly nothing.
func (c *Conn) TryReadBatch(ms []Message) (n int, err error) {
	if len(ms) == 0 {
		return 0, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	defer c.readFault(&n, &err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	c.release()
	c.ringOverdue()
	return c.take(ms), nil
}

// readFault, deferred by a read, turns a fault on the inbox's memory into
// the read's error; any other panic goes on.
func (c *Conn) readFault(n *int, err *error) {
	if r := recover(); r != nil {
		if !faulted(r) {
			panic(r)
		}
		*n, *err = 0, fmt.Errorf("shm: reading inbox %s: %w (%v): close the Conn", c.path, ErrFault, r)
	}
}

// faulted tells whether a recovered panic is a memory fault, which with
// debug.SetPanicOnFault on is what touching shared memory that cannot be
// backed (a file system out of space, a file cut short by someone else)
// raises.
func faulted(r any) bool {
	_, ok := r.(interface{ Addr() uintptr })
	return ok
}

// readUDP reads the UDP socket until it is closed, handing each batch to
// the reader and waiting for it to be taken before reading the next.
func (c *Conn) readUDP() {
	defer close(c.udpDone)
	for {
		for i := range c.udpSet {
			c.udpSet[i].Buf = c.udpBufs[i]
		}
		k, err := c.udp.ReadBatch(c.udpSet, time.Time{})
		if err != nil {
			if errors.Is(err, net.ErrClosed) || c.closed.Load() {
				return
			}
			// The next read tells again if it persists; do not spin on it.
			time.Sleep(time.Millisecond)
			continue
		}
		n := 0
		for _, m := range c.udpSet[:k] {
			if m.N > 0 {
				c.udpSet[n] = m
				n++
			}
		}
		if n == 0 {
			continue
		}
		c.udpN.Store(int32(n))
		ring(c.in, c.wake)
		select {
		case <-c.udpMore:
		case <-c.udpStop:
			return
		}
	}
}

// release hands the slots of the last read back to their producers, and
// the UDP socket's batch back to its reader once all of it was taken.
func (c *Conn) release() {
	if c.udpNext > 0 && c.udpNext == int(c.udpN.Load()) {
		c.udpNext = 0
		c.udpN.Store(0)
		c.udpMore <- struct{}{}
	}
	for _, p := range c.pend {
		c.in.u64(c.in.g.entry(p.entry) + eHead).Store(p.head)
	}
	c.pend = c.pend[:0]
}

// drain takes what the producers' rings hold, round robin, into ms.
func (c *Conn) drain(ms []Message) int {
	g := c.in.g
	if gen := c.in.u64(hAttachGen).Load(); gen != c.gen {
		c.gen = gen
		c.active = c.active[:0]
		for e := 0; e < g.producers; e++ {
			if c.in.u64(g.entry(e)+eToken).Load() != 0 {
				c.active = append(c.active, e)
			}
		}
	}
	n := 0
	na := len(c.active)
	for k := 0; k < na && n < len(ms); k++ {
		e := c.active[(c.rr+k)%na]
		head := c.heads[e]
		tail := c.in.u64(g.entry(e) + eTail).Load()
		if tail-head > uint64(g.slots) {
			// Not a tail this package writes: skip the damage.
			head = tail
		}
		start := head
		// Loaded after the tail: a producer writes it before its first
		// datagram.
		stride := g.entryStride(c.in.u32(g.entry(e) + eStride).Load())
		for head != tail && n < len(ms) {
			off := g.slotAt(e, int(head%uint64(g.slots)), stride)
			head++
			s := c.in.mem[off : off+stride : off+stride]
			l := int(binary.LittleEndian.Uint32(s[sLen:]))
			if l < 1 || l > g.room(stride) {
				continue
			}
			var ip netip.Addr
			if s[sFamily] == 4 {
				ip = netip.AddrFrom4([4]byte(s[sAddr+12 : sAddr+16]))
			} else {
				ip = netip.AddrFrom16([16]byte(s[sAddr : sAddr+16]))
			}
			m := &ms[n]
			src := netip.AddrPortFrom(ip, binary.LittleEndian.Uint16(s[sPort:]))
			if binary.LittleEndian.Uint16(s[sFamily:])&famRef == 0 {
				m.Buf = s[slotHeader : slotHeader+l : slotHeader+l]
			} else {
				// The datagram is in the producer's outbox.
				ob := c.outboxOf(e, binary.LittleEndian.Uint64(s[slotHeader:]), src)
				off := binary.LittleEndian.Uint64(s[slotHeader+8:])
				if off < outHeader || off > uint64(len(ob)) || uint64(len(ob))-off < uint64(l) {
					continue
				}
				m.Buf = ob[off : off+uint64(l) : off+uint64(l)]
			}
			m.N = l
			m.Addr = src
			n++
		}
		if head != start {
			c.heads[e] = head
			c.pend = append(c.pend, pending{e, head})
		}
	}
	c.rr++
	c.shmRX.Add(uint64(n))
	return n
}

// reap frees the entries of producers that closed or whose process is
// gone, at most once per recheck interval.
func (c *Conn) reap() {
	now := time.Now()
	if now.Before(c.nextReap) {
		return
	}
	c.nextReap = now.Add(recheck)
	g := c.in.g
	freed := false
	for _, e := range c.active {
		base := g.entry(e)
		pid := int(c.in.u32(base + ePID).Load())
		state := c.in.u32(base + eState).Load()
		gone := pid != 0 && unix.Kill(pid, 0) == unix.ESRCH
		drained := c.heads[e] == c.in.u64(base+eTail).Load()
		if !(gone || state == entryClosed && drained) {
			continue
		}
		c.in.u64(base + eTail).Store(0)
		c.in.u64(base + eHead).Store(0)
		c.in.u32(base + ePID).Store(0)
		c.in.u32(base + eStride).Store(0)
		c.in.u32(base + eState).Store(entryFree)
		c.heads[e] = 0
		c.unmapOutbox(e)
		if c.outs != nil {
			c.outs[e].tok = 0
		}
		// Give the ring's memory back; the next sender allocates it anew.
		_ = unix.Fallocate(c.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(g.slot(e, 0)), int64(g.slots*g.stride))
		c.in.u64(base + eToken).Store(0)
		freed = true
	}
	if freed {
		c.in.u64(hAttachGen).Add(1)
	}
}

// WriteBatch sends every message in ms: into the inbox of a destination
// that has one, through the UDP socket otherwise. It returns how many were
// handed on; datagrams dropped at a full ring count as handed on, as with
// a socket.
func (c *Conn) WriteBatch(ms []Message) (n int, err error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	now := time.Now()
	c.viaUDP = c.viaUDP[:0]
	var p *peer
	defer func() {
		if r := recover(); r != nil {
			if !faulted(r) {
				panic(r)
			}
			// A fault writing a peer's inbox: forget the inbox, so that
			// the destination goes over UDP from the next batch on.
			for _, t := range c.touched {
				t.dirty = false
			}
			c.touched = c.touched[:0]
			if c.inOutbox {
				c.inOutbox = false
				path := c.out.path
				c.closeOutbox()
				err = fmt.Errorf("shm: writing outbox %s: %w (%v): copying into each inbox from now on", path, ErrFault, r)
				return
			}
			dst := netip.AddrPort{}
			if p != nil {
				dst = p.addr
				c.unmap(p) // without touching the inbox again
			}
			err = fmt.Errorf("shm: writing the inbox of %v: %w (%v): it goes over UDP from now on", dst, ErrFault, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var shm, drops, shared uint64
	share := c.opts.ShareCopies && len(ms) > 1 && !c.out.failed
	if share {
		c.dups.count(ms)
	}
	for i := range ms {
		m := &ms[i]
		p = c.lookup(m.Addr, now)
		g := p.in.g
		if p.in.mem == nil || len(m.Buf) > p.maxDgram || len(m.Buf) == 0 {
			c.viaUDP = append(c.viaUDP, *m)
			continue
		}
		base := g.entry(p.entry)
		if p.tail-p.head >= uint64(g.slots) {
			p.head = p.in.u64(base + eHead).Load()
			if p.tail-p.head >= uint64(g.slots) {
				drops++
				continue
			}
		}
		off := g.slotAt(p.entry, int(p.tail%uint64(g.slots)), p.stride)
		s := p.in.mem[off : off+p.stride : off+p.stride]
		if share && len(m.Buf) >= minShared {
			if d := c.dups.find(m.Buf); d.n > 1 {
				if d.off == 0 {
					d.off, d.ent = c.put(m.Buf)
				}
				if d.off > 0 {
					c.stampRef(s, len(m.Buf), d.off)
					c.ref(d.ent, p)
					shared++
					goto written
				}
			}
		}
		c.stamp(s, len(m.Buf))
		copy(s[slotHeader:], m.Buf)
	written:
		p.tail++
		shm++
		if !p.dirty {
			p.dirty = true
			c.touched = append(c.touched, p)
		}
	}
	p = nil
	c.publish()
	c.shmTX.Add(shm)
	c.shared.Add(shared)
	c.dropped.Add(drops)
	if len(c.viaUDP) > 0 {
		k, err := c.udp.WriteBatch(c.viaUDP)
		c.udpTX.Add(uint64(k))
		if err != nil {
			return len(ms) - len(c.viaUDP) + k, err
		}
	}
	return len(ms), nil
}

// publish makes what was written into the touched inboxes visible and
// wakes their readers, or, coalescing, owes the wake-up to a reader whose
// ring from this Conn is less than half full.
func (c *Conn) publish() {
	for _, t := range c.touched {
		t.dirty = false
		base := t.in.g.entry(t.entry)
		t.in.u64(base + eTail).Store(t.tail)
		if c.opts.CoalesceWakeups && t.in.u32(hSleeping).Load() != 0 {
			t.head = t.in.u64(base + eHead).Load()
			if 2*(t.tail-t.head) < uint64(t.in.g.slots) {
				c.owe(t)
				continue
			}
		}
		if ring(t.in, t.bell) {
			c.bells.Add(1)
		}
	}
	c.touched = c.touched[:0]
}

// owe notes that p's reader is to be woken before this Conn's reader
// blocks.
func (c *Conn) owe(p *peer) {
	c.owedMu.Lock()
	if !p.owed {
		p.owed = true
		if len(c.owed) == 0 {
			c.owedSince.Store(time.Now().UnixNano())
		}
		c.owed = append(c.owed, p)
		c.nowed.Add(1)
	}
	c.owedMu.Unlock()
}

// maxOwed bounds how long a wake-up is put off while this Conn's reader
// keeps finding datagrams and so never blocks: a switch busy with one job
// must not hold another job's results back.
const maxOwed = 500 * time.Microsecond

// ringOverdue rings the owed wake-ups once the oldest is maxOwed old.
func (c *Conn) ringOverdue() {
	if c.nowed.Load() != 0 && time.Now().UnixNano()-c.owedSince.Load() >= int64(maxOwed) {
		c.ringOwed()
	}
}

// Flush wakes the sleeping readers of what this Conn wrote, now. Only a
// Conn with Options.CoalesceWakeups puts wake-ups off; one that stops
// reading after it wrote calls Flush, or Close, so that nothing waits.
func (c *Conn) Flush() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.closed.Load() {
		c.ringOwed()
	}
}

// ringOwed wakes the readers this Conn owes a wake-up.
func (c *Conn) ringOwed() {
	if c.nowed.Load() == 0 {
		return
	}
	c.owedMu.Lock()
	defer c.owedMu.Unlock()
	for _, p := range c.owed {
		if !p.owed {
			continue // unmapped since: its inbox may be another by now
		}
		p.owed = false
		if ring(p.in, p.bell) {
			c.bells.Add(1)
		}
	}
	c.owed = c.owed[:0]
	c.nowed.Store(0)
}

// Reserve returns up to n buffers in dst's inbox in which the next
// datagrams can be built (see transport.InPlaceWriter). It holds the Conn
// until Commit.
func (c *Conn) Reserve(dst netip.AddrPort, n, size int) [][]byte {
	c.mu.RLock()
	if c.closed.Load() || n <= 0 {
		c.mu.RUnlock()
		return nil
	}
	p := c.lookupFor(dst, size, time.Now())
	g := p.in.g
	if p.in.mem == nil || size > p.maxDgram || !c.allocate(p) {
		c.mu.RUnlock()
		return nil
	}
	free := uint64(g.slots) - (p.tail - p.head)
	if free < uint64(n) {
		p.head = p.in.u64(g.entry(p.entry) + eHead).Load()
		free = uint64(g.slots) - (p.tail - p.head)
	}
	k := min(uint64(n), free)
	if k == 0 {
		c.mu.RUnlock()
		return noRoom
	}
	c.resv = c.resv[:0]
	for i := uint64(0); i < k; i++ {
		off := g.slotAt(p.entry, int((p.tail+i)%uint64(g.slots)), p.stride) + slotHeader
		c.resv = append(c.resv, p.in.mem[off:off:off+p.maxDgram])
	}
	c.resvPeer = p
	return c.resv
}

// allocate backs p's ring with memory, once, so that building datagrams
// in it cannot fault on a full file system; where it cannot, datagrams to
// p are copied by WriteBatch, which catches faults.
func (c *Conn) allocate(p *peer) bool {
	if !p.reserved && !p.unreservable {
		g := p.in.g
		err := unix.Fallocate(p.fd, 0, int64(g.slot(p.entry, 0)), int64(g.slots*p.stride))
		p.reserved, p.unreservable = err == nil, err != nil
	}
	return p.reserved
}

// noRoom is what Reserve returns for a full ring.
var noRoom = [][]byte{}

// Commit sends the first len(bufs) buffers of the last Reserve, built in
// place, and lets the Conn go.
func (c *Conn) Commit(bufs [][]byte) (int, error) {
	defer c.mu.RUnlock()
	p := c.resvPeer
	c.resvPeer = nil
	if p == nil || len(bufs) > len(c.resv) {
		return 0, errors.New("shm: Commit without a Reserve for as many buffers")
	}
	g := p.in.g
	for i, b := range bufs {
		off := g.slotAt(p.entry, int((p.tail+uint64(i))%uint64(g.slots)), p.stride)
		s := p.in.mem[off : off+p.stride : off+p.stride]
		if len(b) == 0 || len(b) > p.maxDgram || &b[:1][0] != &s[slotHeader] {
			return i, fmt.Errorf("shm: Commit of buffer %d: %d bytes not built in the reserved slot", i, len(b))
		}
		c.stamp(s, len(b))
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	p.tail += uint64(len(bufs))
	p.dirty = true
	c.touched = append(c.touched, p)
	c.publish()
	c.shmTX.Add(uint64(len(bufs)))
	return len(bufs), nil
}

// stamp writes a slot's header: the datagram's length and this Conn's
// address.
func (c *Conn) stamp(s []byte, n int) {
	binary.LittleEndian.PutUint32(s[sLen:], uint32(n))
	binary.LittleEndian.PutUint16(s[sPort:], c.srcPort)
	binary.LittleEndian.PutUint16(s[sFamily:], c.srcFam)
	copy(s[sAddr:sAddr+16], c.srcAddr[:])
}

// lookup is peer with a one-entry cache of the last destination.
func (c *Conn) lookup(dst netip.AddrPort, now time.Time) *peer { return c.lookupFor(dst, 0, now) }

// lookupFor is lookup for datagrams of up to size bytes (0: any): a
// destination first reached this way gets a ring whose slots fit them,
// packed that closely.
func (c *Conn) lookupFor(dst netip.AddrPort, size int, now time.Time) *peer {
	p := c.last
	if p == nil || p.addr != dst || now.Sub(p.checked) >= recheck {
		p = c.peer(dst, size, now)
		c.last = p
	}
	return p
}

// peer returns the writer's view of dst, looking its inbox up when it has
// not been checked for a while.
func (c *Conn) peer(dst netip.AddrPort, size int, now time.Time) *peer {
	p := c.peers[dst]
	if p == nil {
		p = &peer{addr: dst, fd: -1, bell: -1, sizeHint: size}
		c.peers[dst] = p
		c.peerList = append(c.peerList, p)
	} else if now.Sub(p.checked) < recheck {
		return p
	}
	p.checked = now
	if p.in.mem != nil {
		if c.stillThere(p) {
			return p
		}
		c.detach(p)
	}
	c.attach(p)
	return p
}

// stillThere tells whether p's inbox is still its address's and its owner
// alive.
func (c *Conn) stillThere(p *peer) bool {
	var st unix.Stat_t
	if unix.Stat(filepath.Join(c.opts.Dir, inboxName(c.ns, p.addr)), &st) != nil || st.Ino != p.ino {
		return false
	}
	return !ownerGone(p.fd)
}

// ownerGone tells whether nobody holds the inbox open behind fd any more.
func ownerGone(fd int) bool {
	if unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) != nil {
		return false
	}
	_ = unix.Flock(fd, unix.LOCK_UN)
	return true
}

// attach maps dst's inbox and claims an entry in it, if it has one free.
func (c *Conn) attach(p *peer) {
	path := filepath.Join(c.opts.Dir, inboxName(c.ns, p.addr))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Size < headerSize || ownerGone(fd) {
		unix.Close(fd)
		return
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return
	}
	r := region{mem: mem}
	le := binary.LittleEndian
	r.g = geometry{producers: int(le.Uint32(mem[hProducers:])), slots: int(le.Uint32(mem[hSlots:])),
		stride: int(le.Uint32(mem[hStride:])), maxDgram: int(le.Uint32(mem[hMaxDgram:]))}
	if r.u64(hMagic).Load() != magic || le.Uint32(mem[hVersion:]) != version || !r.g.valid(st.Size) {
		unix.Munmap(mem)
		unix.Close(fd)
		return
	}
	bell, err := unix.Open(bellPath(path, le.Uint64(mem[hToken:])), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return
	}
	for e := 0; e < r.g.producers; e++ {
		base := r.g.entry(e)
		if r.u64(base+eToken).Load() != 0 || !r.u64(base+eToken).CompareAndSwap(0, c.token) {
			continue
		}
		r.u32(base + ePID).Store(uint32(os.Getpid()))
		// Before the first datagram, which the reader finds by the tail.
		stride := r.g.strideFor(p.sizeHint)
		r.u32(base + eStride).Store(uint32(stride))
		r.u32(base + eState).Store(entryOpen)
		p.tail = r.u64(base + eTail).Load()
		p.head = r.u64(base + eHead).Load()
		r.u64(hAttachGen).Add(1)
		p.in, p.fd, p.ino, p.entry, p.bell = r, fd, st.Ino, e, bell
		p.stride, p.maxDgram = stride, r.g.room(stride)
		p.reserved, p.unreservable = false, false
		c.npeers.Add(1)
		return
	}
	// Every entry is taken: this destination goes over UDP.
	unix.Close(bell)
	unix.Munmap(mem)
	unix.Close(fd)
}

// detach gives p's entry back and unmaps its inbox.
func (c *Conn) detach(p *peer) {
	if p.in.mem == nil {
		return
	}
	base := p.in.g.entry(p.entry)
	if p.in.u64(base+eToken).Load() == c.token {
		p.in.u32(base + eState).Store(entryClosed)
	}
	c.unmap(p)
}

// unmap forgets p's inbox.
func (c *Conn) unmap(p *peer) {
	if p.in.mem == nil {
		return
	}
	c.owedMu.Lock()
	defer c.owedMu.Unlock()
	p.owed = false
	p.epoch++
	unix.Munmap(p.in.mem)
	unix.Close(p.fd)
	unix.Close(p.bell)
	p.in, p.fd, p.bell = region{}, -1, -1
	c.npeers.Add(-1)
	if c.last == p {
		c.last = nil
	}
}
