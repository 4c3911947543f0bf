package switchml

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/transport/shm"
	"github.com/switchml/switchml-go/wire"
)

// Defaults of Config, chosen to work on one machine.
const (
	DefaultController     = "127.0.0.1:50051"
	DefaultLanes          = 4
	DefaultWindow         = 64  // packets in flight per lane: 256 per worker, the reference default
	DefaultPacketElements = 256 // 1 KiB payloads: a quarter of the per-packet cost of 64; a Tofino needs recirculation above 64
	DefaultTimeout        = 10 * time.Millisecond
	// DefaultShmTimeout is the retransmission timeout with TransportShm:
	// shared memory loses nothing in transit, so there a timeout is
	// mostly a loaded host's scheduling stall, and resending a window
	// only adds to the load.
	DefaultShmTimeout  = 50 * time.Millisecond
	DefaultJoinTimeout = 60 * time.Second
	// DefaultConnectTimeout bounds the wait for a first connection to the
	// controller: an address where nothing answers fails Join this soon.
	DefaultConnectTimeout = 5 * time.Second
	DefaultGiveUp         = 30 * time.Second
)

// Config describes one worker of a job.
type Config struct {
	// Controller is the controller's gRPC address (host:port).
	Controller string
	// Job names the job; every rank of it uses the same name.
	Job string
	// Rank of this worker, 0 <= Rank < Workers.
	Rank int
	// Workers is the world size.
	Workers int
	// Bind is the local IP address lane sockets bind to and report to the
	// controller. Empty means the address this host uses to reach the
	// controller, which is what the switch sees when both sit behind the
	// same network.
	Bind string
	// Lanes is the number of parallel lanes (sockets), each with its own
	// window of slots.
	Lanes int
	// Transport is how lanes move packets: TransportUDP ("" is the same),
	// UDP sockets through the kernel's network stack, or TransportAFXDP,
	// AF_XDP sockets that take the job's packets off the interface of the
	// Bind address before the stack (package transport/afxdp: Linux, root
	// or CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF). Where AF_XDP cannot be
	// used (no kernel support, no privilege, a loopback or busy interface)
	// the lanes use UDP sockets and the reason is logged. TransportShm
	// is for workers on the same host as a software switch started with
	// the same transport: UDP sockets whose datagrams to and from the
	// switch go through shared memory instead (package transport/shm:
	// Linux, a specific Bind address); any other peer is reached over
	// UDP. Session.Transport says what the lanes use.
	Transport string
	// Window is the number of packets in flight per lane.
	Window int
	// PacketElements is the number of 32-bit values per packet. 0 picks
	// what the switch takes, as the controller describes it:
	// DefaultPacketElements where the switch takes it (the software
	// switch), else the largest size it takes (64 on the P4 programs).
	// The compatible header carries 32, 64, 128 and 256; larger values (up
	// to 2048) need Extended and the software switch.
	PacketElements int
	// Extended selects the software switch's extended header (wider job
	// ids, more workers, more elements per packet).
	Extended bool
	// Auth tags every packet with a MAC under the job's key, which the
	// controller hands out at Join over the job service's TLS, and drops
	// results whose tag is wrong: for a software switch started with
	// --auth (and its controller with --auth), which drops untagged or
	// forged packets, so that a process that forges a worker's source
	// address cannot change a sum. It needs Extended (the compatible
	// header has no room for a tag). Join fails with ErrJobMismatch when
	// the switch does not check tags, or checks them and Auth is off.
	Auth bool
	// Sparse runs every allreduce in the block-sparse mode: a worker
	// sends only the blocks (PacketElements values) of its tensor that are
	// not all zero, blocks that are zero at every worker travel nowhere,
	// and the result is the same sum, bit for bit, as the dense mode's.
	// Gradients of embedding tables, which touch few rows per step, are
	// what it is for. A tensor size whose last two calls found at least
	// SparseCrossover of its blocks held by some rank runs dense, until a
	// call finds fewer (all ranks decide alike); Stats.DenseCalls counts
	// those calls. Every rank
	// of a job must agree (Join fails with ErrJobMismatch otherwise). It
	// uses the extended header (Sparse sets Extended) and needs the
	// software switch: P4 switches and trees refuse it at Join.
	Sparse bool
	// SparseCrossover is the share of a tensor's blocks held by some rank
	// from which a Sparse session sends tensors of its size dense
	// (DefaultSparseCrossover if zero; above 1, never). Every rank of a
	// job must use the same (Join fails with ErrJobMismatch otherwise).
	SparseCrossover float64
	// WireBits is how wide float values travel. 0, the default, sends
	// float16 and bfloat16 at 16 bits a value and float32 at 32. 16 sends
	// every float type at 16 bits: block-scaled 16-bit fixed point, two
	// values to a 32-bit payload word, half the bytes per value of 32
	// bits at the precision quant.ErrorBound16 states (about 12 bits
	// below the largest possible sum for 8 workers, against 28). 32 sends
	// every type at 32 bits, the reference layout's. int32 always travels
	// at 32 bits, exactly. The switch adds the words alike at either
	// width, so any switch serves both; the sparse mode sends 32 bits, so
	// with Sparse, 0 means 32 for every type and 16 is refused. Every
	// rank of a job must agree (Join fails with ErrJobMismatch
	// otherwise). The 16-bit wire serves up to quant.MaxWorkers16 ranks.
	WireBits int
	// Timeout is the retransmission timeout of a packet (DefaultTimeout,
	// or DefaultShmTimeout with TransportShm); it grows with the measured
	// round trip.
	Timeout time.Duration
	// GiveUp fails an allreduce with ErrTimeoutBudget when a packet has
	// gone unanswered for this long, retransmissions included. Over the
	// ring fallback it is the ring's stall timeout: a call fails when
	// nothing has moved to or from a neighbour for this long.
	GiveUp time.Duration
	// JoinTimeout bounds Join when the context has no deadline: the wait
	// for the other ranks of the job.
	JoinTimeout time.Duration
	// ConnectTimeout bounds the wait for the first connection to the
	// controller (default DefaultConnectTimeout): Join fails with
	// ErrControllerUnreachable, naming the address, when nothing there
	// accepts a connection this long. Ranks that arrive late are
	// JoinTimeout's business, not this one's.
	ConnectTimeout time.Duration
	// Token is the job owner's secret: every rank of a job uses the same,
	// and while the job exists the controller refuses registrations under
	// its name with another token, so that other clients cannot join,
	// restart or take over the job. Empty is the shared default.
	Token string
	// TLS, if set, secures the link to the controller (see secure;
	// with a client certificate for a controller that requires one).
	TLS *tls.Config
	// Faults injects loss, duplication and reordering into what this
	// worker sends (testing and demonstration).
	Faults transport.Faults
	// Trace, if set, receives the session's timeline when it closes, as
	// Chrome trace-event JSON (Perfetto and chrome://tracing open it): a
	// span per allreduce call and per lane, retransmission bursts, and
	// waits for the slowest peer (a lane's first result coming late,
	// barriers). Only the latest TraceEvents events are kept.
	Trace io.Writer
	// TraceEvents bounds the events the timeline keeps (0:
	// DefaultTraceEvents); older ones are overwritten.
	TraceEvents int

	// Fallback chooses what a job does when the switch cannot serve it:
	// "" (the default) fails Join, FallbackRing runs the job over the ring
	// allreduce of switchml/ring instead, through the same calls. The
	// controller decides for every rank of the job at once when the switch
	// has no room for it, serves fewer workers than it has, is offline or
	// refuses its entries; when the controller cannot be reached at all,
	// each rank falls back on its own with FallbackPeers. Session.Fallback
	// and Stats say whether it did, and why; the reason is logged once.
	Fallback string
	// FallbackOnLoss moves a job that began on the switch to the ring when
	// the switch is lost mid-training (the controller reports it lost, or
	// it stops answering for GiveUp): the call that met the loss and every
	// later one run over the ring, with nothing lost or counted twice. It
	// needs Fallback = FallbackRing, keeps a copy of each call's input and
	// of the last result (twice the memory of the largest tensor), and
	// runs Barrier and Broadcast as collectives on the data path, in order
	// with the allreduce calls. Without it, a lost switch fails the call
	// with ErrSwitchLost or ErrTimeoutBudget.
	FallbackOnLoss bool
	// FallbackListen is the host:port this rank's ring listens on (TCP).
	// Empty: FallbackPeers[Rank] if given, else the Bind address and a free
	// port, which the controller hands to the other ranks.
	FallbackListen string
	// FallbackPeers lists every rank's ring address (host:port) in rank
	// order, for a job whose ranks must meet without the controller: when
	// it cannot be reached, the ranks form the ring at these addresses.
	FallbackPeers []string
}

