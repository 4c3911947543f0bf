package shm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/switchml/switchml-go/transport"
)

// Options tune a Conn's inbox.
type Options struct {
	// Dir is the directory inboxes live in (default /dev/shm). Conns find
	// each other only in the same directory.
	Dir string
	// Producers is how many senders can write into the inbox at once, each
	// a Conn of this or another process (default 32). Senders beyond it
	// reach the Conn over UDP.
	Producers int
	// Slots is the depth of each sender's ring in datagrams (default 256).
	// A full ring drops, as a full socket buffer would.
	Slots int
	// MaxDatagram is the largest datagram carried through the inbox
	// (default transport.MaxDatagram); larger ones come over UDP.
	MaxDatagram int
	// CoalesceWakeups lets this Conn put off waking a sleeping reader
	// until that reader's ring from this Conn is half full, this Conn's
	// own reader is about to block in ReadBatch, or, if it never blocks,
	// its next read half a millisecond on, whichever comes first. The reader then wakes once for many datagrams instead of once
	// for the first few. It is for a request-response peer, which reads
	// after it writes (a SwitchML lane, the software switch): datagrams
	// written by a Conn that is not read from afterwards, or whose reader
	// is already blocked, wait until Flush or Close.
	CoalesceWakeups bool
	// ShareCopies writes a datagram that one WriteBatch sends to several
	// inboxes (a multicast's copies, which share one buffer) once, into an
	// outbox file of this Conn's that the readers map, and puts a
	// reference to it in each inbox instead of a copy. The outbox packs
	// datagrams one after another: it holds 4 × Slots of the largest (at
	// most 4096), and up to four times as many smaller ones, and takes
	// its memory whole when first used (about 36 KiB per slot with the
	// defaults); when it is full or cannot be made, datagrams are copied
	// as without the option.
	ShareCopies bool
	// YieldsBeforeSleep is how many times a read that finds nothing gives
	// its CPU up (sched_yield) and looks again before it sleeps. Where
	// processes share few cores, the peer that writes next often runs
	// then, and the sleep and the wake-up, both costly (the more so in a
	// virtual machine), are saved; on idle cores each yield returns at
	// once, and costs a system call.
	YieldsBeforeSleep int
}

// DefaultYields is the YieldsBeforeSleep of the lanes and the software
// switch: on two cores shared by four workers and the switch, enough to
// catch the peer that runs next, few enough that a worker spends no more
// CPU yielding than it saves in wake-ups.
const DefaultYields = 20

// Limits on Options, so that an inbox stays addressable.
const (
	maxProducers = 4096
	maxSlots     = 1 << 16
)

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		o.Dir = "/dev/shm"
	}
	if o.Producers == 0 {
		o.Producers = 32
	}
	if o.Slots == 0 {
		o.Slots = 256
	}
	if o.MaxDatagram == 0 {
		o.MaxDatagram = transport.MaxDatagram
	}
	switch {
	case o.Producers < 1 || o.Producers > maxProducers:
		return o, fmt.Errorf("shm: Producers %d out of range: want 1 to %d", o.Producers, maxProducers)
	case o.Slots < 1 || o.Slots > maxSlots:
		return o, fmt.Errorf("shm: Slots %d out of range: want 1 to %d", o.Slots, maxSlots)
	case o.YieldsBeforeSleep < 0 || o.YieldsBeforeSleep > 1000:
		return o, fmt.Errorf("shm: YieldsBeforeSleep %d out of range: want 0 to 1000", o.YieldsBeforeSleep)
	case o.MaxDatagram < 1 || o.MaxDatagram > 65507:
		return o, fmt.Errorf("shm: MaxDatagram %d out of range: want 1 to 65507", o.MaxDatagram)
	}
	return o, nil
}

// Stats counts what a Conn moved, by path.
type Stats struct {
	// ShmTX and ShmRX count datagrams written into peers' inboxes and read
	// from this Conn's.
	ShmTX, ShmRX uint64
	// UDPTX and UDPRX count datagrams sent and received through the UDP
	// socket.
	UDPTX, UDPRX uint64
	// Dropped counts datagrams not written because the peer's ring was
	// full.
	Dropped uint64
	// Doorbells counts the times this Conn woke a sleeping reader.
	Doorbells uint64
	// Shared counts datagrams written into inboxes as a reference to a
	// copy in this Conn's outbox (Options.ShareCopies).
	Shared uint64
	// Peers is the number of inboxes this Conn writes into now.
	Peers int
}

var errNoAddr = errors.New("shm: address: want a specific IP, not 0.0.0.0 or :: (it names the inbox)")

// ErrFault is a fault on the memory of an inbox or outbox, such as a file
// another process truncated. The error wrapping it says what the Conn does
// next.
var ErrFault = errors.New("memory fault")

