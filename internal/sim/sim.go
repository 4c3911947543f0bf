// Package sim is a deterministic network simulator for the SwitchML
// protocol: n worker engines with L lanes each and one switch pipeline (or
// a two-level tree: leaf switches whose partial sums go up to a spine),
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
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/wire"
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
	ToSwitch bool // towards a switch; on a trunk, towards the spine
	// Trunk marks a packet between leaf Leaf and the spine; Worker and
	// Lane are then -1.
	Trunk        bool
	Leaf         int
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
	// Leaves, when 2 or more, builds a two-level tree: worker r attaches
	// to leaf r*Leaves/Workers, each leaf aggregates its workers and sends
	// the partial sums to a spine over TrunkUp, and the spine's result
	// comes back over TrunkDown. The spine numbers the job's slots from
	// SpineBase.
	Leaves             int
	TrunkUp, TrunkDown Link
	SpineBase          uint32
	Seed               uint64
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
	TrunkLost                int // of Lost: between a leaf and the spine
	Delivered                int
	SetReuses                int // fresh overwrites of a previously used (slot, set)
	Lanes                    engine.LaneStats
	Switch                   [switchjob.NumStats]uint64 // summed over the leaves in a tree
	Spine                    [switchjob.NumStats]uint64
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
	node   int            // evToSwitch: which switch
	src    netip.AddrPort // evToSwitch: the sender's address
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

// useKey names one use of a (slot, set), in the workers' slot numbering.
type useKey struct {
	idx      int
	seq, pid uint32
}

// node is one switch: the only one, a leaf or the spine.
type node struct {
	pipe     *pipeline.Pipeline
	addr     netip.AddrPort // its data-plane address (a leaf's is its source towards the spine)
	workers  int            // workers below it
	slotBase uint32         // its slot of the workers' slot PoolBase
	upBusy   time.Duration  // a leaf's trunk towards the spine
	downBusy time.Duration  // the trunk from the spine to this leaf
	// Set-reuse check: the last fresh use of each idx.
	lastUse map[int]useKey
}

type worker struct {
	leaf     int // its switch
	lanes    []*engine.Lane
	timers   []time.Duration // scheduled timer event per lane (-1: none)
	upBusy   time.Duration   // serialisation: link busy until
	downBusy time.Duration
	ops      []engine.Op
	next     int // index of the op to start next
	laneOps  int // lanes still running the current op
	addrs    []netip.AddrPort
	accepted map[useKey]bool
}

// Sim is one simulated job. Create it with New and call Run once.
type Sim struct {
	cfg   Config
	rng   *rand.Rand
	nodes []*node // the switch, or the leaves then the spine
	ws    []*worker
	// byAddr finds a worker lane, byNode a switch, by address.
	byAddr map[netip.AddrPort][2]int
	byNode map[netip.AddrPort]int
	q      eventQueue
	seq    uint64
	now    time.Duration
	out    pipeline.Output
	buf    []byte
	stats  Stats
	err    error

	// Set-reuse check: how many workers, and how many of each leaf,
	// accepted each use's result.
	accepted     map[useKey]int
	leafAccepted []map[useKey]int
}

