// Package sim is a deterministic network simulator for the SwitchML
// protocol: n worker engines with L lanes each and one switch pipeline,
// connected by links with latency, bandwidth, jitter (reordering), loss and
// duplication, driven by a virtual clock. The same seed always gives the
// same run, so thousands of lossy runs are cheap and reproducible.
//
// Reordering is jitter: every packet gets an extra delay drawn uniformly
// from [0, Jitter]. The protocol, like the published one, assumes the
// network does not hold a packet for much longer than a round trip (a
// single switch hop): a request delayed past the reuse of its slot's set
// could be taken for a contribution to the new use. Keep Jitter at or below
// a couple of link latencies; larger values test something the protocol
// does not promise.
package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/switchml/wire"
)

// Link models one direction between a worker and the switch. All lanes of a
// worker share its links.
type Link struct {
	Latency   time.Duration
	Jitter    time.Duration // extra uniform delay in [0, Jitter]; reorders packets
	Bandwidth float64       // bits per second; 0 means unlimited
	Loss      float64       // probability a packet is lost
	Duplicate float64       // probability a packet is delivered twice (independent delays)
}

// Packet describes a packet in flight, for Config.Drop.
type Packet struct {
	ToSwitch     bool
	Worker, Lane int
	Header       wire.Header
}

// Config describes a simulated job.
type Config struct {
	Workers, Lanes int
	// Engine is the lane template: Format, Elements, Window and timer
	// settings. Rank, NumWorkers and SlotBase are filled in per lane.
	Engine engine.Config
	// PoolBase is the first slot of the job's partition; the switch gets
	// PoolBase + Lanes*Window slots, so slots below PoolBase belong to no
	// one and any packet there would be counted as out of partition.
	PoolBase uint32
	Up, Down Link
	Seed     uint64
	// StartSkew delays each worker's start of each op by a random amount
	// up to StartSkew, so workers are out of step.
	StartSkew time.Duration
	// MaxTime bounds the virtual time of a run (default one hour): a run
	// that has not finished by then is reported as hung.
	MaxTime time.Duration
	// Drop, if set, is asked about every packet after the random loss
	// decision; true drops it. Used to lose chosen packets.
	Drop func(Packet) bool
	// CheckSetReuse verifies on every fresh use of a (slot, set) that all
	// workers had received the result of its previous use.
	CheckSetReuse bool
}

// Stats summarises a run.
type Stats struct {
	End                      time.Duration // virtual time when the last op finished
	Events                   int
	Sent, Lost, Duplicated   int
	Delivered                int
	SetReuses                int // fresh overwrites of a previously used (slot, set)
	Lanes                    engine.LaneStats
	Switch                   [pipeline.NumStats]uint64
	ResultsAcceptedByWorkers int
}

// ErrHung reports a run that neither finished nor failed within MaxTime,
// or whose event queue ran dry with work left.
var ErrHung = errors.New("sim: run did not finish")

type eventKind uint8

const (
	evToSwitch eventKind = iota
	evToWorker
	evTimer
	evStart
)

