package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/transport/internal/netns"
)

// Message is transport.Message.
type Message = transport.Message

var _ transport.PacketConn = (*Conn)(nil)

// Conn is a UDP endpoint whose datagrams move through an AF_XDP socket.
//
// A read points each message's Buf at the datagram inside the Conn's own
// memory (the UMEM frame it arrived in, or the buffer of a datagram that
// came through the kernel), valid until the next read on the Conn and not
// after Close. A Conn is not safe for concurrent ReadBatch calls, nor for
// concurrent WriteBatch calls; one reader and one writer may run at the
// same time, and SetReadDeadline, Stats and Close may be called from any
// goroutine.
type Conn struct {
	dev    *device
	local  netip.AddrPort
	ip4    [4]byte
	port   uint16
	batch  int
	udpSum bool
	udpfd  int // kernel socket: reserves the port, carries the slow path
	evfd   int // signalled when another Conn's reader hands datagrams over
	epoch  time.Time

	// A blocked reader parks in the Go runtime's network poller on an
	// epoll instance that watches the AF_XDP socket, the eventfd and
	// the kernel socket; the poller's deadlines and Close wake it.
	ep     *os.File
	rc     syscall.RawConn
	readFn func(fd uintptr) bool

	closed  atomic.Bool
	use     sync.RWMutex // read-held by calls, write-held by Close
	waiting atomic.Bool  // the reader is about to park

	// Reader state. q is guarded by the device's RX lock, held is
	// touched by the reader and, after Close, by the device.
	q        rxQueue
	held     []uint64
	wake     []*Conn
	evbuf    [8]byte
	slow     slowReader
	lastSlow time.Duration // since epoch
	rms      []Message
	rn       int
	rerr     error

	// Writer state.
	hdr      header
	ipID     uint16
	hops     map[netip.Addr]hop
	lastAddr netip.Addr
	lastHop  hop
	lastMiss time.Duration
	pend     []int
	pendMAC  [][6]byte
	slowSA   unix.SockaddrInet4
	wpfd     [1]unix.PollFd

	rx, tx, slowRX, slowTX, dropped atomic.Uint64
}

// hop is a cached next-hop decision for a destination.
type hop struct {
	mac     [6]byte
	fast    bool
	expires time.Duration // since the Conn's epoch
}

const (
	hopTTL       = time.Second            // how long a next hop is trusted
	missInterval = 5 * time.Millisecond   // least time between neighbour reads after a miss
	maxHops      = 4096                   // destinations cached before the cache starts over
	slowBatch    = 8                      // datagrams per read from the kernel socket
	slowBufSize  = 9216                   // largest datagram read from the kernel socket
	slowInterval = 100 * time.Microsecond // least time between looks at the kernel socket while the ring is busy
	queueMin     = 256                    // least hand-off queue length
)

// Listen opens a Conn on addr, an IPv4 address configured on a network
// interface; port 0 picks a free port. The port is also bound by an
// ordinary UDP socket for the Conn's lifetime: it keeps the port taken and
// carries what cannot take the AF_XDP path. Listen must run in the network
// namespace of the interface; the Conn can be used from any thread after.
func Listen(addr netip.AddrPort, opts Options) (*Conn, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ip := addr.Addr().Unmap()
	if !ip.Is4() {
		return nil, fmt.Errorf("afxdp: address %s: not IPv4, which AF_XDP here needs", addr.Addr())
	}
	if ip.IsUnspecified() {
		return nil, errors.New("afxdp: address 0.0.0.0: want the address of the interface to use")
	}
	ifc, err := interfaceOf(ip)
	if err != nil {
		return nil, err
	}
	if ifc.Flags&net.FlagLoopback != 0 {
		return nil, fmt.Errorf("afxdp: address %s: on loopback (%s), which has no XDP path", ip, ifc.Name)
	}
	if ifc.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("afxdp: interface %s is down: ip link set dev %s up", ifc.Name, ifc.Name)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("afxdp: interface %s: no Ethernet address, which AF_XDP here needs", ifc.Name)
	}
	frameSize, err := frameSizeFor(opts.FrameSize, ifc.MTU, ifc.Name)
	if err != nil {
		return nil, err
	}
	udpfd, port, err := bindUDP(ip.As4(), addr.Port())
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(udpfd)
		return nil, fmt.Errorf("afxdp: cannot create an eventfd: %w", err)
	}
	d, err := acquireDevice(devKey{netns: netns.ID(), ifindex: ifc.Index, queue: opts.Queue}, ifc, opts, frameSize)
	if err != nil {
		unix.Close(evfd)
		unix.Close(udpfd)
		return nil, err
	}
	local := netip.AddrPortFrom(ip, port)
	qlen := max(queueMin, 2*opts.Batch)
	c := &Conn{
		dev:     d,
		local:   local,
		ip4:     ip.As4(),
		port:    port,
		batch:   opts.Batch,
		udpSum:  opts.UDPChecksum,
		udpfd:   udpfd,
		evfd:    evfd,
		epoch:   time.Now(),
		q:       newRxQueue(qlen),
		held:    make([]uint64, 0, opts.Batch),
		slow:    newSlowReader(slowBatch, slowBufSize),
		hdr:     newHeader(d.mac, local),
		hops:    make(map[netip.Addr]hop),
		pend:    make([]int, 0, opts.Batch),
		pendMAC: make([][6]byte, 0, opts.Batch),
	}
	c.wpfd[0] = unix.PollFd{Fd: int32(udpfd), Events: unix.POLLOUT}
	c.readFn = c.readOrPark
	if err := c.openPoller(); err != nil {
		unix.Close(evfd)
		unix.Close(udpfd)
		releaseDevice(d)
		return nil, err
	}
	if err := d.add(c); err != nil {
		c.ep.Close()
		unix.Close(evfd)
		unix.Close(udpfd)
		releaseDevice(d)
		return nil, err
	}
	return c, nil
}