// FallbackRing is the Config.Fallback that runs a job the switch cannot
// serve over the ring allreduce.
const FallbackRing = "ring"

// The Config.Transport values. TransportAFXDP needs its package,
// github.com/switchml/switchml-go/transport/afxdp, imported (for its side
// effect) to register it; the library does not pull its dependencies in
// otherwise.
const (
	TransportUDP   = transport.UDP
	TransportAFXDP = "afxdp"
	TransportShm   = shm.Name
)

// MaxCompatWorkers is the largest job the compatible format (a 32-bit
// bitmap per slot) can serve.
const MaxCompatWorkers = 32

// NeedsExtended reports whether a job of workers ranks with packets of
// packetElements values (0: the default) needs the extended header.
func NeedsExtended(workers, packetElements int) bool {
	if packetElements == 0 {
		packetElements = DefaultPacketElements
	}
	_, ok := wire.CompatSizeCode(packetElements)
	return !ok || workers > MaxCompatWorkers
}

// choosePacketElements picks a packet size among those a switch takes with
// the compatible header (see Config.PacketElements).
func choosePacketElements(takes []uint32, extendedMax uint32, extended bool) int {
	if extended {
		return min(DefaultPacketElements, int(extendedMax))
	}
	best := 0
	for _, k := range takes {
		if int(k) == DefaultPacketElements {
			return DefaultPacketElements
		}
		if int(k) < DefaultPacketElements && int(k) > best {
			best = int(k)
		}
	}
	if best == 0 && len(takes) > 0 {
		best = int(slices.Min(takes))
	}
	return best
}