// New builds the switches and the engines.
func New(cfg Config) (*Sim, error) {
	if cfg.Workers < 1 || cfg.Lanes < 1 {
		return nil, fmt.Errorf("sim: Workers = %d, Lanes = %d, want >= 1", cfg.Workers, cfg.Lanes)
	}
	if cfg.Leaves > cfg.Workers {
		return nil, fmt.Errorf("sim: Leaves = %d for %d workers, want at most one leaf per worker", cfg.Leaves, cfg.Workers)
	}
	if cfg.MaxTime == 0 {
		cfg.MaxTime = time.Hour
	}
	w := cfg.Engine.Window
	pool := uint32(cfg.Lanes * w)
	s := &Sim{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		byAddr:   make(map[netip.AddrPort][2]int),
		byNode:   make(map[netip.AddrPort]int),
		buf:      make([]byte, 0, wire.MaxPacket),
		accepted: make(map[useKey]int),
	}
	leaves := max(cfg.Leaves, 1)
	for l := 0; l < leaves; l++ {
		pipe, err := pipeline.New(pipeline.Config{Slots: int(cfg.PoolBase + pool), MaxElements: cfg.Engine.Elements, MaxWorkers: cfg.Workers})
		if err != nil {
			return nil, err
		}
		nd := &node{pipe: pipe, addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, 0, byte(l)}), 48864), slotBase: cfg.PoolBase, lastUse: make(map[int]useKey)}
		s.nodes = append(s.nodes, nd)
		s.byNode[nd.addr] = l
		s.leafAccepted = append(s.leafAccepted, make(map[useKey]int))
	}
	const job, mgid = 1, 1
	reps := make([][]switchjob.Replica, leaves)
	for r := 0; r < cfg.Workers; r++ {
		leaf := r * leaves / cfg.Workers
		nd := s.nodes[leaf]
		local := nd.workers
		nd.workers++
		wk := &worker{leaf: leaf, accepted: make(map[useKey]bool)}
		for l := 0; l < cfg.Lanes; l++ {
			a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(r >> 8), byte(r)}), uint16(40000+l))
			wk.addrs = append(wk.addrs, a)
			s.byAddr[a] = [2]int{r, l}
			wk.timers = append(wk.timers, -1)
			ec := cfg.Engine
			ec.Rank, ec.NumWorkers = r, cfg.Workers
			ec.SlotBase = cfg.PoolBase + uint32(l*w)
			lane, err := engine.NewLane(ec)
			if err != nil {
				return nil, err
			}
			wk.lanes = append(wk.lanes, lane)
		}
		reps[leaf] = append(reps[leaf], switchjob.Replica{EgressPort: uint32(local), Instance: uint16(local)})
		s.ws = append(s.ws, wk)
	}
	// Ranks at a switch are the workers' places under it.
	next := make([]int, leaves)
	for r, wk := range s.ws {
		nd := s.nodes[wk.leaf]
		local := next[wk.leaf]
		next[wk.leaf]++
		for l, a := range wk.addrs {
			if err := nd.pipe.InsertWorker(pipeline.WorkerKey{Addr: a}, switchjob.Worker{
				JobID: job, Rank: uint16(local), NumWorkers: uint16(nd.workers), MulticastGroup: mgid,
				Lane: uint8(l), PoolBase: cfg.PoolBase, PoolSize: pool,
			}); err != nil {
				return nil, fmt.Errorf("sim: worker %d: %w", r, err)
			}
			if err := nd.pipe.InsertReply(pipeline.ReplyKey{JobID: job, Rank: uint16(local), Lane: uint8(l)}, pipeline.Reply{Addr: a}); err != nil {
				return nil, err
			}
		}
	}
	for l := 0; l < leaves; l++ {
		if err := s.nodes[l].pipe.InsertMulticastGroup(mgid, reps[l]); err != nil {
			return nil, err
		}
	}
	if cfg.Leaves < 2 {
		return s, nil
	}
	// The spine: each leaf is one worker of its job.
	spine, err := pipeline.New(pipeline.Config{Slots: int(cfg.SpineBase + pool), MaxElements: cfg.Engine.Elements, MaxWorkers: leaves})
	if err != nil {
		return nil, err
	}
	sn := &node{pipe: spine, addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 3, 0, 1}), 48864), workers: cfg.Workers, slotBase: cfg.SpineBase, lastUse: make(map[int]useKey)}
	var spineReps []switchjob.Replica
	for l := 0; l < leaves; l++ {
		la := s.nodes[l].addr
		if err := spine.InsertWorker(pipeline.WorkerKey{Addr: la}, switchjob.Worker{
			JobID: job, Rank: uint16(l), NumWorkers: uint16(leaves), MulticastGroup: mgid, PoolBase: cfg.SpineBase, PoolSize: pool,
		}); err != nil {
			return nil, err
		}
		if err := spine.InsertReply(pipeline.ReplyKey{JobID: job, Rank: uint16(l)}, pipeline.Reply{Addr: la}); err != nil {
			return nil, err
		}
		spineReps = append(spineReps, switchjob.Replica{EgressPort: uint32(l), Instance: uint16(l)})
		if err := s.nodes[l].pipe.InsertUplink(job, switchjob.Uplink{
			Parent: sn.addr, ParentBase: cfg.SpineBase, PoolBase: cfg.PoolBase, PoolSize: pool, MulticastGroup: mgid,
		}); err != nil {
			return nil, err
		}
	}
	if err := spine.InsertMulticastGroup(mgid, spineReps); err != nil {
		return nil, err
	}
	s.byNode[sn.addr] = len(s.nodes)
	s.nodes = append(s.nodes, sn)
	return s, nil
}

// Pipeline returns the simulated switch, or the first leaf of a tree (for
// counters and registers).
func (s *Sim) Pipeline() *pipeline.Pipeline { return s.nodes[0].pipe }

