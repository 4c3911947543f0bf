package afxdp

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/switchml/switchml-go/transport"
)

// Errors a caller can tell apart.
var (
	// ErrNoInterface is an address no network interface of this host has.
	ErrNoInterface = errors.New("no interface has this address")
	// ErrXDPAttached is an interface that another XDP program holds.
	ErrXDPAttached = errors.New("another XDP program is attached")
)

// Mode is how the XDP program that steers datagrams to the socket is
// attached to the interface.
type Mode int

const (
	// Auto tries Native first and falls back to Generic.
	Auto Mode = iota
	// Native runs the program in the driver (XDP_FLAGS_DRV_MODE); the
	// fast mode, for drivers that support it (and veth).
	Native
	// Generic runs the program in the kernel's receive path on socket
	// buffers (XDP_FLAGS_SKB_MODE); works on any device, bridges included.
	Generic
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Native:
		return "native"
	case Generic:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults for Options.
const (
	DefaultFrames    = 4096
	DefaultFrameSize = 4096
	minFrames        = 64
	minFrameSize     = 2048
)

// Options tune Listen. The first Listen on an interface and queue creates
// the socket, UMEM and XDP program that later Conns on the same interface
// and queue share; its Frames, FrameSize and Mode are the ones used.
type Options struct {
	// Queue is the interface's receive queue to bind to (default 0).
	// Datagrams arriving on other queues reach the Conn through the
	// kernel (the slow path).
	Queue int
	// Frames is the number of UMEM frames, rounded up to a power of two
	// (default DefaultFrames); half receive, half transmit.
	Frames int
	// FrameSize is the UMEM frame size, a power of two from 2048 to the
	// page size (default DefaultFrameSize). A frame must hold a whole
	// Ethernet frame after the kernel's 256 bytes of headroom; a larger
	// size is picked if the interface's MTU needs it.
	FrameSize int
	// Batch is the most datagrams moved per call (default
	// transport.DefaultBatch).
	Batch int
	// Mode selects how the XDP program is attached (default Auto).
	Mode Mode
	// UDPChecksum fills in the UDP checksum of sent datagrams. Without it
	// the checksum is 0, which IPv4 allows and which saves a pass over the
	// payload; the Ethernet CRC still covers every hop.
	UDPChecksum bool
}

func (o Options) withDefaults() (Options, error) {
	if o.Queue < 0 {
		return o, fmt.Errorf("afxdp: Options.Queue %d: want a receive queue number, 0 or more", o.Queue)
	}
	if o.Frames <= 0 {
		o.Frames = DefaultFrames
	}
	if o.Frames < minFrames {
		o.Frames = minFrames
	}
	if o.Frames > 1<<20 {
		return o, fmt.Errorf("afxdp: Options.Frames %d: above the limit %d", o.Frames, 1<<20)
	}
	o.Frames = ceilPow2(o.Frames)
	if o.FrameSize <= 0 {
		o.FrameSize = DefaultFrameSize
	}
	if o.FrameSize < minFrameSize {
		o.FrameSize = minFrameSize
	}
	o.FrameSize = ceilPow2(o.FrameSize)
	if o.Batch <= 0 {
		o.Batch = transport.DefaultBatch
	}
	if o.Batch > o.Frames/4 {
		o.Batch = o.Frames / 4
	}
	switch o.Mode {
	case Auto, Native, Generic:
	default:
		return o, fmt.Errorf("afxdp: Options.Mode %d: want Auto, Native or Generic", int(o.Mode))
	}
	return o, nil
}

func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// Stats counts what a Conn moved, by path.
type Stats struct {
	// RX and TX count datagrams received and sent through the AF_XDP
	// socket.
	RX, TX uint64
	// SlowRX and SlowTX count datagrams received and sent through the
	// kernel's UDP socket on the same address: sends to destinations
	// whose next hop's MAC address is not known yet, that route through
	// another interface or back to this host, or that exceed the MTU;
	// receipts of what the XDP program left to the kernel (fragments,
	// other receive queues, traffic from this host).
	SlowRX, SlowTX uint64
	// Dropped counts datagrams for this Conn that arrived while its
	// queue of datagrams taken off the shared ring by other Conns'
	// readers was full.
	Dropped uint64
	// DeviceDropped counts packets the kernel dropped on the shared
	// socket because its receive ring was full or no fill frame was
	// available (XDP_STATISTICS), for all Conns of the interface and
	// queue together.
	DeviceDropped uint64
}

// ListenOrUDP opens an AF_XDP Conn on addr, or, if that fails for any
// reason, logs "afxdp: <reason>; using UDP sockets" through logf (when not
// nil) and returns a UDP socket from transport.Listen instead.
func ListenOrUDP(addr netip.AddrPort, opts Options, udpOpts transport.Options, logf func(format string, args ...any)) (transport.PacketConn, error) {
	c, err := Listen(addr, opts)
	if err == nil {
		return c, nil
	}
	if logf != nil {
		logf("afxdp: %s; using UDP sockets", strings.TrimPrefix(err.Error(), "afxdp: "))
	}
	u, uerr := transport.Listen(addr.String(), udpOpts)
	if uerr != nil {
		return nil, uerr
	}
	return u, nil
}
