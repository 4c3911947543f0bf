package afxdp

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// devKey names an interface's receive queue; interface indexes repeat
// across network namespaces, so the namespace is part of the name.
type devKey struct {
	netns   uint64
	ifindex int
	queue   int
}

// device is what the Conns on one interface and queue share: the UMEM,
// the AF_XDP socket and its rings, the XDP program and its maps. The RX
// lock guards the RX and fill rings and the Conns' hand-off queues; the TX
// lock guards the TX and completion rings and the free transmit frames.
type device struct {
	key       devKey
	refs      int // guarded by devices
	name      string
	ifindex   int
	mtu       int
	mac       [6]byte
	mode      Mode
	frameSize uint64
	frameMask uint64
	rxLimit   uint64 // frames below this address receive, the rest transmit
	umem      []byte
	x         *xsk
	obj       *progObjects
	lnk       link.Link
	nl        *rtnl

	rxMu      sync.Mutex
	conns     []*Conn
	closed    bool // set under both locks
	unclaimed uint64
	bad       uint64

	txMu   sync.Mutex
	txFree []uint64
}

var devices struct {
	sync.Mutex
	m map[devKey]*device
}

// acquireDevice returns the device of key, creating it on first use.
func acquireDevice(key devKey, ifc *net.Interface, opts Options, frameSize int) (*device, error) {
	devices.Lock()
	defer devices.Unlock()
	if d := devices.m[key]; d != nil {
		d.refs++
		return d, nil
	}
	d, err := newDevice(key, ifc, opts, frameSize)
	if err != nil {
		return nil, err
	}
	if devices.m == nil {
		devices.m = make(map[devKey]*device)
	}
	d.refs = 1
	devices.m[key] = d
	return d, nil
}

// releaseDevice drops a reference and tears the device down after the
// last, before another Listen can set the interface up again.
func releaseDevice(d *device) {
	devices.Lock()
	defer devices.Unlock()
	d.refs--
	if d.refs == 0 {
		delete(devices.m, d.key)
		d.teardown()
	}
}

func newDevice(key devKey, ifc *net.Interface, opts Options, frameSize int) (_ *device, err error) {
	d := &device{
		key:       key,
		name:      ifc.Name,
		ifindex:   ifc.Index,
		mtu:       ifc.MTU,
		frameSize: uint64(frameSize),
		frameMask: uint64(frameSize - 1),
	}
	copy(d.mac[:], ifc.HardwareAddr)
	defer func() {
		if err != nil {
			d.teardown()
		}
	}()
	if d.nl, err = openRTNL(); err != nil {
		return nil, err
	}
	st, err := d.nl.linkXDP(d.ifindex)
	if err != nil {
		return nil, fmt.Errorf("afxdp: cannot read the XDP state of %s: %w", d.name, err)
	}
	if st.attached != 0 {
		return nil, fmt.Errorf("afxdp: %s: %w (id %d, %s mode): detach it (ip link set dev %s xdp off)", d.name, ErrXDPAttached, st.progID, st.mode(), d.name)
	}
	if d.obj, err = newProgObjects(key.queue + 1); err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	maxLen := frameSize - unix.XDP_PACKET_HEADROOM
	if d.lnk, d.mode, err = attach(d.obj, d.ifindex, d.name, opts.Mode, maxLen, d.mtu); err != nil {
		return nil, err
	}

	frames := opts.Frames
	if d.umem, err = getUMEM(frames * frameSize); err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	ringSize := uint32(frames / 2)
	tries := []uint16{unix.XDP_COPY | unix.XDP_USE_NEED_WAKEUP, unix.XDP_COPY}
	if d.mode == Native {
		tries = append([]uint16{unix.XDP_ZEROCOPY | unix.XDP_USE_NEED_WAKEUP}, tries...)
	}
	var errs []error
	for _, flags := range tries {
		d.x, err = openXSK(d.ifindex, key.queue, d.umem, uint32(frameSize), ringSize, flags)
		if err == nil {
			break
		}
		errs = append(errs, err)
	}
	if d.x == nil {
		return nil, fmt.Errorf("afxdp: %s queue %d: %w", d.name, key.queue, errors.Join(errs...))
	}
	if err = d.obj.xsks.Put(uint32(key.queue), uint32(d.x.fd)); err != nil {
		return nil, fmt.Errorf("afxdp: cannot enter the socket in the BPF socket map: %w", err)
	}

	// Half the frames receive and wait in the fill ring; the other half
	// transmit.
	nrx := frames / 2
	d.rxLimit = uint64(nrx) * d.frameSize
	for i := 0; i < nrx; i++ {
		d.x.fill.push(uint64(i) * d.frameSize)
	}
	d.x.fill.publish()
	d.txFree = make([]uint64, 0, frames-nrx)
	for i := nrx; i < frames; i++ {
		d.txFree = append(d.txFree, uint64(i)*d.frameSize)
	}
	return d, nil
}