// Spine returns the spine of a tree, or nil.
func (s *Sim) Spine() *pipeline.Pipeline {
	if s.cfg.Leaves < 2 {
		return nil
	}
	return s.nodes[len(s.nodes)-1].pipe
}

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
	if s.rng.Float64() < link.Loss || s.cfg.Drop != nil && s.cfg.Drop(s.describe(e, hdr)) {
		s.stats.Lost++
		if e.worker < 0 {
			s.stats.TrunkLost++
		}
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

// describe says what a packet about to be delivered by e is, for Drop.
func (s *Sim) describe(e event, hdr wire.Header) Packet {
	p := Packet{ToSwitch: e.kind == evToSwitch, Worker: e.worker, Lane: e.lane, Header: hdr}
	if e.worker >= 0 {
		p.Leaf = s.ws[e.worker].leaf
		return p
	}
	// On a trunk: up to the spine from the sending leaf, or down to leaf
	// e.node.
	p.Trunk, p.Lane = true, -1
	p.ToSwitch = e.node == len(s.nodes)-1
	p.Leaf = e.node
	if p.ToSwitch {
		p.Leaf = s.byNode[e.src]
	}
	return p
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
		s.transmit(&s.cfg.Up, &wk.upBusy, event{kind: evToSwitch, worker: r, lane: l, node: wk.leaf, src: wk.addrs[l]}, s.buf, hdr)
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
	ranges := engine.SplitLanes(op.Len(), s.cfg.Lanes, op.PerPacket(s.cfg.Engine.Elements))
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
	nd := s.nodes[e.node]
	hdr, _, perr := wire.Parse(e.pkt)
	if s.cfg.CheckSetReuse && perr == nil {
		s.checkReuse(e.node, e.src, hdr)
	}
	nd.pipe.Process(e.src, e.pkt, &s.out)
	if len(s.out.Dests) == 0 {
		return
	}
	rh, _, _ := wire.Parse(s.out.Packet)
	for _, d := range s.out.Dests {
		if wl, ok := s.byAddr[d]; ok {
			wk := s.ws[wl[0]]
			s.transmit(&s.cfg.Down, &wk.downBusy, event{kind: evToWorker, worker: wl[0], lane: wl[1]}, s.out.Packet, rh)
			continue
		}
		to, ok := s.byNode[d]
		if !ok {
			continue
		}
		// On a trunk: a leaf's partial sums up, or the spine's result down.
		if to == len(s.nodes)-1 {
			s.transmit(&s.cfg.TrunkUp, &nd.upBusy, event{kind: evToSwitch, worker: -1, lane: -1, node: to, src: nd.addr}, s.out.Packet, rh)
		} else {
			s.transmit(&s.cfg.TrunkDown, &s.nodes[to].downBusy, event{kind: evToSwitch, worker: -1, lane: -1, node: to, src: nd.addr}, s.out.Packet, rh)
		}
	}
}

// use names the slot use of h, at slot in the workers' numbering.
func (s *Sim) use(h wire.Header, slot uint32) useKey {
	slots := int(s.cfg.PoolBase) + s.cfg.Lanes*s.cfg.Engine.Window
	return useKey{int(h.Set)*slots + int(slot), h.Seq, h.PacketID}
}

// checkReuse runs before a switch sees a request: if the packet is about
// to start a fresh use of a (slot, set) that was used before, every worker
// under that switch must already hold the result of that previous use, or
// a worker that lost it could never recover it.
func (s *Sim) checkReuse(n int, src netip.AddrPort, h wire.Header) {
	nd := s.nodes[n]
	slots := nd.pipe.Config().Slots
	if int(h.Slot) >= slots || h.Slot < nd.slotBase {
		return
	}
	if _, fromSwitch := s.byNode[src]; fromSwitch && n < len(s.leafAccepted) {
		return // a result from the spine, not a request
	}
	idx := int(h.Set)*slots + int(h.Slot)
	bm, err := nd.pipe.ReadRegister(pipeline.RegPoolBitmap, idx)
	if err != nil {
		return
	}
	for _, w := range bm {
		if w != 0 {
			return
		}
	}
	cur := s.use(h, h.Slot-nd.slotBase+s.cfg.PoolBase)
	if prev, ok := nd.lastUse[idx]; ok {
		s.stats.SetReuses++
		got := s.accepted[prev]
		if n < len(s.leafAccepted) {
			got = s.leafAccepted[n][prev]
		}
		if got != nd.workers && s.err == nil {
			s.err = fmt.Errorf("sim: switch %d: (slot %d, set %d) reused by sequence %d packet %d while only %d of %d workers had the result of sequence %d packet %d",
				n, h.Slot, h.Set, h.Seq, h.PacketID, got, nd.workers, prev.seq, prev.pid)
		}
	}
	nd.lastUse[idx] = cur
}

func (s *Sim) atWorker(e event) {
	lane := s.ws[e.worker].lanes[e.lane]
	before := lane.Stats().Results
	lane.Receive(e.pkt, s.now)
	if lane.Stats().Results != before {
		s.stats.ResultsAcceptedByWorkers++
		if s.cfg.CheckSetReuse {
			h, _, _ := wire.Parse(e.pkt)
			k := s.use(h, h.Slot)
			if wk := s.ws[e.worker]; !wk.accepted[k] {
				wk.accepted[k] = true
				s.accepted[k]++
				s.leafAccepted[wk.leaf][k]++
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
	for i, nd := range s.nodes {
		c := nd.pipe.Counters()
		if s.cfg.Leaves >= 2 && i == len(s.nodes)-1 {
			s.stats.Spine = c
			continue
		}
		for k, v := range c {
			s.stats.Switch[k] += v
		}
	}
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