func (c Config) withDefaults() Config {
	if c.Controller == "" {
		c.Controller = DefaultController
	}
	if c.Lanes == 0 {
		c.Lanes = DefaultLanes
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Timeout == 0 && c.Transport == TransportShm {
		c.Timeout = DefaultShmTimeout
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.GiveUp == 0 {
		c.GiveUp = DefaultGiveUp
	}
	if c.Sparse {
		c.Extended = true
	}
	if c.SparseCrossover == 0 {
		c.SparseCrossover = DefaultSparseCrossover
	}
	return c
}

// Validate reports what Join would refuse in c, after giving zero fields
// their defaults: nil, or a *ConfigError listing every invalid field. It
// lets a program check its settings before it starts anything.
func (c Config) Validate() error { return c.withDefaults().validate() }

// configField names Config's fields in the errors of a session, read far
// from the Config: "Config.FallbackPeers" (a command writes its flag).
const configField = field.Owner("Config")

// ConfigError is a Config that Join cannot use: one field.Error per
// invalid field. Its message names Config fields; programs that set a
// Config from settings of their own (a command's flags) restate it with
// field.Named, or InFlags.
type ConfigError struct {
	Fields []*field.Error
}

func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		lines[i] = f.Error()
	}
	return "switchml: bad config: " + strings.Join(lines, "\n")
}

// Unwrap gives the field errors to errors.As.
func (e *ConfigError) Unwrap() []error {
	errs := make([]error, len(e.Fields))
	for i, f := range e.Fields {
		errs[i] = f
	}
	return errs
}

// InFlags restates the field errors in err in the flags of a command that
// sets Config fields from them, so that its users read the flag to change
// rather than a Go field: flags maps a field ("PacketElements",
// "Faults.Drop") to its flag without dashes ("packet-elements"); a field it
// lacks keeps its Go name. It is field.Named with field.Flags; the result
// still unwraps to what err holds.
func InFlags(err error, flags map[string]string) error {
	return field.Named(err, field.Flags(flags))
}

// checkHostPort checks a ring address: host:port, the port 0 (any) only
// where anyPort.
func checkHostPort(a string, anyPort bool) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port (%v)", err)
	}
	if host == "" && !anyPort {
		return fmt.Errorf("want host:port with a host")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (p == 0 && !anyPort) {
		return fmt.Errorf("want host:port with a port in 1..65535")
	}
	return nil
}