// openPoller creates the epoll instance a blocked reader waits on and
// hands it to the Go runtime's poller.
func (c *Conn) openPoller() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("afxdp: cannot create an epoll instance: %w", err)
	}
	for _, fd := range []int{c.dev.x.fd, c.evfd, c.udpfd} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(epfd)
			return fmt.Errorf("afxdp: cannot watch a socket with epoll: %w", err)
		}
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("afxdp: cannot make the epoll instance non-blocking: %w", err)
	}
	c.ep = os.NewFile(uintptr(epfd), "afxdp-epoll")
	// Deadlines work only on files the runtime polls: this checks it.
	if err := c.ep.SetReadDeadline(time.Time{}); err != nil {
		c.ep.Close()
		return fmt.Errorf("afxdp: the Go runtime cannot poll an epoll instance: %w", err)
	}
	rc, err := c.ep.SyscallConn()
	if err != nil {
		c.ep.Close()
		return fmt.Errorf("afxdp: raw access to the epoll instance: %w", err)
	}
	c.rc = rc
	return nil
}

// Supported reports whether this kernel and process can use AF_XDP: nil,
// or why not.
func Supported() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("afxdp: AF_XDP socket: %w (needs Linux 5.9+ with CONFIG_XDP_SOCKETS, and CAP_NET_RAW)", err)
	}
	unix.Close(fd)
	if err := probeProgram(); err != nil {
		return fmt.Errorf("afxdp: cannot load an XDP program: %w (needs CAP_BPF and CAP_NET_ADMIN, or root)", err)
	}
	return nil
}

func interfaceOf(ip netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("afxdp: cannot list network interfaces: %w", err)
	}
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("afxdp: address %s: %w", ip, ErrNoInterface)
}

// frameSizeFor picks the smallest frame size from want up that holds a
// whole Ethernet frame of the MTU after the kernel's headroom.
func frameSizeFor(want, mtu int, name string) (int, error) {
	page := unix.Getpagesize()
	if want > page {
		return 0, fmt.Errorf("afxdp: frame size %d: above the page size %d", want, page)
	}
	for fs := want; fs <= page; fs <<= 1 {
		if fs-unix.XDP_PACKET_HEADROOM >= mtu+ethHeaderLen {
			return fs, nil
		}
	}
	most := page - unix.XDP_PACKET_HEADROOM - ethHeaderLen
	return 0, fmt.Errorf("afxdp: %s MTU %d: above the %d an AF_XDP frame holds: lower it (ip link set dev %s mtu %d)", name, mtu, most, name, most)
}

