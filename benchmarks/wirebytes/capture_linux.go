package wirebytes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Capture reads, on one interface with Ethernet headers (loopback has
// them), every IPv4 UDP packet this host sends to one destination port
// (an AF_PACKET socket, which needs root), and
// counts the datagrams they carry (tally). The kernel filters the packets
// (a classic BPF program): the socket queues nothing else.
type Capture struct {
	fd       int
	stopping atomic.Bool
	done     chan struct{}
	t        *tally // the reader's until done
	err      error
}

// captureBuffer is the socket's receive buffer: what the kernel queues
// while the reader is off the CPU. A busy machine can starve the reader
// for a while; the workers' packets of a small job fit whole.
const captureBuffer = 128 << 20

// virtio_net_hdr (PACKET_VNET_HDR): the header the kernel puts before
// each packet, whose gso_size says how the packet is segmented.
const (
	vnetHdrLen     = 10
	vnetGSONone    = 0
	vnetGSOSizeOff = 4
)

// StartCapture starts counting what this host sends on interface iface
// to UDP port port.
func StartCapture(iface string, port int) (*Capture, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if port <= 0 || port > 0xffff {
		return nil, fmt.Errorf("capture: port %d: want 1..65535", port)
	}
	// Protocol 0 until the filter is on: nothing queues unfiltered.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("capture: an AF_PACKET socket needs root (CAP_NET_RAW): %w", err)
		}
		return nil, fmt.Errorf("capture: AF_PACKET socket: %w", err)
	}
	c := &Capture{fd: fd, done: make(chan struct{}), t: newTally()}
	if err := c.setup(ifi.Index, port); err != nil {
		unix.Close(fd)
		return nil, err
	}
	go c.read()
	return c, nil
}

func (c *Capture) setup(ifindex, port int) error {
	filter, err := bpf.Assemble([]bpf.Instruction{
		// Packets this host sends, seen before any queue could drop
		// them (on loopback each is seen leaving and arriving: count
		// it once).
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 9},
		// IPv4, UDP, not a later fragment, to port.
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.ETH_P_IP, SkipTrue: 7},
		bpf.LoadAbsolute{Off: ethernetHeader + 9, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 5},
		bpf.LoadAbsolute{Off: ethernetHeader + 6, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 3},
		bpf.LoadMemShift{Off: ethernetHeader},
		bpf.LoadIndirect{Off: ethernetHeader + 2, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipTrue: 1},
		bpf.RetConstant{Val: 0},
		bpf.RetConstant{Val: 1 << 18},
	})
	if err != nil {
		return fmt.Errorf("capture: filter: %w", err)
	}
	prog := make([]unix.SockFilter, len(filter))
	for i, ins := range filter {
		prog[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	if err := unix.SetsockoptSockFprog(c.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		return fmt.Errorf("capture: attach the filter: %w", err)
	}
	if err := unix.SetsockoptInt(c.fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fmt.Errorf("capture: PACKET_VNET_HDR: %w", err)
	}
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, captureBuffer); err != nil {
		return fmt.Errorf("capture: receive buffer: %w", err)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("capture: receive timeout: %w", err)
	}
	// Bound to every protocol: a socket bound to one sees only packets
	// that arrive, not those that leave.
	if err := unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		return fmt.Errorf("capture: bind: %w", err)
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// read counts packets until Stop, and then until the queue is empty.
func (c *Capture) read() {
	defer close(c.done)
	buf := make([]byte, vnetHdrLen+1<<17)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			if c.stopping.Load() && !errors.Is(err, unix.EINTR) {
				return
			}
			continue
		case errors.Is(err, unix.EINVAL):
			c.err = fmt.Errorf("capture: the kernel could not describe a segmentation-offloaded packet (virtio_net_hdr of a UDP GSO packet needs Linux 6.2 or later): %w", err)
			return
		default:
			c.err = fmt.Errorf("capture: %w", err)
			return
		}
		if n < vnetHdrLen+ethernetHeader {
			continue
		}
		gso := 0
		if buf[1]&^0x80 != vnetGSONone { // gso_type, without the ECN bit
			gso = int(binary.NativeEndian.Uint16(buf[vnetGSOSizeOff:]))
		}
		c.t.addIPv4(buf[vnetHdrLen+ethernetHeader:n], gso)
	}
}

// Stop ends the capture once the packets sent so far are counted, and
// returns the calls seen and the datagrams that were no SwitchML packet.
// It fails when the kernel dropped packets the socket had no room for:
// the counts would be short.
func (c *Capture) Stop() ([]Call, Bytes, error) {
	c.stopping.Store(true)
	<-c.done
	defer unix.Close(c.fd)
	if c.err != nil {
		return nil, Bytes{}, c.err
	}
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return nil, Bytes{}, fmt.Errorf("capture: PACKET_STATISTICS: %w", err)
	}
	if st.Drops > 0 {
		return nil, Bytes{}, fmt.Errorf("capture: the kernel dropped %d of %d packets the capture had no room for (the machine was too busy to read them): the counts would be short; run again on a quieter machine", st.Drops, st.Packets)
	}
	calls, other := c.t.result()
	return calls, other, nil
}