// configChecks are the checks validate runs, in the order their errors
// are listed; each adds to p what it finds wrong in c.
var configChecks = []func(c *Config, p *fieldErrors){
	checkWorld,
	checkLanes,
	checkPacketElements,
	checkSparse,
	checkWireBits,
	checkCompatHeader,
	checkDurations,
	checkFaults,
	checkFallback,
	checkTraceEvents,
}

func (c Config) validate() error {
	var p fieldErrors
	for _, check := range configChecks {
		check(&c, &p)
	}
	if len(p) > 0 {
		return &ConfigError{Fields: p}
	}
	return nil
}

// fieldErrors collects the invalid fields of a Config.
type fieldErrors []*field.Error

// add records name as invalid with its value and advice, a format that
// may name other fields as {Field} (see field.Invalid).
func (p *fieldErrors) add(name string, value any, advice string, args ...any) {
	*p = append(*p, field.Invalid(name, value, advice, args...))
}

// checkWorld checks who the worker is: the job, the world size and the rank.
func checkWorld(c *Config, p *fieldErrors) {
	if c.Job == "" {
		p.add("Job", c.Job, "name the job (every rank uses the same name)")
	}
	if c.Workers < 1 {
		p.add("Workers", c.Workers, "the world size must be at least 1")
	}
	if c.Rank < 0 || c.Rank >= c.Workers {
		p.add("Rank", c.Rank, "want 0 <= rank < {Workers} (%d)", c.Workers)
	}
}

// checkLanes checks how packets move: the lanes, their transport and window.
func checkLanes(c *Config, p *fieldErrors) {
	if c.Lanes < 1 || c.Lanes > 64 {
		p.add("Lanes", c.Lanes, "want 1..64")
	}
	if _, err := transport.Lookup(c.Transport); err != nil {
		p.add("Transport", c.Transport, "want one of %s (%s is the default)", strings.Join(transport.Names(), ", "), TransportUDP)
	}
	if c.Window < 1 || c.Window > 4096 {
		p.add("Window", c.Window, "want 1..4096 packets per lane")
	}
}

// checkPacketElements checks the packet size against the header that
// carries it.
func checkPacketElements(c *Config, p *fieldErrors) {
	switch {
	case c.PacketElements == 0: // chosen at Join from what the switch takes
	case c.PacketElements < 0:
		p.add("PacketElements", c.PacketElements, "want 0 (what the switch takes) or a packet size")
	case c.Extended:
		if c.PacketElements > wire.MaxElements {
			p.add("PacketElements", c.PacketElements, "the extended header carries 1..%d", wire.MaxElements)
		}
	default:
		if _, ok := wire.CompatSizeCode(c.PacketElements); !ok {
			p.add("PacketElements", c.PacketElements, "the compatible header carries 32, 64, 128 or 256; set {Extended} for other sizes")
		}
	}
}

// checkSparse checks the sparse mode's crossover.
func checkSparse(c *Config, p *fieldErrors) {
	if !(c.SparseCrossover > 0) {
		p.add("SparseCrossover", c.SparseCrossover, "want a share above 0 (0 takes the default %v; above 1 never sends dense)", DefaultSparseCrossover)
	}
}

// checkWireBits checks the width float values travel at.
func checkWireBits(c *Config, p *fieldErrors) {
	switch c.WireBits {
	case dtype.WireDefault, dtype.WireFull:
	case dtype.WireNarrow:
		if c.Sparse {
			p.add("WireBits", c.WireBits, "the sparse mode sends 32-bit values: drop {Sparse} or use 0 or %d", dtype.WireFull)
		}
	default:
		p.add("WireBits", c.WireBits, "want %d (16 bits for float16 and bfloat16, 32 for float32), %d (every float type at 16) or %d", dtype.WireDefault, dtype.WireNarrow, dtype.WireFull)
	}
	if c.Workers > quant.MaxWorkers16 && c.WireBits == dtype.WireNarrow {
		p.add("WireBits", c.WireBits, "the 16-bit wire serves up to %d ranks, and {Workers} is %d: use %d", quant.MaxWorkers16, c.Workers, dtype.WireFull)
	}
}

