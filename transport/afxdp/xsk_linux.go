package afxdp

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bindRetry is how long a bind to a busy queue is retried.
const bindRetry = 2 * time.Second

// xsk is an AF_XDP socket with its UMEM registered and its four rings
// mapped.
type xsk struct {
	fd       int
	zeroCopy bool
	fill     addrRing
	comp     addrRing
	rx       descRing
	tx       descRing
	maps     [][]byte
}

func sockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// openXSK creates an AF_XDP socket over umem (frames of frameSize bytes),
// with rings of ringSize entries each, and binds it to the queue of the
// interface with bind flags (XDP_COPY or XDP_ZEROCOPY, XDP_USE_NEED_WAKEUP).
func openXSK(ifindex, queue int, umem []byte, frameSize, ringSize uint32, flags uint16) (_ *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open an AF_XDP socket: %w", err)
	}
	x := &xsk{fd: fd}
	defer func() {
		if err != nil {
			x.close()
		}
	}()
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(umem)))),
		Len:  uint64(len(umem)),
		Size: frameSize,
	}
	if err := sockoptPtr(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("registering %d bytes of UMEM: %w (raise ulimit -l, or grant CAP_IPC_LOCK)", len(umem), err)
	}
	for _, o := range []struct {
		opt  int
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, "fill"},
		{unix.XDP_UMEM_COMPLETION_RING, "completion"},
		{unix.XDP_RX_RING, "RX"},
		{unix.XDP_TX_RING, "TX"},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, int(ringSize)); err != nil {
			return nil, fmt.Errorf("cannot size the %s ring to %d entries: %w", o.name, ringSize, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("cannot read the ring offsets: %w", err)
	}
	mapRing := func(o unix.XDPRingOffset, pgoff int64, entry uint64, name string) ([]byte, error) {
		m, err := unix.Mmap(fd, pgoff, int(o.Desc+uint64(ringSize)*entry), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("cannot map the %s ring: %w", name, err)
		}
		x.maps = append(x.maps, m)
		return m, nil
	}
	m, err := mapRing(off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8, "fill")
	if err != nil {
		return nil, err
	}
	x.fill = addrRing{ringAt(m, off.Fr.Producer, off.Fr.Consumer, off.Fr.Flags, ringSize), addrsAt(m, off.Fr.Desc, ringSize)}
	if m, err = mapRing(off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, 8, "completion"); err != nil {
		return nil, err
	}
	x.comp = addrRing{ringAt(m, off.Cr.Producer, off.Cr.Consumer, off.Cr.Flags, ringSize), addrsAt(m, off.Cr.Desc, ringSize)}
	if m, err = mapRing(off.Rx, unix.XDP_PGOFF_RX_RING, uint64(unsafe.Sizeof(xdpDesc{})), "RX"); err != nil {
		return nil, err
	}
	x.rx = descRing{ringAt(m, off.Rx.Producer, off.Rx.Consumer, off.Rx.Flags, ringSize), descsAt(m, off.Rx.Desc, ringSize)}
	if m, err = mapRing(off.Tx, unix.XDP_PGOFF_TX_RING, uint64(unsafe.Sizeof(xdpDesc{})), "TX"); err != nil {
		return nil, err
	}
	x.tx = descRing{ringAt(m, off.Tx.Producer, off.Tx.Consumer, off.Tx.Flags, ringSize), descsAt(m, off.Tx.Desc, ringSize)}

	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	// The kernel lets go of a closed socket's queue a little after the
	// close returns: a queue that is busy just after a teardown is
	// retried for a while.
	for start := time.Now(); ; {
		err := unix.Bind(fd, sa)
		if err == nil {
			break
		}
		if err == unix.EBUSY && time.Since(start) < bindRetry {
			time.Sleep(time.Millisecond)
			continue
		}
		if err == unix.EBUSY {
			return nil, fmt.Errorf("cannot bind the AF_XDP socket to queue %d: %w (another AF_XDP socket holds it)", queue, err)
		}
		return nil, fmt.Errorf("cannot bind the AF_XDP socket to queue %d: %w", queue, err)
	}
	// Copy mode sends at most this many packets per wakeup (32 unless
	// raised, on kernels that allow it): a whole ring's worth lets one
	// wakeup send a batch.
	_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(ringSize))
	var opts uint32
	if getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)) == nil {
		x.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
	// Copy mode builds a socket buffer per sent packet, charged to the
	// send buffer until the device is done with it; room for a few
	// batches keeps the transmit ring moving.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	}
	return x, nil
}

func (x *xsk) close() {
	for _, m := range x.maps {
		_ = unix.Munmap(m)
	}
	x.maps = nil
	if x.fd >= 0 {
		unix.Close(x.fd)
		x.fd = -1
	}
}

// kick asks the kernel to look at the TX ring (and, in copy mode, to send
// what is on it). EAGAIN, EBUSY and ENOBUFS mean "try again" and are
// returned as they are. Like wakeRX it never blocks, so it skips the
// runtime's system-call bookkeeping (which wakes its monitor thread).
func (x *xsk) kick() error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// wakeRX asks the driver to look at the fill ring again.
func (x *xsk) wakeRX() {
	_, _, _ = unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

func (x *xsk) stats() (unix.XDPStatistics, error) {
	var s unix.XDPStatistics
	err := getsockoptPtr(x.fd, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&s), unsafe.Sizeof(s))
	return s, err
}

func retryable(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR)
}

// umemPool keeps UMEM areas of torn-down devices mapped (their pages
// released) and hands them to the next device of the same size. A slice a
// read handed out keeps pointing at readable memory after Close, so a
// late use of one reads stale bytes instead of faulting, and repeated
// Listen and Close do not grow the address space.
var umemPool struct {
	sync.Mutex
	free map[int][][]byte
}

func getUMEM(size int) ([]byte, error) {
	umemPool.Lock()
	if l := umemPool.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		umemPool.free[size] = l[:len(l)-1]
		umemPool.Unlock()
		return b, nil
	}
	umemPool.Unlock()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("cannot map %d bytes of UMEM: %w", size, err)
	}
	return b, nil
}

func putUMEM(b []byte) {
	_ = unix.Madvise(b, unix.MADV_DONTNEED)
	umemPool.Lock()
	if umemPool.free == nil {
		umemPool.free = make(map[int][][]byte)
	}
	umemPool.free[len(b)] = append(umemPool.free[len(b)], b)
	umemPool.Unlock()
}
