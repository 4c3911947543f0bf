// Package engine is the SwitchML worker protocol for one lane, as a pure
// state machine: packets and the current time go in, packets to send and
// the next timer deadline come out. It has no sockets, goroutines or clocks,
// so the UDP transport and the deterministic simulator drive the same code:
// switchml.Session runs one engine per lane on its own UDP socket, and
// internal/sim runs many through a simulated lossy network.
//
// A lane owns a window of W consecutive switch slots starting at SlotBase.
// An allreduce op on the lane's slice of the tensor is cut into blocks of
// Elements values; packet p uses slot SlotBase + p mod W' (W' = min(W,
// blocks)) and the set that slot uses next. The result of packet p triggers
// packet p+W' on the same slot (self-clocking), so at most W' packets are in
// flight and the switch never needs more than W' slots for the lane.
//
// Sets alternate strictly per slot, across ops too: every worker of a job
// issues the same ops in the same order and therefore makes the same
// number of uses of every slot, so the workers agree on the set without
// talking about it.
//
// An op's values are bytes of one element type (package dtype), which
// says how they are quantized into packets and read back. Scaled (float)
// types exchange exponents one window ahead (the block-scaled format of
// package quant):
// packet p carries the exponent of block p and the data of block p-W'
// quantized with the maximum exponent the switch returned for block p-W'.
// The first W' packets carry only exponents, the last W' only data.
// Unscaled (integer) types send their data directly.
//
// Driving a lane: Start an op, then loop: drain AppendPacket and send what it
// returns, wait for a packet (Receive) or the Deadline (Tick), until Done.
// Timers start at the time of the last Start, Receive or Tick call, so call
// AppendPacket right after them.
package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/wire"
)

// Defaults of Config (the reference's values where it has one).
const (
	DefaultTimeout      = 10 * time.Millisecond
	DefaultBackoffAfter = 100
	DefaultMaxTimeouts  = 500
)

// Config describes one lane of one worker.
type Config struct {
	Rank, NumWorkers int
	Format           wire.Format
	Elements         int // values per packet; compat: 32, 64, 128 or 256
	Window           int // slots (packets in flight) of this lane
	// SlotBase is the first absolute slot of the lane (lane l of a job:
	// PoolBase + l*Window).
	SlotBase uint32
	// Timeout is the initial retransmission timeout of a packet
	// (DefaultTimeout if zero).
	Timeout time.Duration
	// BackoffAfter timeouts on the lane double the timeout (reference
	// behaviour; DefaultBackoffAfter if zero).
	BackoffAfter int
	// MaxTimeout caps the doubled timeout (100*Timeout if zero) so a long
	// outage does not push the retry interval to minutes.
	MaxTimeout time.Duration
	// MaxTimeouts is the timeout budget: that many consecutive timeouts on
	// the lane with no result in between fail the op with
	// ErrTimeoutBudget (DefaultMaxTimeouts if zero). Counting only
	// timeouts without progress keeps long ops on lossy links alive while
	// a dead switch or peer still ends the op.
	MaxTimeouts int
	// GiveUp, if set, bounds the op in time instead: it fails with
	// ErrTimeoutBudget once no result has arrived for GiveUp on the clock
	// the caller passes in (and MaxTimeouts, unless set too, no longer
	// counts). A bound in time is what a worker on a loaded machine wants:
	// stalls of its scheduler do not spend it the way a count of timeouts
	// is spent.
	GiveUp time.Duration
	// FixedTimeout keeps the retransmission timeout at Timeout (doubled
	// only by back-off), as the reference client does. By default the
	// timeout follows the measured round-trip time of results (eight times
	// its lower quartile, never below Timeout): a window queued behind a
	// shaped link or a loaded host's scheduler takes longer than 10 ms, and
	// resending what is merely queued adds to the load. The lower quartile
	// and not the mean, because a result also waits for the slowest peer's
	// contribution: under heavy loss most results wait for some peer's
	// timeout, and a mean would chase the timeout upward.
	FixedTimeout bool
	// Key, if set, is the job's data-plane key (wire.KeyLen bytes, from
	// the controller): every packet carries its tag, bound to Rank and
	// Lane, and results must carry the switch's tag or are dropped
	// (LaneStats.BadTags). Extended format only.
	Key []byte
	// Lane is the lane's index among the worker's lanes, which the switch
	// knows from the lane's source address; tags bind it.
	Lane uint8
	// Sparse runs ops in the block-sparse mode (see sparse.go): only
	// blocks that some worker holds non-zero travel. Every worker of a job
	// must agree on it. Extended format only.
	Sparse bool
}