// WireWidth is the width, 16 or 32, at which values of type codec travel
// in a session of this Config (WireBits): with more ranks than the 16-bit
// wire serves, or in the sparse mode, the default is 32 for every type. A
// packet carries twice its PacketElements values at 16 bits.
func (c Config) WireWidth(codec dtype.Codec) int {
	if c.WireBits == dtype.WireDefault && (c.Sparse || c.Workers > quant.MaxWorkers16) {
		return dtype.WireFull
	}
	bits, err := dtype.WireBits(codec, c.WireBits)
	if err != nil {
		return dtype.WireFull // validate refused such a Config
	}
	return bits
}

// checkCompatHeader checks what the compatible header cannot carry: a tag
// or more ranks than its bitmap holds.
func checkCompatHeader(c *Config, p *fieldErrors) {
	if c.Auth && !c.Extended {
		p.add("Auth", c.Auth, "the compatible 10-byte header has no room for a tag; set {Extended} too")
	}
	if !c.Extended && c.Workers > MaxCompatWorkers && c.Fallback != FallbackRing {
		p.add("Workers", c.Workers, "the compatible format allows %d; set {Extended} for more", MaxCompatWorkers)
	}
}

// checkDurations checks that no time bound is negative.
func checkDurations(c *Config, p *fieldErrors) {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"Timeout", c.Timeout}, {"GiveUp", c.GiveUp}, {"JoinTimeout", c.JoinTimeout}, {"ConnectTimeout", c.ConnectTimeout}} {
		if d.v < 0 {
			p.add(d.field, d.v, "must not be negative (0 takes the default)")
		}
	}
}

// checkFaults checks that every injected fault's probability lies in [0, 1].
func checkFaults(c *Config, p *fieldErrors) {
	for _, f := range []struct {
		field, what string
		v           float64
	}{{"Faults.Drop", "drop", c.Faults.Drop}, {"Faults.Duplicate", "duplicate", c.Faults.Duplicate}, {"Faults.Reorder", "reorder", c.Faults.Reorder}} {
		if !(f.v >= 0 && f.v <= 1) {
			p.add(f.field, f.v, "a %s probability must lie in [0, 1]", f.what)
		}
	}
}

// checkFallback checks the fallback mode and the ring settings, which
// only the ring fallback reads.
func checkFallback(c *Config, p *fieldErrors) {
	switch c.Fallback {
	case "", FallbackRing:
	default:
		p.add("Fallback", c.Fallback, "want \"\" (fail when the switch cannot serve the job) or %q", FallbackRing)
	}
	needsRing := func(field string, v any) {
		if c.Fallback != FallbackRing {
			p.add(field, v, "needs {Fallback} = %q", FallbackRing)
		}
	}
	if c.FallbackOnLoss {
		needsRing("FallbackOnLoss", c.FallbackOnLoss)
	}
	if c.FallbackListen != "" {
		needsRing("FallbackListen", c.FallbackListen)
		if err := checkHostPort(c.FallbackListen, true); err != nil {
			p.add("FallbackListen", c.FallbackListen, "%v", err)
		}
	}
	if len(c.FallbackPeers) > 0 {
		needsRing("FallbackPeers", c.FallbackPeers)
		checkFallbackPeers(c, p)
	}
}

// checkFallbackPeers checks the ring's addresses: one per rank, each a
// host:port; only the first bad address is named.
func checkFallbackPeers(c *Config, p *fieldErrors) {
	if len(c.FallbackPeers) != c.Workers {
		p.add("FallbackPeers", c.FallbackPeers, "give one ring address per rank, in rank order: %d for {Workers} = %d", len(c.FallbackPeers), c.Workers)
	}
	for i, a := range c.FallbackPeers {
		if err := checkHostPort(a, false); err != nil {
			p.add("FallbackPeers", c.FallbackPeers, "rank %d's address: %v", i, err)
			return
		}
	}
}

// checkTraceEvents checks the size of the trace ring.
func checkTraceEvents(c *Config, p *fieldErrors) {
	if c.TraceEvents < 0 || c.TraceEvents > maxTraceEvents {
		p.add("TraceEvents", c.TraceEvents, "want 0 (the default, %d) up to %d events", DefaultTraceEvents, maxTraceEvents)
	}
}
