// Package transport moves SwitchML packets over UDP in batches.
//
// On Linux a Conn reads and writes many datagrams per system call
// (recvmmsg/sendmmsg) through the Go runtime's network poller, so a blocked
// read parks the goroutine instead of a thread and honours deadlines. The
// batch structures are allocated once per Conn: steady-state reads and writes
// allocate nothing. Runs of datagrams to one address leave as one segmented
// send (UDP GSO), and runs the kernel delivers coalesced (UDP GRO) are split
// back into datagrams, so a run crosses the network stack once. Other
// systems fall back to one datagram per call.
//
// A Conn is not safe for concurrent ReadBatch calls, nor for concurrent
// WriteBatch calls; one reader and one writer may run at the same time.
//
// Transports are known by name (Lookup, Names): UDP is this package's;
// packages shm and afxdp register theirs when imported (Register), each
// with the factory of a worker lane's socket and of a switch shard's.
package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// MaxDatagram is the largest UDP payload a Conn reads: enough for the
// extended SwitchML header with 2048 int32 values.
const MaxDatagram = 9000

// DefaultBatch is the number of datagrams moved per system call by default.
const DefaultBatch = 64

// Message is one datagram in a batch.
type Message struct {
	// Buf holds the datagram. For reads its capacity bounds what is read
	// and N tells how much was, except with receive offload on (Linux, the
	// default): then a read points Buf at the whole datagram in the Conn's
	// own memory, valid until the next read on the Conn. For writes all of
	// Buf is sent.
	Buf []byte
	// N is the number of bytes received (reads only).
	N int
	// Addr is the source (reads) or the destination (writes).
	Addr netip.AddrPort
}

// Options tune a Conn.
type Options struct {
	// Batch is the most datagrams per system call (default DefaultBatch).
	Batch int
	// SocketBuffer sets SO_RCVBUF and SO_SNDBUF in bytes (default 4 MiB);
	// the kernel may cap it at net.core.rmem_max.
	SocketBuffer int
	// NoGSO turns off UDP generic segmentation offload on Linux, which
	// otherwise sends runs of equal-sized datagrams to one address with a
	// single pass through the network stack. It turns itself off if the
	// path refuses it.
	NoGSO bool
	// NoGRO turns off UDP generic receive offload on Linux. With it on, the
	// kernel may hand over a run of datagrams from one sender as one
	// coalesced buffer (a segmented send that crossed loopback or a veth
	// intact, or datagrams merged by the device), and ReadBatch splits it
	// back into the original datagrams.
	NoGRO bool
}

func (o Options) withDefaults() Options {
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.SocketBuffer <= 0 {
		o.SocketBuffer = 4 << 20
	}
	return o
}

// PacketConn is what the worker's lanes and the software switch read and
// write datagrams through: a Conn (UDP sockets) or a kernel-bypass socket
// with the same semantics (package afxdp). ReadBatch and SetReadDeadline
// report an expired deadline with an error for which IsTimeout is true, and
// a closed connection with net.ErrClosed.
type PacketConn interface {
	LocalAddr() netip.AddrPort
	Batch() int
	ReadBatch(ms []Message, deadline time.Time) (int, error)
	TryReadBatch(ms []Message) (int, error)
	WriteBatch(ms []Message) (int, error)
	SetReadDeadline(t time.Time) error
	Coalesced() uint64
	Close() error
}

var _ PacketConn = (*Conn)(nil)

// Carrier is a PacketConn of a transport other than UDP: Kind is the
// transport's name, and Carries the transport its packets take now (Kind,
// or UDP while it reaches its peers through kernel sockets, as a
// shared-memory Conn does until a peer with an inbox). A PacketConn that
// is not a Carrier is a UDP socket.
type Carrier interface {
	Kind() string
	Carries() string
}

// CarrierOf is the transport c's packets take now.
func CarrierOf(c PacketConn) string {
	if k, ok := c.(Carrier); ok {
		return k.Carries()
	}
	return UDP
}