type event struct {
	at     time.Duration
	seq    uint64 // insertion order breaks ties: determinism
	kind   eventKind
	worker int
	lane   int
	pkt    []byte
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type useKey struct {
	idx      int
	seq, pid uint32
}

type worker struct {
	lanes     []*engine.Lane
	timers    []time.Duration // scheduled timer event per lane (-1: none)
	upBusy    time.Duration   // serialisation: link busy until
	downBusy  time.Duration
	ops       []engine.Op
	next      int // index of the op to start next
	laneOps   int // lanes still running the current op
	addrs     []netip.AddrPort
	accepted  map[useKey]bool
	lastStart time.Duration
}

// Sim is one simulated job. Create it with New and call Run once.
type Sim struct {
	cfg    Config
	rng    *rand.Rand
	pipe   *pipeline.Pipeline
	ws     []*worker
	byAddr map[netip.AddrPort][2]int
	q      eventQueue
	seq    uint64
	now    time.Duration
	out    pipeline.Output
	buf    []byte
	stats  Stats
	err    error

	// Set-reuse check: the last fresh use of each idx and how many workers
	// accepted its result.
	lastUse  map[int]useKey
	accepted map[useKey]int
}

// New builds the switch and the engines.
func New(cfg Config) (*Sim, error) {
	if cfg.Workers < 1 || cfg.Lanes < 1 {
		return nil, fmt.Errorf("sim: Workers = %d, Lanes = %d, want >= 1", cfg.Workers, cfg.Lanes)
	}
	if cfg.MaxTime == 0 {
		cfg.MaxTime = time.Hour
	}
	w := cfg.Engine.Window
	pool := uint32(cfg.Lanes * w)
	pipe, err := pipeline.New(pipeline.Config{Slots: int(cfg.PoolBase + pool), MaxElements: cfg.Engine.Elements, MaxWorkers: cfg.Workers})
	if err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		pipe:     pipe,
		byAddr:   make(map[netip.AddrPort][2]int),
		buf:      make([]byte, 0, wire.MaxPacket),
		lastUse:  make(map[int]useKey),
		accepted: make(map[useKey]int),
	}
	const job, mgid = 1, 1
	var reps []pipeline.Replica
	for r := 0; r < cfg.Workers; r++ {
		wk := &worker{accepted: make(map[useKey]bool)}
		for l := 0; l < cfg.Lanes; l++ {
			a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(r >> 8), byte(r)}), uint16(40000+l))
			wk.addrs = append(wk.addrs, a)
			s.byAddr[a] = [2]int{r, l}
			if err := pipe.InsertWorker(pipeline.WorkerKey{Addr: a}, pipeline.Worker{
				JobID: job, Rank: uint16(r), NumWorkers: uint16(cfg.Workers), MulticastGroup: mgid,
				Lane: uint8(l), PoolBase: cfg.PoolBase, PoolSize: pool,
			}); err != nil {
				return nil, err
			}
			if err := pipe.InsertReply(pipeline.ReplyKey{JobID: job, Rank: uint16(r), Lane: uint8(l)}, pipeline.Reply{Addr: a}); err != nil {
				return nil, err
			}
			ec := cfg.Engine
			ec.Rank, ec.NumWorkers = r, cfg.Workers
			ec.SlotBase = cfg.PoolBase + uint32(l*w)
			lane, err := engine.NewLane(ec)
			if err != nil {
				return nil, err
			}
			wk.lanes = append(wk.lanes, lane)
			wk.timers = append(wk.timers, -1)
		}
		reps = append(reps, pipeline.Replica{EgressPort: uint32(r), Instance: uint16(r)})
		s.ws = append(s.ws, wk)
	}
	if err := pipe.InsertMulticastGroup(mgid, reps); err != nil {
		return nil, err
	}
	return s, nil
}

// Pipeline returns the simulated switch (for counters and registers).
func (s *Sim) Pipeline() *pipeline.Pipeline { return s.pipe }

// Lane returns lane l of worker r.
func (s *Sim) Lane(r, l int) *engine.Lane { return s.ws[r].lanes[l] }

func (s *Sim) push(e event) {
	e.seq = s.seq
	s.seq++
	heap.Push(&s.q, e)
}

// transmit puts pkt on a link; the copy is the simulator's, since the
// sender reuses its buffer.
func (s *Sim) transmit(link *Link, busy *time.Duration, e event, pkt []byte, hdr wire.Header) {
	s.stats.Sent++
	dep := s.now
	if link.Bandwidth > 0 {
		dep = max(dep, *busy) + time.Duration(float64(8*len(pkt))/link.Bandwidth*1e9)
		*busy = dep
	}
	if s.rng.Float64() < link.Loss {
		s.stats.Lost++
		return
	}
	if s.cfg.Drop != nil && s.cfg.Drop(Packet{ToSwitch: e.kind == evToSwitch, Worker: e.worker, Lane: e.lane, Header: hdr}) {
		s.stats.Lost++
		return
	}
	copies := 1
	if s.rng.Float64() < link.Duplicate {
		copies = 2
		s.stats.Duplicated++
	}
	for range copies {
		c := e
		c.pkt = append([]byte(nil), pkt...)
		c.at = dep + link.Latency
		if link.Jitter > 0 {
			c.at += time.Duration(s.rng.Int64N(int64(link.Jitter) + 1))
		}
		s.push(c)
	}
}