// attach loads the program for mode and attaches it to the interface
// (Auto: Native, else Generic); it reports the mode used. Frames longer
// than maxLen, and in generic mode longer than the MTU allows, are left to
// the kernel.
func attach(obj *progObjects, ifindex int, name string, mode Mode, maxLen, mtu int) (link.Link, Mode, error) {
	try := func(m Mode) (link.Link, error) {
		flags := link.XDPDriverMode
		cfg := progConfig{maxLen: maxLen}
		if m == Generic {
			flags = link.XDPGenericMode
			cfg.generic = true
			// A socket buffer longer than the MTU allows is a
			// segmentation-offload or receive-offload super-packet.
			cfg.maxLen = min(maxLen, mtu+ethHeaderLen+vlanTagLen)
		}
		if err := obj.load(cfg); err != nil {
			return nil, err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: obj.prog, Interface: ifindex, Flags: flags})
		if err != nil {
			hint := ""
			if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
				hint = fmt.Sprintf("; another XDP program may be attached (ip link show dev %s)", name)
			}
			return nil, fmt.Errorf("%s mode: %w%s", m, err, hint)
		}
		return l, nil
	}
	if mode != Auto {
		l, err := try(mode)
		if err != nil {
			return nil, mode, fmt.Errorf("afxdp: cannot attach the XDP program to %s in %w", name, err)
		}
		return l, mode, nil
	}
	l, errN := try(Native)
	if errN == nil {
		return l, Native, nil
	}
	l, errG := try(Generic)
	if errG == nil {
		return l, Generic, nil
	}
	return nil, mode, fmt.Errorf("afxdp: attaching the XDP program to %s: %v; %v", name, errN, errG)
}

func (d *device) teardown() {
	if d.lnk != nil {
		// Detach first: nothing is steered to the socket any more.
		d.lnk.Close()
		d.lnk = nil
	}
	d.rxMu.Lock()
	d.txMu.Lock()
	d.closed = true
	d.txMu.Unlock()
	d.rxMu.Unlock()
	if d.x != nil {
		d.x.close()
	}
	if d.umem != nil {
		putUMEM(d.umem)
	}
	if d.obj != nil {
		d.obj.close()
	}
	if d.nl != nil {
		d.nl.close()
	}
}

// add registers c: its datagrams are steered to the socket from now on.
func (d *device) add(c *Conn) error {
	d.rxMu.Lock()
	d.conns = append(d.conns, c)
	d.rxMu.Unlock()
	k := portKey(c.local)
	if err := d.obj.ports.Put(k, uint8(1)); err != nil {
		d.remove(c)
		return fmt.Errorf("afxdp: port map entry for %s: %w (at most %d Conns per interface and queue)", c.local, err, maxConnsPerDevice)
	}
	return nil
}

// remove unregisters c and returns the frames it held to the fill ring.
func (d *device) remove(c *Conn) {
	k := portKey(c.local)
	_ = d.obj.ports.Delete(k)
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	for i, o := range d.conns {
		if o == c {
			d.conns = append(d.conns[:i], d.conns[i+1:]...)
			break
		}
	}
	if d.closed {
		return
	}
	for _, f := range c.held {
		d.x.fill.push(f)
	}
	c.held = c.held[:0]
	for {
		e, ok := c.q.pop()
		if !ok {
			break
		}
		d.x.fill.push(e.frame)
	}
	d.refill()
}

// find is the Conn a datagram to ip and port belongs to (RX lock held).
func (d *device) find(ip [4]byte, port uint16) *Conn {
	for _, o := range d.conns {
		if o.port == port && o.ip4 == ip {
			return o
		}
	}
	return nil
}

// refill publishes frames pushed to the fill ring and wakes the driver if
// it asks for it (RX lock held).
func (d *device) refill() {
	d.x.fill.publish()
	if d.x.fill.needWakeup() {
		d.x.wakeRX()
	}
}

// recycle returns a receive frame to the fill ring (RX lock held).
func (d *device) recycle(frame uint64) {
	if !d.x.fill.push(frame) {
		d.bad++
	}
}