func bindUDP(ip [4]byte, port uint16) (int, uint16, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("afxdp: cannot open a UDP socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: ip}); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("afxdp: binding UDP %s: %w (pick a free port, or 0)", netip.AddrPortFrom(netip.AddrFrom4(ip), port), err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("afxdp: cannot read the bound UDP port: %w", err)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		unix.Close(fd)
		return -1, 0, errors.New("afxdp: the UDP socket is not bound to an IPv4 address")
	}
	// The slow path takes bursts too; failing to grow the buffers only
	// costs drops that the protocol recovers from.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	return fd, uint16(in4.Port), nil
}

// LocalAddr is the address the Conn is bound to.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Batch is the most datagrams moved per call.
func (c *Conn) Batch() int { return c.batch }

// Coalesced is 0: datagrams are never coalesced on this path.
func (c *Conn) Coalesced() uint64 { return 0 }

// Interface is the name of the interface the Conn uses.
func (c *Conn) Interface() string { return c.dev.name }

// Mode is how the XDP program is attached: Native or Generic.
func (c *Conn) Mode() Mode { return c.dev.mode }

// ZeroCopy reports whether the socket runs in zero-copy mode (else the
// kernel copies between the device and the UMEM).
func (c *Conn) ZeroCopy() bool { return c.dev.x.zeroCopy }

// Stats returns the Conn's counters.
func (c *Conn) Stats() Stats {
	s := Stats{
		RX:      c.rx.Load(),
		TX:      c.tx.Load(),
		SlowRX:  c.slowRX.Load(),
		SlowTX:  c.slowTX.Load(),
		Dropped: c.dropped.Load(),
	}
	if c.use.TryRLock() {
		if !c.closed.Load() {
			s.DeviceDropped = c.dev.kernelDropped()
		}
		c.use.RUnlock()
	}
	return s
}

var evOne = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// signal wakes the reader if it is parked. The caller makes sure the
// eventfd is open: it holds the device's RX lock with c registered.
func (c *Conn) signal() { _, _ = unix.Write(c.evfd, evOne[:]) }

// SetReadDeadline sets the deadline of reads (zero: none); a blocked read
// wakes to look at it.
func (c *Conn) SetReadDeadline(t time.Time) error {
	return c.closedErr(c.ep.SetReadDeadline(t))
}

// closedErr reports the poller's errors after Close as net.ErrClosed,
// like a socket's.
func (c *Conn) closedErr(err error) error {
	if err != nil && (c.closed.Load() || errors.Is(err, os.ErrClosed)) {
		return net.ErrClosed
	}
	return err
}

// Close closes the Conn: a blocked read returns net.ErrClosed, as do all
// later calls. The last Conn of an interface and queue detaches the XDP
// program and frees the socket.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	// Closing the poller's file wakes a parked reader and waits for it
	// to leave the runtime's poller.
	c.ep.Close()
	c.use.Lock()
	defer c.use.Unlock()
	c.dev.remove(c)
	unix.Close(c.evfd)
	unix.Close(c.udpfd)
	releaseDevice(c.dev)
	return nil
}

// ReadBatch waits until at least one datagram arrives or the deadline
// passes (zero: no deadline) and fills ms[:n], one datagram per message.
// On a deadline it returns 0 and os.ErrDeadlineExceeded (for which
// transport.IsTimeout is true); after Close, net.ErrClosed. A deadline set
// by SetReadDeadline while the read waits replaces this one.
func (c *Conn) ReadBatch(ms []Message, deadline time.Time) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	c.use.RLock()
	defer c.use.RUnlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if err := c.ep.SetReadDeadline(deadline); err != nil {
		return 0, c.closedErr(err)
	}
	c.rms, c.rn, c.rerr = ms, 0, nil
	err := c.rc.Read(c.readFn)
	c.rms = nil
	if err != nil {
		return 0, c.closedErr(err)
	}
	return c.rn, c.rerr
}

// readOrPark is the body of a blocking read, run by the runtime's poller:
// it reports true with datagrams (or an error) in c.rn and c.rerr, or
// false to park until the epoll instance signals. Before parking it
// empties every source the epoll instance watches, so that it signals
// again only for something new.
func (c *Conn) readOrPark(uintptr) bool {
	c.waiting.Store(false)
	for {
		if c.closed.Load() {
			c.rerr = net.ErrClosed
			return true
		}
		n, err := c.read(c.rms)
		if n == 0 && err == nil {
			n, err = c.readSlow(c.rms)
		}
		if n > 0 || err != nil {
			c.rn, c.rerr = n, err
			return true
		}
		_, _ = unix.Read(c.evfd, c.evbuf[:])
		c.waiting.Store(true)
		if c.q.count.Load() == 0 {
			return false
		}
		c.waiting.Store(false)
	}
}

