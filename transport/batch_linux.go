//go:build linux

package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchIO issues recvmmsg/sendmmsg on the socket through RawConn so that
// the poller parks the goroutine while the socket is not ready. The closures
// handed to RawConn are bound once, so a call allocates nothing.
type batchIO struct {
	raw syscall.RawConn

	rhdrs     []unix.Mmsghdr
	riov      []unix.Iovec
	rnames    []unix.RawSockaddrInet6
	rn        int
	rerr      error
	readFn    func(fd uintptr) bool
	tryReadFn func(fd uintptr)

	// With UDP_GRO the kernel may deliver several datagrams of one sender
	// as one buffer with their segment size in a control message. They are
	// read into gbufs and handed out from pending, a datagram per message
	// pointing into gbufs, before the next system call.
	gro     bool
	gbufs   [][]byte
	rctl    [][64]byte
	pending []segment
	next    int
	merged  atomic.Uint64 // datagrams that arrived in coalesced buffers

	whdrs   []unix.Mmsghdr
	wiov    []unix.Iovec
	wnames  []unix.RawSockaddrInet6
	wctl    [][32]byte // one control message (UDP_SEGMENT) per header
	wgroup  []int      // messages carried by each header
	gso     atomic.Bool
	wcount  int
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// segment is one datagram of a coalesced read, waiting to be handed out.
type segment struct {
	buf  []byte
	addr netip.AddrPort
}

// groBuffers is how many coalesced buffers one read takes; each holds up
// to 64 KiB, so a read still moves up to thousands of datagrams.
const groBuffers = 16

// groBufSize holds the largest coalesced datagram (a 16-bit IP length).
const groBufSize = 1 << 16

func (b *batchIO) init(udp *net.UDPConn, size int, gso, gro bool) error {
	raw, err := udp.SyscallConn()
	if err != nil {
		return fmt.Errorf("transport: raw socket access: %w", err)
	}
	b.raw = raw
	b.rhdrs = make([]unix.Mmsghdr, size)
	b.riov = make([]unix.Iovec, size)
	b.rnames = make([]unix.RawSockaddrInet6, size)
	b.whdrs = make([]unix.Mmsghdr, size)
	b.wiov = make([]unix.Iovec, size)
	b.wnames = make([]unix.RawSockaddrInet6, size)
	b.wctl = make([][32]byte, size)
	b.wgroup = make([]int, size)
	b.gso.Store(gso)
	if gro {
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
		}); err == nil && serr == nil {
			// Without the option (an old kernel) reads stay one datagram
			// per message.
			b.gro = true
			n := min(size, groBuffers)
			b.gbufs = make([][]byte, n)
			for i := range b.gbufs {
				b.gbufs[i] = make([]byte, groBufSize)
			}
			b.rctl = make([][64]byte, n)
			b.pending = make([]segment, 0, n*maxGSOSegments)
		}
	}
	b.readFn = b.doRead
	b.tryReadFn = b.tryRead
	b.writeFn = b.doWrite
	return nil
}

func (b *batchIO) read(ms []Message, nonblocking bool) (int, error) {
	if b.gro {
		return b.readGRO(ms, nonblocking)
	}
	n := min(len(ms), len(b.rhdrs))
	for i := 0; i < n; i++ {
		buf := ms[i].Buf[:cap(ms[i].Buf)]
		if len(buf) == 0 {
			return 0, errors.New("transport: read buffer with zero capacity")
		}
		b.setRead(i, buf, nil)
	}
	if err := b.recv(n, nonblocking); err != nil {
		return 0, err
	}
	got := b.rn
	for i := 0; i < got; i++ {
		ms[i].N = int(b.rhdrs[i].Len)
		ms[i].Buf = ms[i].Buf[:ms[i].N]
		ms[i].Addr = sockaddrToAddrPort(&b.rnames[i])
	}
	return got, nil
}

// setRead points read header i at buf and, if not nil, at ctl for control
// messages.
func (b *batchIO) setRead(i int, buf, ctl []byte) {
	b.riov[i].Base = &buf[0]
	b.riov[i].SetLen(len(buf))
	h := &b.rhdrs[i].Hdr
	h.Name = (*byte)(unsafe.Pointer(&b.rnames[i]))
	h.Namelen = uint32(unsafe.Sizeof(b.rnames[i]))
	h.Iov = &b.riov[i]
	h.SetIovlen(1)
	if ctl != nil {
		h.Control = &ctl[0]
	} else {
		h.Control = nil
	}
	h.SetControllen(len(ctl))
	h.Flags = 0
}