// drain sends everything lane l of worker r has queued and re-arms its
// timer.
func (s *Sim) drain(r, l int) {
	wk := s.ws[r]
	lane := wk.lanes[l]
	for {
		var ok bool
		s.buf, ok = lane.AppendPacket(s.buf[:0])
		if !ok {
			break
		}
		hdr, _, _ := wire.Parse(s.buf)
		s.transmit(&s.cfg.Up, &wk.upBusy, event{kind: evToSwitch, worker: r, lane: l}, s.buf, hdr)
	}
	if d, ok := lane.Deadline(); ok && d != wk.timers[l] {
		wk.timers[l] = d
		s.push(event{at: d, kind: evTimer, worker: r, lane: l})
	}
	s.laneFinished(r, l)
}

// laneFinished moves a worker to its next op once all its lanes are done.
func (s *Sim) laneFinished(r, l int) {
	wk := s.ws[r]
	lane := wk.lanes[l]
	if !lane.Done() || wk.timers[l] == -2 {
		return
	}
	wk.timers[l] = -2 // counted as finished for this op
	if err := lane.Err(); err != nil && s.err == nil {
		s.err = fmt.Errorf("sim: worker %d lane %d, op %d: %w", r, l, wk.next-1, err)
	}
	if wk.laneOps--; wk.laneOps == 0 {
		s.stats.End = max(s.stats.End, s.now)
		s.scheduleStart(r)
	}
}

func (s *Sim) scheduleStart(r int) {
	wk := s.ws[r]
	if wk.next >= len(wk.ops) {
		return
	}
	at := s.now
	if s.cfg.StartSkew > 0 {
		at += time.Duration(s.rng.Int64N(int64(s.cfg.StartSkew) + 1))
	}
	s.push(event{at: at, kind: evStart, worker: r})
}

// startOp splits worker r's next op across its lanes.
func (s *Sim) startOp(r int) {
	wk := s.ws[r]
	op := wk.ops[wk.next]
	wk.next++
	var n int
	switch op.DType {
	case engine.Int32:
		n = len(op.I32)
	case engine.Float32:
		n = len(op.F32)
	default:
		n = len(op.U16)
	}
	ranges := engine.SplitLanes(n, s.cfg.Lanes, s.cfg.Engine.Elements)
	wk.laneOps = s.cfg.Lanes
	for l, rg := range ranges {
		sub := op.Slice(rg)
		wk.timers[l] = -1
		if err := wk.lanes[l].Start(sub, s.now); err != nil {
			if s.err == nil {
				s.err = fmt.Errorf("sim: worker %d lane %d: %w", r, l, err)
			}
		}
		s.drain(r, l)
	}
}

func (s *Sim) atSwitch(e event) {
	hdr, _, perr := wire.Parse(e.pkt)
	src := s.ws[e.worker].addrs[e.lane]
	if s.cfg.CheckSetReuse && perr == nil {
		s.checkReuse(hdr)
	}
	s.pipe.Process(src, e.pkt, &s.out)
	if len(s.out.Dests) == 0 {
		return
	}
	rh, _, _ := wire.Parse(s.out.Packet)
	for _, d := range s.out.Dests {
		wl, ok := s.byAddr[d]
		if !ok {
			continue
		}
		wk := s.ws[wl[0]]
		s.transmit(&s.cfg.Down, &wk.downBusy, event{kind: evToWorker, worker: wl[0], lane: wl[1]}, s.out.Packet, rh)
	}
}