// ListenOrUDP opens a Conn on addr, or, if shared memory cannot be used,
// logs "shm: <reason>; using UDP sockets" through logf (when not nil) and
// returns a UDP socket from transport.Listen instead.
func ListenOrUDP(addr netip.AddrPort, opts Options, udpOpts transport.Options, logf func(format string, args ...any)) (transport.PacketConn, error) {
	c, err := Listen(addr, opts, udpOpts)
	if err == nil {
		return c, nil
	}
	var le *listenError
	if errors.As(err, &le) {
		return nil, err // the UDP socket itself failed: UDP alone would too
	}
	if logf != nil {
		logf("shm: %s; using UDP sockets", strings.TrimPrefix(err.Error(), "shm: "))
	}
	return transport.Listen(addr.String(), udpOpts)
}

// listenError is a failure of the Conn's UDP socket, which a fallback to
// UDP would meet as well.
type listenError struct{ err error }

func (e *listenError) Error() string { return e.err.Error() }
func (e *listenError) Unwrap() error { return e.err }

// Layout of an inbox file. All integers are little-endian (native on the
// hosts this runs on) and the ones shared between processes are accessed
// atomically.
const (
	magic      = 0x31304d4853534d53 // "SMSSHM01"
	version    = 5
	headerSize = 4096
	entrySize  = 192
	slotHeader = 24

	// Header fields.
	hMagic     = 0
	hVersion   = 8
	hProducers = 12
	hSlots     = 16
	hStride    = 20
	hMaxDgram  = 24
	hOwnerPID  = 28
	hToken     = 32  // names the inbox's FIFO
	hSleeping  = 64  // the reader is about to block: producers wake it
	hAttachGen = 128 // bumped when a producer claims an entry

	// Producer entry fields, each entry at headerSize + i*entrySize.
	eToken  = 0  // nonzero while claimed
	ePID    = 8  // the producer's process
	eState  = 12 // entryFree, entryOpen, entryClosed
	eStride = 16 // the producer's slot stride, at most the inbox's; 0 means the inbox's
	eTail   = 64 // written by the producer
	eHead   = 128

	// Slot fields: datagram length, source port, address family (4 or 6),
	// source address (16 bytes), then the datagram.
	sLen    = 0
	sPort   = 4
	sFamily = 6
	sAddr   = 8

	// famRef, in a slot's address family, says the slot holds the
	// producer's outbox token and the datagram's offset in that outbox
	// (two little-endian uint64s) in place of the datagram.
	famRef = 0x100
)

const (
	entryFree   = 0
	entryOpen   = 1
	entryClosed = 2
)

// geometry is an inbox's shape.
type geometry struct {
	producers, slots, stride, maxDgram int
}

func newGeometry(o Options) geometry {
	return geometry{producers: o.Producers, slots: o.Slots, stride: (slotHeader + o.MaxDatagram + 63) &^ 63, maxDgram: o.MaxDatagram}
}

func (g geometry) ringsOffset() int  { return (headerSize + g.producers*entrySize + 4095) &^ 4095 }
func (g geometry) size() int         { return g.ringsOffset() + g.producers*g.slots*g.stride }
func (g geometry) entry(i int) int   { return headerSize + i*entrySize }
func (g geometry) slot(e, i int) int { return g.slotAt(e, i, g.stride) }

// slotAt is slot i of entry e's ring when the producer packs its slots
// stride bytes apart. An entry's ring keeps Slots × the inbox's stride of
// the file, of which a producer of smaller datagrams uses the front.
func (g geometry) slotAt(e, i, stride int) int {
	return g.ringsOffset() + e*g.slots*g.stride + i*stride
}

// entryStride is the slot stride an entry's producer wrote, or the
// inbox's where it wrote none or one this package would not.
func (g geometry) entryStride(v uint32) int {
	if v < 64 || v%64 != 0 || int(v) > g.stride {
		return g.stride
	}
	return int(v)
}

// room is the largest datagram a slot of stride bytes holds.
func (g geometry) room(stride int) int { return min(g.maxDgram, stride-slotHeader) }

// strideFor is the slot stride for datagrams of up to size bytes, at most
// the inbox's.
func (g geometry) strideFor(size int) int {
	if size <= 0 {
		return g.stride
	}
	return min(g.stride, (slotHeader+size+63)&^63)
}

// valid tells whether a geometry read from a file is one this package
// could have written, and sized as the file is.
func (g geometry) valid(fileSize int64) bool {
	return g.producers >= 1 && g.producers <= maxProducers && g.slots >= 1 && g.slots <= maxSlots &&
		g.maxDgram >= 1 && g.maxDgram <= 65507 && g.stride == (slotHeader+g.maxDgram+63)&^63 && int64(g.size()) == fileSize
}

// inboxName is the file name of the inbox of addr in network namespace ns.
func inboxName(ns uint64, addr netip.AddrPort) string {
	return fmt.Sprintf("%s%s-%d", inboxPrefix(ns), addr.Addr().Unmap().String(), addr.Port())
}

// inboxPrefix starts the names of the inboxes of network namespace ns.
func inboxPrefix(ns uint64) string { return fmt.Sprintf("switchml-%x-", ns) }