// drain takes datagrams off the RX ring: c's own into ms from n on, the
// others' to their hand-off queues, whose readers it wakes. It stops when
// ms is full and returns the new n (RX lock held).
func (d *device) drain(c *Conn, ms []Message, n int) int {
	rx := &d.x.rx
	avail := rx.available(rx.size)
	wake := c.wake[:0]
	var i uint32
	for i < avail && n < len(ms) {
		desc := rx.at(i)
		i++
		base := desc.Addr &^ d.frameMask
		end := desc.Addr + uint64(desc.Len)
		if base >= d.rxLimit || end > uint64(len(d.umem)) {
			// Not a receive frame of ours: leave it alone.
			d.bad++
			continue
		}
		p, ok := parse(d.umem[desc.Addr:end])
		if !ok {
			d.recycle(base)
			d.bad++
			continue
		}
		off := desc.Addr + uint64(p.off)
		if p.dstPort == c.port && p.dstIP == c.ip4 {
			ms[n] = Message{Buf: d.umem[off : off+uint64(p.n) : off+uint64(p.n)], N: p.n, Addr: p.src}
			c.held = append(c.held, base)
			n++
			continue
		}
		o := d.find(p.dstIP, p.dstPort)
		if o == nil {
			d.recycle(base)
			d.unclaimed++
			continue
		}
		if !o.q.push(rxEntry{frame: base, off: off, n: p.n, src: p.src}) {
			d.recycle(base)
			o.dropped.Add(1)
			continue
		}
		seen := false
		for _, w := range wake {
			if w == o {
				seen = true
				break
			}
		}
		if !seen {
			wake = append(wake, o)
		}
	}
	rx.release(i)
	// Under the RX lock a registered Conn's eventfd is open.
	for _, o := range wake {
		if o.waiting.Load() {
			o.signal()
		}
	}
	clear(wake)
	c.wake = wake[:0]
	return n
}

// reclaim moves completed transmit frames to the free list (TX lock
// held).
func (d *device) reclaim() {
	comp := &d.x.comp
	n := comp.available(comp.size)
	for i := uint32(0); i < n; i++ {
		f := comp.at(i) &^ d.frameMask
		if f < d.rxLimit || f >= uint64(len(d.umem)) || len(d.txFree) == cap(d.txFree) {
			d.bad++
			continue
		}
		d.txFree = append(d.txFree, f)
	}
	comp.release(n)
}

// txDrained reports whether the kernel has taken everything off the TX
// ring.
func (d *device) txDrained() bool {
	return atomic.LoadUint32(d.x.tx.consumer) == d.x.tx.cachedProd
}

// kickTX tells the kernel there is something to send. In copy mode the
// kernel sends during the call, a limited number per call, so the caller
// repeats it until the ring is drained.
func (d *device) kickTX() error {
	if d.x.zeroCopy && !d.x.tx.needWakeup() {
		return nil
	}
	if err := d.x.kick(); err != nil && !retryable(err) {
		return err
	}
	return nil
}

// txStall is how long a transmit waits for the kernel to take packets or
// return frames before it gives up.
const txStall = 2 * time.Second

// transmit sends ms[idx[i]] to the next-hop MAC macs[i] through the TX
// ring, as many per ring operation as there are free frames, and returns
// how many it put on the ring.
func (d *device) transmit(c *Conn, ms []Message, idx []int, macs [][6]byte) (int, error) {
	d.txMu.Lock()
	defer d.txMu.Unlock()
	tx := &d.x.tx
	done := 0
	idle := 0
	var stalled time.Time
	lastCons := atomic.LoadUint32(tx.consumer)
	for {
		if d.closed || c.closed.Load() {
			return done, net.ErrClosed
		}
		if len(d.txFree) < len(idx)-done {
			d.reclaim()
		}
		k := min(len(idx)-done, len(d.txFree))
		if k > 0 {
			k = min(k, int(tx.free(uint32(k))))
		}
		for j := 0; j < k; j++ {
			m := &ms[idx[done+j]]
			f := d.txFree[len(d.txFree)-1]
			d.txFree = d.txFree[:len(d.txFree)-1]
			n := len(m.Buf)
			frame := d.umem[f : f+d.frameSize]
			copy(frame[headersLen:], m.Buf)
			c.hdr.build(frame, macs[done+j], m.Addr, n, c.ipID, c.udpSum)
			c.ipID++
			*tx.slot(uint32(j)) = xdpDesc{Addr: f, Len: uint32(headersLen + n)}
		}
		if k > 0 {
			tx.advance(uint32(k))
			tx.publish()
			done += k
		}
		if err := d.kickTX(); err != nil {
			return done, fmt.Errorf("afxdp: sending on %s: %w (is the interface up?)", d.name, err)
		}
		drained := d.x.zeroCopy || d.txDrained()
		if done == len(idx) && drained {
			return done, nil
		}
		cons := atomic.LoadUint32(tx.consumer)
		if k > 0 || cons != lastCons {
			idle = 0
			stalled = time.Time{}
			lastCons = cons
			continue
		}
		// Nothing moved: the kernel is waiting for the device to finish
		// with earlier packets. Let others run, then try again.
		idle++
		if idle < 16 {
			continue
		}
		if stalled.IsZero() {
			stalled = time.Now()
		} else if time.Since(stalled) > txStall {
			return done, fmt.Errorf("afxdp: %s: transmit ring stalled for %v: check the link, or use UDP", d.name, txStall)
		}
		d.txMu.Unlock()
		if idle < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
		d.txMu.Lock()
	}
}

// kernelDropped is what the kernel counted as dropped on the socket.
func (d *device) kernelDropped() uint64 {
	s, err := d.x.stats()
	if err != nil {
		return 0
	}
	return s.Rx_dropped + s.Rx_ring_full
}