// withDefaults fills zero fields and validates the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.BackoffAfter == 0 {
		c.BackoffAfter = DefaultBackoffAfter
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 100 * c.Timeout
	}
	if c.MaxTimeouts == 0 {
		c.MaxTimeouts = DefaultMaxTimeouts
		if c.GiveUp > 0 {
			c.MaxTimeouts = math.MaxInt
		}
	}
	switch {
	case c.NumWorkers < 1:
		return c, fmt.Errorf("engine: NumWorkers = %d, want >= 1", c.NumWorkers)
	case c.Rank < 0 || c.Rank >= c.NumWorkers:
		return c, fmt.Errorf("engine: Rank = %d, want 0..%d", c.Rank, c.NumWorkers-1)
	case c.Window < 1:
		return c, fmt.Errorf("engine: Window = %d, want >= 1", c.Window)
	case c.Timeout < 0 || c.MaxTimeout < c.Timeout:
		return c, fmt.Errorf("engine: Timeout = %v, MaxTimeout = %v: want 0 < Timeout <= MaxTimeout", c.Timeout, c.MaxTimeout)
	case c.BackoffAfter < 0 || c.MaxTimeouts < 0 || c.GiveUp < 0:
		return c, fmt.Errorf("engine: BackoffAfter = %d, MaxTimeouts = %d, GiveUp = %v: want >= 0", c.BackoffAfter, c.MaxTimeouts, c.GiveUp)
	}
	maxSlot := uint64(wire.MaxExtendedSlot)
	switch c.Format {
	case wire.FormatCompat:
		if _, ok := wire.CompatSizeCode(c.Elements); !ok {
			return c, fmt.Errorf("engine: Elements = %d, the compatible format carries 32, 64, 128 or 256", c.Elements)
		}
		maxSlot = wire.MaxCompatSlot
	case wire.FormatExtended:
		if c.Elements < 1 || c.Elements > wire.MaxElements {
			return c, fmt.Errorf("engine: Elements = %d, the extended format carries 1..%d", c.Elements, wire.MaxElements)
		}
	default:
		return c, fmt.Errorf("engine: unknown format %d", c.Format)
	}
	if c.Sparse && c.Format != wire.FormatExtended {
		return c, errors.New("engine: Sparse with the compatible format: the sparse fields need the extended header")
	}
	if c.Key != nil && c.Format != wire.FormatExtended {
		return c, errors.New("engine: Key with the compatible format: a tag needs the extended header")
	}
	if c.Key != nil && len(c.Key) != wire.KeyLen {
		return c, fmt.Errorf("engine: the job's key is %d bytes, want %d", len(c.Key), wire.KeyLen)
	}
	if c.Key != nil && c.Rank >= wire.AllRanks {
		return c, fmt.Errorf("engine: Rank = %d: tagged packets carry ranks below %d", c.Rank, wire.AllRanks)
	}
	if uint64(c.SlotBase)+uint64(c.Window)-1 > maxSlot {
		return c, fmt.Errorf("engine: slots %d..%d exceed the %v format's limit %d", c.SlotBase, uint64(c.SlotBase)+uint64(c.Window)-1, c.Format, maxSlot)
	}
	return c, nil
}