// recv runs recvmmsg on the first n read headers and leaves the count of
// datagrams in b.rn.
func (b *batchIO) recv(n int, nonblocking bool) error {
	b.rn, b.rerr = n, nil
	if nonblocking {
		// Control runs the call once, whatever the deadline: the
		// EAGAIN of an empty socket leaves rn as it was, so reset it.
		if err := b.raw.Control(b.tryReadFn); err != nil {
			return err
		}
	} else if err := b.raw.Read(b.readFn); err != nil {
		return err
	}
	return b.rerr
}

// readGRO hands out pending datagrams first; only when none are left does
// it read, into the coalescing buffers, and split what arrived.
// The messages' own buffers are not used (an empty datagram leaves one
// with no capacity).
func (b *batchIO) readGRO(ms []Message, nonblocking bool) (int, error) {
	if b.next == len(b.pending) {
		b.pending, b.next = b.pending[:0], 0
		n := len(b.gbufs)
		for i := 0; i < n; i++ {
			b.setRead(i, b.gbufs[i], b.rctl[i][:])
		}
		if err := b.recv(n, nonblocking); err != nil {
			return 0, err
		}
		for i := 0; i < b.rn; i++ {
			h := &b.rhdrs[i]
			total := int(h.Len)
			addr := sockaddrToAddrPort(&b.rnames[i])
			var merged int
			b.pending, merged = splitCoalesced(b.pending, b.gbufs[i][:total], addr, groSegmentSize(b.rctl[i][:h.Hdr.Controllen]))
			b.merged.Add(uint64(merged))
		}
	}
	got := 0
	for got < len(ms) && b.next < len(b.pending) {
		// No copy: the message points at the datagram in the coalescing
		// buffer, capped so that re-slicing cannot reach its neighbours.
		p := &b.pending[b.next]
		m := &ms[got]
		m.Buf = p.buf[:len(p.buf):len(p.buf)]
		m.N = len(p.buf)
		m.Addr = p.addr
		b.next++
		got++
	}
	return got, nil
}

// splitCoalesced appends to pending the datagrams of one read: data cut
// into segments of seg bytes (the last may be shorter), or data whole when
// seg does not describe a split of it; an empty read is one empty datagram.
// It returns how many datagrams arrived coalesced (0 for a single one).
func splitCoalesced(pending []segment, data []byte, addr netip.AddrPort, seg int) ([]segment, int) {
	total := len(data)
	if seg <= 0 || seg > total {
		seg = total
	}
	if total == 0 {
		return append(pending, segment{buf: data, addr: addr}), 0
	}
	for off := 0; off < total; off += seg {
		pending = append(pending, segment{buf: data[off:min(off+seg, total)], addr: addr})
	}
	if seg < total {
		return pending, (total + seg - 1) / seg
	}
	return pending, 0
}

// groSegmentSize returns the segment size of a coalesced read from its
// control messages, or 0 if there is none.
func groSegmentSize(ctl []byte) int {
	for len(ctl) >= unix.SizeofCmsghdr {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		l := int(cm.Len)
		if l < unix.SizeofCmsghdr || l > len(ctl) {
			return 0
		}
		if cm.Level == unix.SOL_UDP && cm.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			// The kernel reports the segment size as an int.
			return int(*(*int32)(unsafe.Pointer(&ctl[unix.CmsgLen(0)])))
		}
		ctl = ctl[min(len(ctl), unix.CmsgSpace(l-unix.CmsgLen(0))):]
	}
	return 0
}

func (b *batchIO) tryRead(fd uintptr) {
	if !b.doRead(fd) {
		b.rn = 0
	}
}

// doRead and doWrite never block (MSG_DONTWAIT; the poller waits), so
// they skip the runtime's system-call bookkeeping: with it, every call
// woke the runtime's monitor thread whenever the process had been idle,
// a context switch or two per batch.
func (b *batchIO) doRead(fd uintptr) bool {
	r, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.rhdrs[0])), uintptr(b.rn), unix.MSG_DONTWAIT, 0, 0)
	if errno == unix.EAGAIN || errno == unix.EWOULDBLOCK {
		return false
	}
	if errno == unix.EINTR {
		return false
	}
	if errno != 0 {
		b.rn, b.rerr = 0, fmt.Errorf("transport: recvmmsg: %w", errno)
		return true
	}
	b.rn = int(r)
	return true
}

// maxGSOSegments and maxGSOBytes bound one UDP_SEGMENT send (the kernel's
// UDP_MAX_SEGMENTS and the 64 KiB datagram limit).
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65000
)