// checkReuse runs before the switch sees a request: if the packet is about
// to start a fresh use of a (slot, set) that was used before, every worker
// must already hold the result of that previous use, or a worker that lost
// it could never recover it.
func (s *Sim) checkReuse(h wire.Header) {
	slots := s.pipe.Config().Slots
	if int(h.Slot) >= slots {
		return
	}
	idx := int(h.Set)*slots + int(h.Slot)
	bm, err := s.pipe.ReadRegister(pipeline.RegPoolBitmap, idx)
	if err != nil {
		return
	}
	for _, w := range bm {
		if w != 0 {
			return
		}
	}
	cur := useKey{idx, h.Seq, h.PacketID}
	if prev, ok := s.lastUse[idx]; ok {
		s.stats.SetReuses++
		if got := s.accepted[prev]; got != s.cfg.Workers && s.err == nil {
			s.err = fmt.Errorf("sim: (slot %d, set %d) reused by sequence %d packet %d while only %d of %d workers had the result of sequence %d packet %d",
				h.Slot, h.Set, h.Seq, h.PacketID, got, s.cfg.Workers, prev.seq, prev.pid)
		}
	}
	s.lastUse[idx] = cur
}

func (s *Sim) atWorker(e event) {
	lane := s.ws[e.worker].lanes[e.lane]
	before := lane.Stats().Results
	lane.Receive(e.pkt, s.now)
	if lane.Stats().Results != before {
		s.stats.ResultsAcceptedByWorkers++
		if s.cfg.CheckSetReuse {
			h, _, _ := wire.Parse(e.pkt)
			k := useKey{int(h.Set)*s.pipe.Config().Slots + int(h.Slot), h.Seq, h.PacketID}
			if !s.ws[e.worker].accepted[k] {
				s.ws[e.worker].accepted[k] = true
				s.accepted[k]++
			}
		}
	}
	s.drain(e.worker, e.lane)
}

// Run executes ops[r] on worker r, in order (every worker must get the same
// sequence of shapes and sequence numbers, as the protocol requires). Each op's
// tensor is split across the lanes with engine.SplitLanes and the result is
// written in place. Run returns the first lane error, ErrHung if the run
// did not finish, or nil.
func (s *Sim) Run(ops [][]engine.Op) (Stats, error) {
	if len(ops) != s.cfg.Workers {
		return s.stats, fmt.Errorf("sim: %d op lists for %d workers", len(ops), s.cfg.Workers)
	}
	for r, wk := range s.ws {
		wk.ops = ops[r]
		s.scheduleStart(r)
	}
	for s.q.Len() > 0 && s.err == nil {
		e := heap.Pop(&s.q).(event)
		if e.at > s.cfg.MaxTime {
			break
		}
		s.now = e.at
		s.stats.Events++
		switch e.kind {
		case evStart:
			s.startOp(e.worker)
		case evToSwitch:
			s.atSwitch(e)
		case evToWorker:
			s.stats.Delivered++
			s.atWorker(e)
		case evTimer:
			wk := s.ws[e.worker]
			if wk.timers[e.lane] == e.at {
				wk.timers[e.lane] = -1
			}
			wk.lanes[e.lane].Tick(s.now)
			s.drain(e.worker, e.lane)
		}
	}
	for _, wk := range s.ws {
		for _, l := range wk.lanes {
			st := l.Stats()
			s.stats.Lanes.Ops += st.Ops
			s.stats.Lanes.Sent += st.Sent
			s.stats.Lanes.Retransmits += st.Retransmits
			s.stats.Lanes.Timeouts += st.Timeouts
			s.stats.Lanes.Backoffs += st.Backoffs
			s.stats.Lanes.Results += st.Results
			s.stats.Lanes.Stale += st.Stale
			s.stats.Lanes.Duplicates += st.Duplicates
			s.stats.Lanes.Malformed += st.Malformed
		}
	}
	s.stats.Switch = s.pipe.Counters()
	if s.err != nil {
		return s.stats, s.err
	}
	for r, wk := range s.ws {
		if wk.next < len(wk.ops) || wk.laneOps > 0 {
			return s.stats, fmt.Errorf("%w: worker %d at op %d of %d after %v virtual time", ErrHung, r, wk.next, len(wk.ops), s.now)
		}
	}
	return s.stats, nil
}