// TryReadBatch is ReadBatch without waiting: it returns what has already
// arrived, possibly nothing.
func (c *Conn) TryReadBatch(ms []Message) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	c.use.RLock()
	defer c.use.RUnlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.read(ms)
}

// read returns the frames of the previous read to the fill ring and
// collects what is there without waiting: hand-offs from other Conns'
// readers, the shared RX ring, and now and then the kernel socket.
func (c *Conn) read(ms []Message) (int, error) {
	d := c.dev
	n := 0
	// The kernel socket is looked at now and then, first, so that a
	// busy ring does not starve it; and always before a reader parks.
	if now := time.Since(c.epoch); now-c.lastSlow >= slowInterval {
		c.lastSlow = now
		k, err := c.readSlow(ms[:min(len(ms), slowBatch)])
		if err != nil {
			return 0, err
		}
		n = k
	}
	d.rxMu.Lock()
	if d.closed {
		d.rxMu.Unlock()
		return 0, net.ErrClosed
	}
	for _, f := range c.held {
		d.recycle(f)
	}
	c.held = c.held[:0]
	fast := n
	for n < len(ms) {
		e, ok := c.q.pop()
		if !ok {
			break
		}
		ms[n] = Message{Buf: d.umem[e.off : e.off+uint64(e.n) : e.off+uint64(e.n)], N: e.n, Addr: e.src}
		c.held = append(c.held, e.frame)
		n++
	}
	if n < len(ms) {
		n = d.drain(c, ms, n)
	}
	d.refill()
	d.rxMu.Unlock()
	if n > fast {
		c.rx.Add(uint64(n - fast))
	}
	return n, nil
}

// readSlow reads what the kernel socket holds into ms.
func (c *Conn) readSlow(ms []Message) (int, error) {
	k, err := c.slow.read(c.udpfd, ms)
	if k > 0 {
		c.slowRX.Add(uint64(k))
	}
	return k, err
}

// WriteBatch sends every message in ms, each Buf to its Addr, and returns
// how many were sent. Datagrams whose next hop's MAC address is known go
// through the AF_XDP socket; the rest through the kernel.
func (c *Conn) WriteBatch(ms []Message) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	c.use.RLock()
	defer c.use.RUnlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	now := time.Since(c.epoch)
	sent := 0
	idx, macs := c.pend[:0], c.pendMAC[:0]
	flush := func() error {
		if len(idx) == 0 {
			return nil
		}
		k, err := c.dev.transmit(c, ms, idx, macs)
		sent += k
		c.tx.Add(uint64(k))
		idx, macs = idx[:0], macs[:0]
		return err
	}
	for i := range ms {
		m := &ms[i]
		mac, fast, err := c.nextHop(m.Addr, len(m.Buf), now)
		if err != nil {
			if ferr := flush(); ferr != nil {
				return sent, ferr
			}
			return sent, err
		}
		if !fast {
			// Keep the order: what is pending leaves first.
			if err := flush(); err != nil {
				return sent, err
			}
			if err := c.slowSend(m); err != nil {
				return sent, err
			}
			sent++
			continue
		}
		idx = append(idx, i)
		macs = append(macs, mac)
		if len(idx) == c.batch {
			if err := flush(); err != nil {
				return sent, err
			}
		}
	}
	err := flush()
	c.pend, c.pendMAC = idx[:0], macs[:0]
	return sent, err
}

// nextHop decides how a datagram of n bytes to dst leaves: through the
// socket to the returned MAC address (fast) or through the kernel.
func (c *Conn) nextHop(dst netip.AddrPort, n int, now time.Duration) ([6]byte, bool, error) {
	a := dst.Addr().Unmap()
	if !a.Is4() {
		return [6]byte{}, false, fmt.Errorf("afxdp: cannot send to %s: only IPv4 destinations are supported", dst)
	}
	if n+ipv4HeaderLen+udpHeaderLen > c.dev.mtu {
		return [6]byte{}, false, nil
	}
	if a == c.lastAddr && now < c.lastHop.expires {
		return c.lastHop.mac, c.lastHop.fast, nil
	}
	h, ok := c.hops[a]
	if !ok || now >= h.expires {
		// A destination not known is looked up at most every few
		// milliseconds while lookups miss; a known one whose entry
		// expired is looked up again at once.
		if !ok && c.lastMiss != 0 && now-c.lastMiss < missInterval {
			return [6]byte{}, false, nil
		}
		h, ok = c.resolve(a, now)
		if !ok {
			c.lastMiss = now
			delete(c.hops, a)
			if a == c.lastAddr {
				c.lastAddr = netip.Addr{}
			}
			return [6]byte{}, false, nil
		}
		if len(c.hops) >= maxHops {
			clear(c.hops)
		}
		c.hops[a] = h
	}
	c.lastAddr, c.lastHop = a, h
	return h.mac, h.fast, nil
}