// Op is one allreduce on the lane's slice. Data holds the input and
// receives the sum in place; the caller must leave it alone until the lane
// is Done (retransmissions re-read it).
type Op struct {
	// Seq numbers the op among the job's allreduce calls (wire.Header.Seq);
	// all workers use the same value and increment it per allreduce. The
	// compatible format carries its low 8 bits.
	Seq uint32
	// DType is the values' type (nil: int32); Data holds them,
	// DType.Size() bytes each (dtype.Bytes of a typed slice).
	DType dtype.Codec
	Data  []byte
	// Checked says the caller has already found every float input finite
	// (DType.Check); Start then skips its own pass over the data.
	Checked bool
	// CheckOnSend, for scaled types without Exps, moves the finiteness check
	// from Start to the scan that finds each packet's block exponent, so
	// that the data is read once less: a block holding NaN or Inf fails
	// the op when its exponent packet is built, with an error wrapping
	// *quant.NonFiniteError whose Index counts from the op's start. The
	// blocks before it were sent, so peers wait for the rest: the job must
	// end, as after any failed op.
	CheckOnSend bool
	// Exps, for scaled types, may hold every ExpBlock-element block's
	// exponent (dtype.BlockExponents, which also checks finiteness): then packets
	// take their exponent from it instead of scanning their block. It is
	// used only when ExpBlock is the lane's Elements and it covers every
	// block; Slice keeps it in step with the data.
	Exps     []int8
	ExpBlock int
	// Dense runs the op in the dense mode on a lane configured Sparse:
	// every block travels, without the sparse fields and the directory.
	// Every worker must decide alike for each op.
	Dense bool
	// Wire16 sends the op's values on the 16-bit wire (dtype.Wire16): two
	// values to a 32-bit payload word, so a packet carries 2*Elements
	// values and every block of the op is that long (ExpBlock included).
	// Scaled types only, dense mode only; every worker must decide alike
	// for each op.
	Wire16 bool
}

// PerPacket is how many values a packet of op carries on a lane of
// elements 32-bit words.
func (op Op) PerPacket(elements int) int {
	if op.Wire16 {
		return 2 * elements
	}
	return elements
}

// Errors of the engine.
var (
	ErrBusy          = errors.New("engine: an op is still running on this lane")
	ErrTimeoutBudget = errors.New("engine: timeout budget exhausted (switch or a peer unreachable)")
)

// LaneStats counts what a lane did over its lifetime.
type LaneStats struct {
	Ops         uint64 // ops started
	Sent        uint64 // packets sent for the first time
	Retransmits uint64 // packets sent again after a timeout
	Timeouts    uint64
	Backoffs    uint64 // times the timeout doubled
	Results     uint64 // results accepted
	Stale       uint64 // results of another sequence number (an earlier op)
	Duplicates  uint64 // results of this op already received or not yet asked for
	Malformed   uint64 // packets that do not parse or do not fit the op
	BadTags     uint64 // results whose tag is wrong or missing (Config.Key): forged or corrupted
}

type slotState struct {
	packet   int // packet outstanding on the slot; -1 when the slot is idle
	set      uint8
	dataExp  int8 // exponent of the data the packet carries (block packet-win)
	queued   bool // waiting in the send queue
	sentOnce bool
	retried  bool          // sent more than once
	sentAt   time.Duration // first transmission of the packet
	lastSent time.Duration // latest transmission
	deadline time.Duration
	// Intrusive timer list, in deadline order (see Lane.timerHead).
	prev, next int32
	timed      bool
	sparseSlot
}

// Lane is the protocol state of one lane. It is not safe for concurrent use.
type Lane struct {
	cfg Config
	// tg tags requests and checks results (Config.Key); nil without a key.
	tg *wire.Tagger

	// Carried across ops: the set each slot uses next.
	nextSet []uint8

	// The op in progress.
	op       Op
	length   int // elements of the slice
	blocks   int
	win      int          // effective window min(Window, blocks)
	total    int          // packets of the op
	float    bool         // the op's type is scaled: an exponent round first
	per      int          // values per packet: Elements, twice that on the 16-bit wire
	narrow   dtype.Wire16 // the op's codec on the 16-bit wire; nil on the 32-bit one
	size     int          // bytes of a value
	received int
	active   bool // an op was started and has not finished
	// Packet ids: packet p of the op travels as pidBase+p. The counter runs
	// on across ops (identically on every worker), so every use of a slot
	// carries a different id even in the compatible format, whose
	// sequence number has only 8 bits. The switch uses that to recognise a
	// retransmission that arrives after everyone moved on.
	pidBase, nextPID uint32
	err              error

	now          time.Duration
	timeout      time.Duration
	sinceBackoff int
	noProgress   int           // consecutive timeouts without a result
	lastResult   time.Duration // when the op started or last got a result
	// rttQ estimates the lower quartile of result round-trip times,
	// carried across ops; zero until the first sample.
	rttQ time.Duration

	slots []slotState
	// Send queue: a ring of slot indices.
	queue       []int32
	qHead, qLen int
	// Timer list of slots with a running timer, oldest first. Timers start
	// at non-decreasing times with a non-decreasing timeout, so the list
	// stays sorted by deadline with O(1) updates.
	timerHead, timerTail int32

	stats LaneStats

	sparse bool // the op in progress runs the sparse mode
	sp     sparseOp
}