// InPlaceWriter is a PacketConn that lets a sender build datagrams in the
// memory they are sent from, saving a copy (package shm's Conns).
type InPlaceWriter interface {
	// Reserve returns up to n empty buffers in which the next datagrams
	// to dst can be built, each with room for size bytes: nil when dst
	// is not reached this way or takes no datagrams that large (then
	// WriteBatch is the way), an empty slice when it has no room now (as
	// a full socket buffer). A Reserve that returned buffers must be
	// followed by a Commit, and nothing else on the Conn's writing side
	// in between. The first Reserve for dst may fit what dst takes from
	// this Conn to size (an shm ring of slots that size): ask for the
	// largest datagram to come.
	Reserve(dst netip.AddrPort, n, size int) [][]byte
	// Commit sends the first len(bufs) reserved buffers, each built in
	// place (bufs[i] starts where the i-th reserved buffer does) to its
	// length, and lets the rest go.
	Commit(bufs [][]byte) (int, error)
}

// Conn is a UDP socket with batched I/O.
type Conn struct {
	udp   *net.UDPConn
	local netip.AddrPort
	opts  Options
	batch batchIO
}

// Listen opens a UDP socket on addr ("host:port"; port 0 picks a free one).
func Listen(addr string, opts Options) (*Conn, error) {
	opts = opts.withDefaults()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: bad listen address %q: %w (want host:port)", addr, err)
	}
	// IPv4 sockets unless an IPv6 address is asked for: a dual-stack socket
	// would need v4-mapped addresses on every send.
	network := "udp4"
	if ua.IP != nil && ua.IP.To4() == nil {
		network = "udp6"
	}
	udp, err := net.ListenUDP(network, ua)
	if err != nil {
		return nil, fmt.Errorf("transport: cannot listen on %s: %w", addr, err)
	}
	// Bigger socket buffers absorb the bursts of a full window; failure is
	// not fatal because the protocol recovers from drops.
	setSocketBuffers(udp, opts.SocketBuffer)
	c := &Conn{udp: udp, opts: opts}
	c.local = udp.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := c.batch.init(udp, opts.Batch, !opts.NoGSO, !opts.NoGRO); err != nil {
		udp.Close()
		return nil, err
	}
	return c, nil
}

// LocalAddr is the address the socket is bound to.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Batch is the most datagrams moved per call.
func (c *Conn) Batch() int { return c.opts.Batch }

// ReadBatch waits until at least one datagram arrives or the deadline
// passes (a zero deadline waits forever) and fills ms[:n], one datagram per
// message. On a deadline it returns 0 and an error for which IsTimeout is
// true. Without receive offload a datagram longer than its message's buffer
// is cut to the buffer; with it the message holds the whole datagram.
func (c *Conn) ReadBatch(ms []Message, deadline time.Time) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	if err := c.udp.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	return c.batch.read(ms, false)
}

// TryReadBatch is ReadBatch without waiting: it returns what the socket
// already holds, possibly nothing. A reader that got a full batch calls it
// to drain the socket before acting on timers, so that replies already
// received are not taken for lost.
func (c *Conn) TryReadBatch(ms []Message) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	return c.batch.read(ms, true)
}

// WriteBatch sends every message in ms, looping over short batches. It
// returns how many were handed to the kernel. Datagrams to one destination
// may share the same Buf.
func (c *Conn) WriteBatch(ms []Message) (int, error) {
	sent := 0
	for sent < len(ms) {
		n, err := c.batch.write(ms[sent:])
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// Coalesced counts the datagrams received inside coalesced buffers (UDP
// GRO), each handed out as its own message.
func (c *Conn) Coalesced() uint64 { return c.batch.coalesced() }

// Close closes the socket; blocked reads return net.ErrClosed.
func (c *Conn) Close() error { return c.udp.Close() }

// SetReadDeadline sets the deadline for reads; it may be called from any
// goroutine to wake a blocked reader.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.udp.SetReadDeadline(t) }

// IsTimeout reports whether err is a read deadline expiry.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