// resolve asks the kernel for the route to a and its next hop's MAC
// address. It reports false when the neighbour is not known yet: the
// datagram goes through the kernel, which resolves it.
func (c *Conn) resolve(a netip.Addr, now time.Duration) (hop, bool) {
	d := c.dev
	slow := hop{expires: now + hopTTL}
	if a.IsLoopback() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return slow, true
	}
	rt, err := d.nl.routeTo(a.As4())
	if err != nil {
		return hop{}, false
	}
	if rt.typ != unix.RTN_UNICAST || rt.oif != d.ifindex {
		// Local, broadcast, or out of another interface.
		return slow, true
	}
	next := a.As4()
	if rt.via {
		next = rt.gw
	}
	mac, ok, err := d.nl.neighbour(d.ifindex, next)
	if err != nil || !ok {
		return hop{}, false
	}
	return hop{mac: mac, fast: true, expires: now + hopTTL}, true
}

// slowSend sends one datagram through the kernel socket, waiting for room
// in its buffer if need be.
func (c *Conn) slowSend(m *Message) error {
	c.slowSA.Port = int(m.Addr.Port())
	c.slowSA.Addr = m.Addr.Addr().Unmap().As4()
	for {
		err := unix.Sendto(c.udpfd, m.Buf, 0, &c.slowSA)
		switch err {
		case nil:
			c.slowTX.Add(1)
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			c.wpfd[0].Revents = 0
			if n, perr := unix.Poll(c.wpfd[:], 1000); perr != nil && perr != unix.EINTR {
				return fmt.Errorf("afxdp: waiting to send to %s: %w", m.Addr, perr)
			} else if n == 0 {
				return fmt.Errorf("afxdp: datagram to %s: the kernel socket took none for 1s: check the route", m.Addr)
			}
			continue
		}
		return fmt.Errorf("afxdp: sending %d bytes to %s through the kernel: %w", len(m.Buf), m.Addr, err)
	}
}

// slowReader reads datagrams from the kernel socket with recvmmsg into
// buffers of its own.
type slowReader struct {
	bufs  [][]byte
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
}

func newSlowReader(n, size int) slowReader {
	s := slowReader{
		bufs:  make([][]byte, n),
		hdrs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet4, n),
	}
	for i := range s.bufs {
		s.bufs[i] = make([]byte, size)
		s.iovs[i].Base = &s.bufs[i][0]
		s.iovs[i].SetLen(size)
		s.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		s.hdrs[i].Hdr.Iov = &s.iovs[i]
		s.hdrs[i].Hdr.SetIovlen(1)
	}
	return s
}

// read takes what the socket holds without waiting. A datagram longer
// than the buffers is cut.
func (s *slowReader) read(fd int, ms []Message) (int, error) {
	k := min(len(ms), len(s.hdrs))
	if k == 0 {
		return 0, nil
	}
	for i := 0; i < k; i++ {
		s.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		s.hdrs[i].Hdr.Flags = 0
		s.hdrs[i].Len = 0
	}
	var r uintptr
	for {
		var e unix.Errno
		r, _, e = unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&s.hdrs[0])), uintptr(k), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			return 0, nil
		}
		if e != 0 {
			return 0, fmt.Errorf("afxdp: reading the kernel UDP socket: %w", e)
		}
		break
	}
	for i := 0; i < int(r); i++ {
		n := int(s.hdrs[i].Len)
		if n > len(s.bufs[i]) {
			n = len(s.bufs[i])
		}
		nm := &s.names[i]
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&nm.Port))[:])
		ms[i] = Message{Buf: s.bufs[i][:n:n], N: n, Addr: netip.AddrPortFrom(netip.AddrFrom4(nm.Addr), port)}
	}
	return int(r), nil
}