// write hands up to a batch of messages to sendmmsg. With GSO, a run of
// consecutive messages to one address with equal sizes (the last may be
// shorter) goes as one UDP_SEGMENT send: the kernel cuts it into the same
// datagrams after a single trip through the stack, which is most of the
// cost of a small datagram.
func (b *batchIO) write(ms []Message) (int, error) {
	hdrs, used := 0, 0
	gso := b.gso.Load()
	for used < len(ms) && hdrs < len(b.whdrs) && used < len(b.wiov) {
		first := used
		size := len(ms[first].Buf)
		count := 1
		if gso && size > 0 {
			total := size
			for first+count < len(ms) && used+count < len(b.wiov) && count < maxGSOSegments {
				next := &ms[first+count]
				n := len(next.Buf)
				if next.Addr != ms[first].Addr || n == 0 || n > size || total+n > maxGSOBytes {
					break
				}
				total += n
				count++
				if n < size {
					break // a shorter datagram ends the run
				}
			}
		}
		for i := 0; i < count; i++ {
			buf := ms[first+i].Buf
			iov := &b.wiov[used+i]
			if len(buf) == 0 {
				iov.Base = nil
			} else {
				iov.Base = &buf[0]
			}
			iov.SetLen(len(buf))
		}
		namelen, err := addrPortToSockaddr(ms[first].Addr, &b.wnames[hdrs])
		if err != nil {
			if hdrs == 0 {
				return 0, err
			}
			break
		}
		h := &b.whdrs[hdrs].Hdr
		h.Name = (*byte)(unsafe.Pointer(&b.wnames[hdrs]))
		h.Namelen = namelen
		h.Iov = &b.wiov[used]
		h.SetIovlen(count)
		if count > 1 {
			ctl := b.wctl[hdrs][:]
			cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
			cm.Level = unix.SOL_UDP
			cm.Type = unix.UDP_SEGMENT
			cm.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&ctl[unix.CmsgLen(0)])) = uint16(size)
			h.Control = &ctl[0]
			h.SetControllen(unix.CmsgSpace(2))
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		h.Flags = 0
		b.wgroup[hdrs] = count
		hdrs++
		used += count
	}
	b.wcount, b.wn, b.werr = hdrs, 0, nil
	if err := b.raw.Write(b.writeFn); err != nil {
		return 0, err
	}
	if b.werr != nil && gso && (errors.Is(b.werr, unix.EINVAL) || errors.Is(b.werr, unix.EIO)) {
		// The path cannot segment (a datagram larger than the device
		// MTU, or no GSO support): send one datagram per message from
		// now on.
		b.gso.Store(false)
		return 0, nil
	}
	sent := 0
	for i := 0; i < b.wn; i++ {
		sent += b.wgroup[i]
	}
	return sent, b.werr
}

func (b *batchIO) doWrite(fd uintptr) bool {
	r, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.whdrs[0])), uintptr(b.wcount), unix.MSG_DONTWAIT, 0, 0)
	if errno == unix.EAGAIN || errno == unix.EWOULDBLOCK || errno == unix.EINTR {
		return false
	}
	if errno != 0 {
		if errno == unix.ECONNREFUSED || errno == unix.EHOSTUNREACH || errno == unix.ENETUNREACH {
			// An ICMP error from an earlier datagram: UDP is best effort
			// and the protocol retransmits, so skip the datagram at the
			// head and carry on rather than failing the whole batch.
			b.wn = 1
			return true
		}
		b.wn, b.werr = 0, fmt.Errorf("transport: sendmmsg: %w", errno)
		return true
	}
	b.wn = int(r)
	return true
}

func (b *batchIO) coalesced() uint64 { return b.merged.Load() }

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}

func addrPortToSockaddr(ap netip.AddrPort, sa *unix.RawSockaddrInet6) (uint32, error) {
	addr := ap.Addr()
	if !addr.IsValid() {
		return 0, errors.New("transport: write to an invalid address")
	}
	*sa = unix.RawSockaddrInet6{}
	if addr.Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:], ap.Port())
		sa4.Addr = addr.As4()
		return unix.SizeofSockaddrInet4, nil
	}
	sa.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], ap.Port())
	sa.Addr = addr.As16()
	return unix.SizeofSockaddrInet6, nil
}

// setSocketBuffers asks for size bytes of receive and send buffer. The
// FORCE options pass the net.core.[rw]mem_max cap when the process may
// (CAP_NET_ADMIN); otherwise the capped request is the best there is.
func setSocketBuffers(udp *net.UDPConn, size int) {
	_ = udp.SetReadBuffer(size)
	_ = udp.SetWriteBuffer(size)
	raw, err := udp.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size)
	})
}