// NewLane returns a lane with every slot at set 0, matching a freshly reset
// switch pool.
func NewLane(cfg Config) (*Lane, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var tg *wire.Tagger
	if cfg.Key != nil {
		if tg, err = wire.NewTagger(cfg.Key); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	return &Lane{
		tg:        tg,
		cfg:       cfg,
		nextSet:   make([]uint8, cfg.Window),
		slots:     make([]slotState, cfg.Window),
		queue:     make([]int32, cfg.Window),
		timerHead: -1,
		timerTail: -1,
	}, nil
}

// Config returns the lane's configuration with defaults filled in.
func (l *Lane) Config() Config { return l.cfg }

// Start begins an op at time now. Zero-length slices finish at once. A
// float input holding NaN or Inf is rejected (its sum would be silently
// wrong); the error wraps *quant.NonFiniteError and the lane state is
// unchanged, so peers that did start the op will run out of timeout budget
// unless the caller tells them. After an op failed, the lane's per-slot sets
// and packet ids may no longer match the peers': the job must be restarted
// (new lanes, pool reset) before the next op.
func (l *Lane) Start(op Op, now time.Duration) error {
	if l.active {
		return ErrBusy
	}
	if op.DType == nil {
		op.DType = dtype.Int32
	}
	l.sparse = l.cfg.Sparse && !op.Dense
	if op.Wire16 {
		if _, ok := op.DType.(dtype.Wire16); !ok || !op.DType.Scaled() {
			return fmt.Errorf("engine: op %d: %s values do not travel on the 16-bit wire", op.Seq, op.DType.Name())
		}
		if l.sparse {
			return fmt.Errorf("engine: op %d: the sparse mode sends 32-bit values; run the op dense or on the 32-bit wire", op.Seq)
		}
	}
	if l.sparse {
		return l.startSparse(op, now)
	}
	op, n, err := l.prepare(op, op.CheckOnSend && op.Exps == nil)
	if err != nil {
		return err
	}
	l.begin(op, n, now)
	l.total = l.blocks
	if l.float {
		l.total += l.win // the exponent round
	}
	l.nextPID += uint32(l.total)
	l.active = l.total > 0
	for s := 0; s < l.win; s++ {
		l.assign(s, s)
	}
	return nil
}

// prepare checks that op holds whole values and, unless deferCheck, that
// its floats are finite, and drops Exps that do not fit the lane's blocks;
// n is the number of values.
func (l *Lane) prepare(op Op, deferCheck bool) (_ Op, n int, err error) {
	size := op.DType.Size()
	if len(op.Data)%size != 0 {
		return op, 0, fmt.Errorf("engine: op %d holds %d bytes, not a whole number of %d-byte %s values", op.Seq, len(op.Data), size, op.DType.Name())
	}
	n = len(op.Data) / size
	float := op.DType.Scaled()
	if float && !op.Checked && !deferCheck {
		if err := op.DType.Check(op.Data); err != nil {
			return op, 0, fmt.Errorf("engine: input of op %d: %w", op.Seq, err)
		}
	}
	k := op.PerPacket(l.cfg.Elements)
	if op.Exps != nil && (!float || op.ExpBlock != k || len(op.Exps) < (n+k-1)/k) {
		op.Exps = nil
	}
	return op, n, nil
}

// begin makes op of n values the lane's op at time now, in either mode:
// its blocks and window, no result in, every slot idle, no timer running,
// nothing queued. The caller assigns the first packets.
func (l *Lane) begin(op Op, n int, now time.Duration) {
	k := op.PerPacket(l.cfg.Elements)
	l.per, l.narrow = k, nil
	if op.Wire16 {
		l.narrow = op.DType.(dtype.Wire16)
	}
	l.op, l.length, l.size = op, n, op.DType.Size()
	l.blocks = (n + k - 1) / k
	l.win = min(l.cfg.Window, l.blocks)
	l.float = op.DType.Scaled()
	l.received, l.err = 0, nil
	l.pidBase = l.nextPID
	l.now = max(l.now, now)
	l.timeout = l.rto()
	l.sinceBackoff, l.noProgress = 0, 0
	l.lastResult = l.now
	l.qHead, l.qLen = 0, 0
	l.timerHead, l.timerTail = -1, -1
	l.stats.Ops++
	for s := range l.slots {
		l.slots[s] = slotState{packet: -1, prev: -1, next: -1}
	}
}

// assign makes packet p the outstanding packet of slot s, on the slot's
// next set, and queues it for sending.
func (l *Lane) assign(s, p int) {
	st := &l.slots[s]
	st.packet = p
	st.set = l.nextSet[s]
	l.nextSet[s] ^= 1
	st.sentOnce = false
	st.retried = false
	l.enqueue(s)
}

func (l *Lane) enqueue(s int) {
	if l.slots[s].queued {
		return
	}
	l.slots[s].queued = true
	l.queue[(l.qHead+l.qLen)%len(l.queue)] = int32(s)
	l.qLen++
}

func (l *Lane) timerRemove(s int) {
	st := &l.slots[s]
	if !st.timed {
		return
	}
	if st.prev >= 0 {
		l.slots[st.prev].next = st.next
	} else {
		l.timerHead = st.next
	}
	if st.next >= 0 {
		l.slots[st.next].prev = st.prev
	} else {
		l.timerTail = st.prev
	}
	st.prev, st.next, st.timed = -1, -1, false
}

func (l *Lane) timerAppend(s int, deadline time.Duration) {
	l.timerRemove(s)
	st := &l.slots[s]
	st.deadline = deadline
	st.timed = true
	st.prev = l.timerTail
	st.next = -1
	if l.timerTail >= 0 {
		l.slots[l.timerTail].next = int32(s)
	} else {
		l.timerHead = int32(s)
	}
	l.timerTail = int32(s)
}

// Done reports whether the current op finished (successfully or not) or no
// op was started.
func (l *Lane) Done() bool { return !l.active }

// Err returns why the last op failed, nil if it succeeded or is running.
func (l *Lane) Err() error { return l.err }

// Stats returns the lane's counters.
func (l *Lane) Stats() LaneStats { return l.stats }

// Deadline returns the earliest running timer; Tick must be called at that
// time. false when no timer runs.
func (l *Lane) Deadline() (time.Duration, bool) {
	if !l.active || l.timerHead < 0 {
		return 0, false
	}
	return l.slots[l.timerHead].deadline, true
}

// Pending reports whether AppendPacket may have a packet to hand out.
func (l *Lane) Pending() bool { return l.active && l.qLen > 0 }

// Queued is how many packets wait to be sent, at most: AppendPacket may
// find some of them no longer need sending.
func (l *Lane) Queued() int {
	if !l.active {
		return 0
	}
	return l.qLen
}

// Tick fires the timers that expired at now: their packets are queued for
// retransmission. Too many timeouts without progress fail the op.
func (l *Lane) Tick(now time.Duration) {
	l.now = max(l.now, now)
	if l.active && l.cfg.GiveUp > 0 && l.now-l.lastResult > l.cfg.GiveUp {
		l.fail(fmt.Errorf("%w: no result for %v (op %d, %d of %d results in)",
			ErrTimeoutBudget, (l.now - l.lastResult).Round(time.Millisecond), l.op.Seq, l.received, l.total))
		return
	}
	for l.active && l.timerHead >= 0 && l.slots[l.timerHead].deadline <= l.now {
		s := int(l.timerHead)
		l.timerRemove(s)
		l.stats.Timeouts++
		l.noProgress++
		if l.noProgress > l.cfg.MaxTimeouts {
			st := &l.slots[s]
			l.fail(fmt.Errorf("%w: %d timeouts in a row without a result (op %d, packet %d, slot %d, timeout now %v)",
				ErrTimeoutBudget, l.noProgress, l.op.Seq, st.packet, l.cfg.SlotBase+uint32(s), l.timeout))
			return
		}
		if l.sinceBackoff++; l.sinceBackoff >= l.cfg.BackoffAfter {
			l.sinceBackoff = 0
			l.timeout = min(2*l.timeout, l.cfg.MaxTimeout)
			l.stats.Backoffs++
		}
		l.enqueue(s)
	}
}

func (l *Lane) fail(err error) {
	l.err = err
	l.active = false
	l.qLen = 0
	l.timerHead, l.timerTail = -1, -1
}

// block returns the element range of block b of the slice.
func (l *Lane) block(b int) (lo, hi int) {
	lo = b * l.per
	return lo, min(lo+l.per, l.length)
}

// blockData is the bytes of the values lo..hi of the slice.
func (l *Lane) blockData(lo, hi int) []byte { return l.op.Data[lo*l.size : hi*l.size] }

// dataBlock returns the block whose data packet p carries, or -1.
func (l *Lane) dataBlock(p int) int {
	if l.float {
		p -= l.win
	}
	if p < 0 || p >= l.blocks {
		return -1
	}
	return p
}

// payloadElements is the element count of packet p (and of its result).
func (l *Lane) payloadElements(p int) int {
	if l.cfg.Format == wire.FormatCompat {
		return l.cfg.Elements // fixed by the size code; short blocks are zero-padded
	}
	b := l.dataBlock(p)
	if b < 0 {
		return 0
	}
	lo, hi := l.block(b)
	if l.narrow != nil {
		return quant.PairWords(hi - lo)
	}
	return hi - lo
}

// AppendPacket appends the next packet to send to b, quantizing straight
// into it, and starts its timer. It returns b unchanged and false when
// nothing is waiting to be sent.
func (l *Lane) AppendPacket(b []byte) ([]byte, bool) {
	if !l.active {
		return b, false
	}
	s, ok := l.pop()
	if !ok {
		return b, false
	}
	if l.sparse {
		return l.appendSparse(b, s)
	}
	st := &l.slots[s]
	p := st.packet

	h := wire.Header{
		Format:   l.cfg.Format,
		Seq:      l.op.Seq,
		PacketID: l.pidBase + uint32(p),
		Set:      st.set,
		Slot:     l.cfg.SlotBase + uint32(s),
		Exp0:     quant.MinExponent,
		Elements: l.payloadElements(p),
		Tagged:   l.tg != nil,
	}
	if l.float && p < l.blocks {
		lo, hi := l.block(p)
		switch {
		case l.op.Exps != nil:
			h.Exp0 = l.op.Exps[p]
		case l.op.CheckOnSend && !l.op.Checked:
			var finite bool
			if h.Exp0, finite = l.op.DType.Exponent(l.blockData(lo, hi), true); !finite {
				err := l.op.DType.Check(l.blockData(lo, hi))
				var nf *quant.NonFiniteError
				if errors.As(err, &nf) {
					nf.Index += lo
				}
				l.fail(fmt.Errorf("engine: input of op %d: %w", l.op.Seq, err))
				// The slot's packet stays unsent; the op is over.
				return b, false
			}
		default:
			h.Exp0, _ = l.op.DType.Exponent(l.blockData(lo, hi), false)
		}
	}
	start := len(b)
	b, dst, ok := l.appendHeader(b, &h, s)
	if !ok {
		return b, false
	}
	// What the block does not fill (a short last block, the exponent
	// round) is zeroed.
	filled := 0
	if db := l.dataBlock(p); db >= 0 {
		lo, hi := l.block(db)
		if l.narrow != nil {
			filled = 4 * quant.PairWords(hi-lo)
			l.narrow.Quantize16(dst, l.blockData(lo, hi), l.cfg.NumWorkers, st.dataExp)
		} else {
			filled = 4 * (hi - lo)
			l.op.DType.Quantize(dst, l.blockData(lo, hi), l.cfg.NumWorkers, st.dataExp)
		}
	}
	clear(dst[filled:])
	return l.sent(b, start, s), true
}

// appendHeader appends h for slot s's packet to b and grows b by the
// payload, which dst is, with room for a tag after it: the payload is
// written in place (no allocation when b has room). A header that does not
// encode fails the op (configuration checks make it unreachable: better
// fail loudly than send garbage).
func (l *Lane) appendHeader(b []byte, h *wire.Header, s int) (out, dst []byte, ok bool) {
	start := len(b)
	b, err := h.Append(b)
	if err != nil {
		l.fail(fmt.Errorf("engine: encoding slot %d's packet: %w", s, err))
		return b[:start], nil, false
	}
	off := len(b)
	b = slices.Grow(b, 4*h.Elements+tagRoom(l.cfg))[:off+4*h.Elements]
	return b, b[off:], true
}

// pop takes the next slot with a packet to send off the send queue.
func (l *Lane) pop() (int, bool) {
	for l.qLen > 0 {
		s := int(l.queue[l.qHead])
		l.qHead = (l.qHead + 1) % len(l.queue)
		l.qLen--
		l.slots[s].queued = false
		// A retransmission queued just before the slot's last result
		// arrived has nothing left to send.
		if l.slots[s].packet >= 0 {
			return s, true
		}
	}
	return 0, false
}

// sent tags the packet b[start:] of slot s (Config.Key), counts it and
// starts the slot's timer.
func (l *Lane) sent(b []byte, start, s int) []byte {
	if l.tg != nil {
		// Within the room the caller grew: the tag lands in b's memory.
		b = b[:start+len(l.tg.SealRequest(b[start:], uint16(l.cfg.Rank), l.cfg.Lane))]
	}
	st := &l.slots[s]
	if st.sentOnce {
		l.stats.Retransmits++
		st.retried = true
	} else {
		l.stats.Sent++
		st.sentOnce = true
		st.sentAt = l.now
	}
	st.lastSent = l.now
	l.timerAppend(s, l.now+l.timeout)
	return b
}

// Receive handles a packet from the switch at time now. Results of other
// ops, of packets already received and malformed packets are counted and
// ignored.
func (l *Lane) Receive(pkt []byte, now time.Duration) {
	l.now = max(l.now, now)
	h, payload, err := wire.Parse(pkt)
	if err != nil || h.Format != l.cfg.Format || h.Sparse != l.sparse {
		l.stats.Malformed++
		return
	}
	if l.tg != nil || h.Tagged {
		if l.tg == nil || !h.Tagged || !l.tg.VerifyResult(pkt, l.cfg.Lane) {
			l.stats.BadTags++
			return
		}
	}
	seq := l.op.Seq
	if h.Format == wire.FormatCompat {
		seq &= 0xff
	}
	if h.Seq != seq {
		l.stats.Stale++
		return
	}
	if l.sparse {
		l.receiveSparse(&h, payload)
		return
	}
	rel := h.PacketID - l.pidBase // wraps like the counter
	if !l.active || rel >= uint32(l.total) {
		l.stats.Duplicates++
		return
	}
	p := int(rel)
	s := p % l.win
	st := &l.slots[s]
	if st.packet != p || h.Slot != l.cfg.SlotBase+uint32(s) || h.Set != st.set {
		l.stats.Duplicates++
		return
	}
	if h.Elements != l.payloadElements(p) {
		l.stats.Malformed++
		return
	}

	l.accepted(s)
	if db := l.dataBlock(p); db >= 0 {
		lo, hi := l.block(db)
		if l.narrow != nil {
			l.narrow.Dequantize16(l.blockData(lo, hi), payload, l.cfg.NumWorkers, st.dataExp)
		} else {
			l.op.DType.Dequantize(l.blockData(lo, hi), payload, l.cfg.NumWorkers, st.dataExp)
		}
	}
	if l.float && p < l.blocks {
		// The switch's maximum over all workers: every worker quantizes
		// block p with it, one window later.
		st.dataExp = h.Exp0
	}
	l.received++
	if next := p + l.win; next < l.total {
		l.assign(s, next)
	} else {
		st.packet = -1
	}
	if l.received == l.total {
		l.finish()
	}
}

// accepted does what every accepted result does: it counts, stops the
// slot's timer and samples the round trip.
func (l *Lane) accepted(s int) {
	st := &l.slots[s]
	l.stats.Results++
	l.noProgress = 0
	l.lastResult = l.now
	l.timerRemove(s)
	if !st.retried {
		l.sampleRTT(l.now-st.sentAt, false)
	} else {
		// Ambiguous (Karn): the result answers some copy, but the time
		// since the latest copy is a lower bound of the round trip. It
		// may only raise the estimate; without it a timeout below the
		// round trip would resend every packet and never learn.
		l.sampleRTT(l.now-st.lastSent, true)
	}
}

// finish ends the op in progress successfully.
func (l *Lane) finish() {
	l.active = false
	l.qLen = 0
	l.timerHead, l.timerTail = -1, -1
}

// tagRoom is the room a packet of a lane with cfg needs for its tag.
func tagRoom(cfg Config) int {
	if cfg.Key != nil {
		return wire.TagLen
	}
	return 0
}

// rto is the retransmission timeout the measurements suggest.
func (l *Lane) rto() time.Duration {
	if l.cfg.FixedTimeout || l.rttQ == 0 {
		return l.cfg.Timeout
	}
	return min(max(8*l.rttQ, l.cfg.Timeout), l.cfg.MaxTimeout)
}

// sampleRTT moves the lower-quartile estimate towards one sample: up by
// q/32 when the sample is above it, down by 3q/32 when below, which settles
// where a quarter of the samples fall below. Within an op the timeout only
// grows: timers are kept in a list sorted by deadline, which stays sorted
// only while every new timer ends no earlier than the last. A smaller
// estimate takes effect at the next op.
func (l *Lane) sampleRTT(rtt time.Duration, lowerBound bool) {
	if l.cfg.FixedTimeout || rtt <= 0 {
		return
	}
	switch {
	case l.rttQ == 0:
		l.rttQ = rtt
	case rtt >= l.rttQ:
		l.rttQ += max(l.rttQ/32, 1)
	case !lowerBound:
		l.rttQ -= 3 * l.rttQ / 32
	}
	if r := l.rto(); r > l.timeout {
		l.timeout = r
	}
}

// RTT returns the estimate of the lower quartile of result round-trip
// times and the current retransmission timeout.
func (l *Lane) RTT() (quartile, timeout time.Duration) { return l.rttQ, l.timeout }

// Range is a contiguous part [Off, Off+Len) of a tensor.
type Range struct{ Off, Len int }

// Len is the number of values of the op.
func (op Op) Len() int { return len(op.Data) / op.codec().Size() }

func (op Op) codec() dtype.Codec {
	if op.DType == nil {
		return dtype.Int32
	}
	return op.DType
}

// Slice returns the op on range r of its tensor (a lane's share).
func (op Op) Slice(r Range) Op {
	size := op.codec().Size()
	op.Data = op.Data[r.Off*size : (r.Off+r.Len)*size]
	if op.Exps != nil {
		if op.ExpBlock <= 0 || r.Off%op.ExpBlock != 0 || r.Off/op.ExpBlock > len(op.Exps) {
			op.Exps = nil // not cut on block boundaries: packets scan
		} else {
			op.Exps = op.Exps[r.Off/op.ExpBlock:]
		}
	}
	return op
}

// SplitLanes cuts a tensor of total elements into lanes contiguous ranges of
// whole packets (only the last non-empty range may end in a partial
// packet), with block counts differing by at most one. Ranges may be empty
// when there are fewer packets than lanes. Every worker computes the same
// split, which keeps their lanes' ops aligned.
func SplitLanes(total, lanes, elements int) []Range {
	lanes = max(lanes, 1)
	elements = max(elements, 1)
	total = max(total, 0)
	blocks := (total + elements - 1) / elements
	out := make([]Range, lanes)
	for i := range out {
		lo := min(i*blocks/lanes*elements, total)
		hi := min((i+1)*blocks/lanes*elements, total)
		out[i] = Range{Off: lo, Len: hi - lo}
	}
	return out
}
