// Package pipeline is the SwitchML switch data plane as a pure state
// machine: tables, packet replication engine (multicast groups), registers
// and counters, with the packet logic of the SwitchML switch: per slot two
// sets, each with a worker bitmap that makes retransmissions harmless, and
// the result multicast once every worker of the job has contributed.
//
// It has no sockets, goroutines or clocks. A driver (the software switch, the
// simulator, tests) hands it one packet at a time with Process and sends
// what comes back. Process allocates nothing once the caller's Output
// buffers have grown to packet size. The control-plane methods mirror the
// P4Info (p4/p4info), so a P4Runtime server can map table, multicast-group,
// register and counter requests onto them one to one. Callers serialise all
// calls (a mutex in the software switch).
package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

// Config sizes the switch memory.
type Config struct {
	// Slots is the number of aggregation slots; each has two sets.
	Slots int
	// MaxElements is the largest number of int32 values per packet.
	MaxElements int
	// MaxWorkers is the largest job size; it sets the bitmap width.
	MaxWorkers int
	// Auth makes the switch check a tag on every packet (an
	// authenticated data plane): a job's packets must carry the tag of
	// the job's key (InsertKey), and a packet whose tag is wrong or
	// missing, or that belongs to a job without a key, is dropped
	// (StatDropBadTag) before it touches any register. Results are tagged
	// too. Without Auth, tagged packets are dropped the same way: the
	// switch could neither check them nor tag their results.
	Auth bool
}

// Errors of the control-plane API.
var (
	ErrExists   = errors.New("pipeline: entry already exists")
	ErrNotFound = errors.New("pipeline: entry not found")
	ErrInvalid  = errors.New("pipeline: invalid entry")
)

// WorkerKey is the match key of the workers table: the source address and
// UDP port of one lane socket of one worker.
type WorkerKey struct{ Addr netip.AddrPort }

// ReplyKey is the match key of the reply_address table.
type ReplyKey struct {
	JobID uint32
	Rank  uint16
	Lane  uint8
}

// Reply is the action data of set_reply: where results for one lane of one
// rank go.
type Reply struct {
	MAC  [6]byte
	Addr netip.AddrPort
}

// Output receives the result of Process. Its slices are reused across calls
// (reset, then appended to), so a driver that keeps one Output allocates
// nothing in steady state.
type Output struct {
	// Packet is the reply (header and payload), valid when Dests is not
	// empty. Process builds it from Packet[:0], so a caller may hand in the
	// buffer the reply should be written to.
	Packet []byte
	// Dests are the destinations of Packet: every rank's reply address for a
	// multicast, the sender's for a retransmission reply.
	Dests []netip.AddrPort
	// Reason is the counter that says why no packet went out (meaningful
	// when Dests is empty): a drop, or StatAbsorbed for a contribution the
	// slot keeps until the others arrive.
	Reason switchjob.Stat
}

// Pipeline is the switch state. It is not safe for concurrent use, except
// for its Shards' Process calls among themselves (see Shard).
type Pipeline struct {
	cfg   Config
	words int // uint64 words per bitmap

	workers map[WorkerKey]switchjob.Worker
	// workersGen counts changes to workers: a workerCache filled at an
	// older generation is stale.
	workersGen uint64
	cache      workerCache // Process's; each Shard has its own
	// fanoutGen counts changes to replies and groups: a fanout cached at
	// an older generation is stale.
	fanoutGen uint64
	replies   map[ReplyKey]Reply
	groups    map[uint16][]switchjob.Replica
	uplinks   map[uint32]switchjob.Uplink // by JobID
	// keys holds each job's key and Taggers (Config.Auth), by JobID.
	keys map[uint32]*jobKey
	// parent, when valid, is the switch every job here is a leaf of: its
	// workers entries keep each job's uplink (see SetParent).
	parent netip.AddrPort

	// Registers, indexed by idx = set*Slots + slot.
	bitmap   []uint64 // words per idx
	count    []uint16 // countdown of missing contributions; 0 = idle or complete
	exponent []int8
	elements []uint16 // element count of the slot use in progress
	seq      []uint32 // sequence number and packet id of the slot use in progress
	packetID []uint32
	used     []bool   // seq and packetID hold a use since the last reset
	waiting  []bool   // a leaf's use complete here, the parent's result still missing
	asked    []uint16 // retransmissions a waiting use has seen
	lane     []uint8  // lane of the use's workers: where a parent's result goes
	// The block-sparse mode's part of a use (wire.Header.Sparse): the
	// block it sums (the directory's wire.DirectoryBlock) and the
	// minimum of its contributors' Next keys.
	sparse []bool
	block  []uint32
	next   []uint32
	values []int32 // MaxElements per idx

	stats [switchjob.NumStats]uint64

	// shards are the data-plane loops that may run Shard.Process
	// concurrently; owner[slot] is 1 + the index of the shard whose loop
	// serves the slot, 0 while none does.
	shards []*Shard
	owner  []atomic.Int32
}

// New returns an empty switch with all registers zero.
func New(cfg Config) (*Pipeline, error) {
	if cfg.Slots < 1 || cfg.Slots > switchjob.MaxSlots {
		return nil, fmt.Errorf("pipeline: Slots = %d, want 1..%d", cfg.Slots, switchjob.MaxSlots)
	}
	if cfg.MaxElements < 1 || cfg.MaxElements > wire.MaxElements {
		return nil, fmt.Errorf("pipeline: MaxElements = %d, want 1..%d", cfg.MaxElements, wire.MaxElements)
	}
	if cfg.MaxWorkers < 1 || cfg.MaxWorkers > switchjob.MaxWorkersCap {
		return nil, fmt.Errorf("pipeline: MaxWorkers = %d, want 1..%d", cfg.MaxWorkers, switchjob.MaxWorkersCap)
	}
	idxs := 2 * cfg.Slots
	words := (cfg.MaxWorkers + 63) / 64
	return &Pipeline{
		cfg:      cfg,
		words:    words,
		workers:  make(map[WorkerKey]switchjob.Worker),
		replies:  make(map[ReplyKey]Reply),
		groups:   make(map[uint16][]switchjob.Replica),
		uplinks:  make(map[uint32]switchjob.Uplink),
		keys:     make(map[uint32]*jobKey),
		bitmap:   make([]uint64, idxs*words),
		count:    make([]uint16, idxs),
		exponent: make([]int8, idxs),
		elements: make([]uint16, idxs),
		seq:      make([]uint32, idxs),
		packetID: make([]uint32, idxs),
		used:     make([]bool, idxs),
		waiting:  make([]bool, idxs),
		asked:    make([]uint16, idxs),
		lane:     make([]uint8, idxs),
		sparse:   make([]bool, idxs),
		block:    make([]uint32, idxs),
		next:     make([]uint32, idxs),
		values:   make([]int32, idxs*cfg.MaxElements),
		owner:    make([]atomic.Int32, cfg.Slots),
	}, nil
}

// Shard is one data-plane loop's entry into a Pipeline that several loops
// serve at once: each has its own counters, and each slot (both its sets)
// is served by one shard at a time, the first whose Process reaches it
// after a reset of the slot; a packet for that slot reaching another shard is
// dropped (StatDropWrongShard), so no two loops ever touch one slot's
// registers. Steering (which socket a lane sends to) keeps every packet of
// a slot on one shard; the ownership check is what makes that safe against
// packets that go astray.
//
// Shards' Process calls may run concurrently with each other, but not with
// any other method of the Pipeline: the software switch holds a read lock
// over a batch of Shard.Process calls and a write lock over control-plane
// calls.
type Shard struct {
	p     *Pipeline
	id    int32
	stats [switchjob.NumStats]uint64
	cache workerCache
}

// fanout is a multicast's destinations as the replies and groups give
// them: every rank's reply address, and how many ranks have none.
type fanout struct {
	gen     uint64
	valid   bool
	mgid    uint16
	lane    uint8
	jobID   uint32
	dests   []netip.AddrPort
	missing int
}

// fanoutWays is the size of a workerCache's table of fanouts: a switch's
// loop serves a few jobs' lanes at a time.
const fanoutWays = 16

// workerCache remembers the last workers entry a packet matched: a batch's
// packets come in runs from one sender, and the lookup by address is a
// large share of a packet's cost otherwise.
type workerCache struct {
	gen   uint64
	valid bool
	src   netip.AddrPort
	w     switchjob.Worker
	// fanouts remembers multicasts' destinations, saving a lookup per
	// rank of every result.
	fanouts [fanoutWays]fanout
}

// lookupWorker is p.workers[src] through c.
func (p *Pipeline) lookupWorker(c *workerCache, src netip.AddrPort) (switchjob.Worker, bool) {
	if c.valid && c.gen == p.workersGen && c.src == src {
		return c.w, true
	}
	w, ok := p.workers[WorkerKey{src}]
	if ok {
		c.gen, c.valid, c.src, c.w = p.workersGen, true, src, w
	}
	return w, ok
}

// NewShard adds a data-plane shard. With a single shard Process skips the
// ownership check: there is no other loop to collide with.
func (p *Pipeline) NewShard() *Shard {
	s := &Shard{p: p, id: int32(len(p.shards)) + 1}
	p.shards = append(p.shards, s)
	p.growTaggers()
	return s
}

// Process runs one packet through the pipeline like Pipeline.Process,
// counting in the shard's own counters.
func (s *Shard) Process(src netip.AddrPort, pkt []byte, out *Output) {
	id := s.id
	if len(s.p.shards) < 2 {
		id = 0
	}
	s.p.process(&s.stats, &s.cache, id, src, pkt, out)
}

// disown makes slots [first, first+count) free for any shard to take.
func (p *Pipeline) disown(first, count int) {
	for i := first; i < first+count; i++ {
		p.owner[i].Store(0)
	}
}

// Config returns the configuration the pipeline was built with.
func (p *Pipeline) Config() Config { return p.cfg }

// normalize makes IPv4-mapped IPv6 sources (as a dual-stack socket reports
// them) match IPv4 table entries.
func normalize(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

func (p *Pipeline) checkWorker(k WorkerKey, w switchjob.Worker) error {
	switch {
	case !k.Addr.IsValid():
		return fmt.Errorf("%w: worker address %v", ErrInvalid, k.Addr)
	case w.NumWorkers < 1 || int(w.NumWorkers) > p.cfg.MaxWorkers:
		return fmt.Errorf("%w: num_workers %d, switch supports 1..%d", ErrInvalid, w.NumWorkers, p.cfg.MaxWorkers)
	case w.Rank >= w.NumWorkers:
		return fmt.Errorf("%w: rank %d >= num_workers %d", ErrInvalid, w.Rank, w.NumWorkers)
	case w.PoolSize < 1 || uint64(w.PoolBase)+uint64(w.PoolSize) > uint64(p.cfg.Slots):
		return fmt.Errorf("%w: pool [%d, %d+%d) outside the switch's %d slots", ErrInvalid, w.PoolBase, w.PoolBase, w.PoolSize, p.cfg.Slots)
	}
	return nil
}

// InsertWorker adds a workers table entry.
func (p *Pipeline) InsertWorker(k WorkerKey, w switchjob.Worker) error {
	k.Addr = normalize(k.Addr)
	if err := p.checkWorker(k, w); err != nil {
		return err
	}
	if _, ok := p.workers[k]; ok {
		return fmt.Errorf("%w: worker %v", ErrExists, k.Addr)
	}
	p.workers[k] = w
	p.workersGen++
	p.followParent(w)
	return nil
}

// SetParent makes this switch a leaf of the switch at parent for every
// job: the workers table's entries give each job an uplink with the same
// partition at the parent as here (a controller that programs the whole
// tree places a job at the same slots on every switch). An invalid
// parent makes the switch a root again; explicit uplinks stay.
func (p *Pipeline) SetParent(parent netip.AddrPort) {
	if parent.IsValid() {
		parent = normalize(parent)
	}
	p.parent = parent
	if !parent.IsValid() {
		return
	}
	for _, w := range p.workers {
		p.followParent(w)
	}
}

// Parent returns the switch set by SetParent, if any.
func (p *Pipeline) Parent() (netip.AddrPort, bool) { return p.parent, p.parent.IsValid() }

// followParent keeps the uplink of w's job in step with its workers entry.
func (p *Pipeline) followParent(w switchjob.Worker) {
	if !p.parent.IsValid() {
		return
	}
	p.uplinks[w.JobID] = switchjob.Uplink{Parent: p.parent, ParentBase: w.PoolBase, PoolBase: w.PoolBase, PoolSize: w.PoolSize, MulticastGroup: w.MulticastGroup}
}

// forgetParent drops the uplink of a job whose last workers entry went.
func (p *Pipeline) forgetParent(jobID uint32) {
	if !p.parent.IsValid() {
		return
	}
	for _, w := range p.workers {
		if w.JobID == jobID {
			return
		}
	}
	delete(p.uplinks, jobID)
}

// ModifyWorker replaces an existing workers table entry.
func (p *Pipeline) ModifyWorker(k WorkerKey, w switchjob.Worker) error {
	k.Addr = normalize(k.Addr)
	if err := p.checkWorker(k, w); err != nil {
		return err
	}
	old, ok := p.workers[k]
	if !ok {
		return fmt.Errorf("%w: worker %v", ErrNotFound, k.Addr)
	}
	p.workers[k] = w
	p.workersGen++
	p.followParent(w)
	if old.JobID != w.JobID {
		p.forgetParent(old.JobID)
	}
	return nil
}

// DeleteWorker removes a workers table entry.
func (p *Pipeline) DeleteWorker(k WorkerKey) error {
	k.Addr = normalize(k.Addr)
	old, ok := p.workers[k]
	if !ok {
		return fmt.Errorf("%w: worker %v", ErrNotFound, k.Addr)
	}
	delete(p.workers, k)
	p.workersGen++
	p.forgetParent(old.JobID)
	return nil
}

// Workers calls fn for every workers entry in address order until fn
// returns false.
func (p *Pipeline) Workers(fn func(WorkerKey, switchjob.Worker) bool) {
	keys := make([]WorkerKey, 0, len(p.workers))
	for k := range p.workers {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b WorkerKey) int { return a.Addr.Compare(b.Addr) })
	for _, k := range keys {
		if !fn(k, p.workers[k]) {
			return
		}
	}
}

func checkReply(r Reply) error {
	if !r.Addr.IsValid() {
		return fmt.Errorf("%w: reply address %v", ErrInvalid, r.Addr)
	}
	return nil
}

// InsertReply adds a reply_address entry.
func (p *Pipeline) InsertReply(k ReplyKey, r Reply) error {
	if err := checkReply(r); err != nil {
		return err
	}
	if _, ok := p.replies[k]; ok {
		return fmt.Errorf("%w: reply %+v", ErrExists, k)
	}
	r.Addr = normalize(r.Addr)
	p.replies[k] = r
	p.fanoutGen++
	return nil
}

// ModifyReply replaces an existing reply_address entry.
func (p *Pipeline) ModifyReply(k ReplyKey, r Reply) error {
	if err := checkReply(r); err != nil {
		return err
	}
	if _, ok := p.replies[k]; !ok {
		return fmt.Errorf("%w: reply %+v", ErrNotFound, k)
	}
	r.Addr = normalize(r.Addr)
	p.replies[k] = r
	p.fanoutGen++
	return nil
}

// DeleteReply removes a reply_address entry.
func (p *Pipeline) DeleteReply(k ReplyKey) error {
	if _, ok := p.replies[k]; !ok {
		return fmt.Errorf("%w: reply %+v", ErrNotFound, k)
	}
	delete(p.replies, k)
	p.fanoutGen++
	return nil
}

// Replies calls fn for every reply_address entry in key order until fn
// returns false.
func (p *Pipeline) Replies(fn func(ReplyKey, Reply) bool) {
	keys := make([]ReplyKey, 0, len(p.replies))
	for k := range p.replies {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ReplyKey) int {
		switch {
		case a.JobID != b.JobID:
			return cmp3(a.JobID, b.JobID)
		case a.Rank != b.Rank:
			return cmp3(a.Rank, b.Rank)
		}
		return cmp3(a.Lane, b.Lane)
	})
	for _, k := range keys {
		if !fn(k, p.replies[k]) {
			return
		}
	}
}

func cmp3[T uint8 | uint16 | uint32](a, b T) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// InsertMulticastGroup adds a PRE multicast group. The replicas are copied.
func (p *Pipeline) InsertMulticastGroup(id uint16, replicas []switchjob.Replica) error {
	if _, ok := p.groups[id]; ok {
		return fmt.Errorf("%w: multicast group %d", ErrExists, id)
	}
	p.groups[id] = slices.Clone(replicas)
	p.fanoutGen++
	return nil
}

// ModifyMulticastGroup replaces the replicas of an existing group.
func (p *Pipeline) ModifyMulticastGroup(id uint16, replicas []switchjob.Replica) error {
	if _, ok := p.groups[id]; !ok {
		return fmt.Errorf("%w: multicast group %d", ErrNotFound, id)
	}
	p.groups[id] = slices.Clone(replicas)
	p.fanoutGen++
	return nil
}

// DeleteMulticastGroup removes a multicast group.
func (p *Pipeline) DeleteMulticastGroup(id uint16) error {
	if _, ok := p.groups[id]; !ok {
		return fmt.Errorf("%w: multicast group %d", ErrNotFound, id)
	}
	delete(p.groups, id)
	p.fanoutGen++
	return nil
}

// MulticastGroups calls fn for every group in id order until fn returns
// false. fn must not keep or modify the slice.
func (p *Pipeline) MulticastGroups(fn func(uint16, []switchjob.Replica) bool) {
	ids := make([]uint16, 0, len(p.groups))
	for id := range p.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !fn(id, p.groups[id]) {
			return
		}
	}
}

func (p *Pipeline) checkUplink(u switchjob.Uplink) error {
	switch {
	case !u.Parent.IsValid():
		return fmt.Errorf("%w: parent address %v", ErrInvalid, u.Parent)
	case u.PoolSize < 1 || uint64(u.PoolBase)+uint64(u.PoolSize) > uint64(p.cfg.Slots):
		return fmt.Errorf("%w: pool [%d, %d+%d) outside the switch's %d slots", ErrInvalid, u.PoolBase, u.PoolBase, u.PoolSize, p.cfg.Slots)
	case uint64(u.ParentBase)+uint64(u.PoolSize) > 1<<32-1:
		return fmt.Errorf("%w: parent pool [%d, %d+%d) beyond 32-bit slot numbers", ErrInvalid, u.ParentBase, u.ParentBase, u.PoolSize)
	}
	return nil
}

// InsertUplink makes this switch a leaf of u.Parent for job jobID.
func (p *Pipeline) InsertUplink(jobID uint32, u switchjob.Uplink) error {
	if err := p.checkUplink(u); err != nil {
		return err
	}
	if _, ok := p.uplinks[jobID]; ok {
		return fmt.Errorf("%w: uplink of job %d", ErrExists, jobID)
	}
	u.Parent = normalize(u.Parent)
	p.uplinks[jobID] = u
	return nil
}

// ModifyUplink replaces the uplink of job jobID.
func (p *Pipeline) ModifyUplink(jobID uint32, u switchjob.Uplink) error {
	if err := p.checkUplink(u); err != nil {
		return err
	}
	if _, ok := p.uplinks[jobID]; !ok {
		return fmt.Errorf("%w: uplink of job %d", ErrNotFound, jobID)
	}
	u.Parent = normalize(u.Parent)
	p.uplinks[jobID] = u
	return nil
}

// DeleteUplink makes job jobID's workers get their results from this
// switch again.
func (p *Pipeline) DeleteUplink(jobID uint32) error {
	if _, ok := p.uplinks[jobID]; !ok {
		return fmt.Errorf("%w: uplink of job %d", ErrNotFound, jobID)
	}
	delete(p.uplinks, jobID)
	return nil
}

// Uplinks calls fn for every uplink entry in job order until fn returns
// false.
func (p *Pipeline) Uplinks(fn func(uint32, switchjob.Uplink) bool) {
	ids := make([]uint32, 0, len(p.uplinks))
	for id := range p.uplinks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !fn(id, p.uplinks[id]) {
			return
		}
	}
}

// Register names (the P4Info aliases; the full names with the
// "SwitchMLIngress." prefix are accepted too).
const (
	RegPoolBitmap   = "pool_bitmap"
	RegPoolCount    = "pool_count"
	RegPoolExponent = "pool_exponent"
	RegPoolValues   = "pool_values"
)

func regName(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// RegisterSize returns the number of indices of a register:
// 2*Slots for pool_bitmap, pool_count and pool_exponent (index
// set*Slots + slot), 2*Slots*MaxElements for pool_values (index
// (set*Slots + slot)*MaxElements + element).
func (p *Pipeline) RegisterSize(name string) (int, error) {
	switch regName(name) {
	case RegPoolBitmap, RegPoolCount, RegPoolExponent:
		return 2 * p.cfg.Slots, nil
	case RegPoolValues:
		return len(p.values), nil
	}
	return 0, fmt.Errorf("%w: no register %q", ErrNotFound, name)
}

// ReadRegister returns the cells at index. pool_bitmap returns its
// (MaxWorkers+63)/64 words, rank r being bit r%64 of word r/64 (the P4Info's
// 32-bit cell is the low half of word 0); the other registers return one
// value (pool_exponent sign-extended).
func (p *Pipeline) ReadRegister(name string, index int) ([]int64, error) {
	size, err := p.RegisterSize(name)
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= size {
		return nil, fmt.Errorf("%w: %s index %d outside 0..%d", ErrInvalid, regName(name), index, size-1)
	}
	switch regName(name) {
	case RegPoolBitmap:
		out := make([]int64, p.words)
		for i, w := range p.bitmap[index*p.words : (index+1)*p.words] {
			out[i] = int64(w)
		}
		return out, nil
	case RegPoolCount:
		return []int64{int64(p.count[index])}, nil
	case RegPoolExponent:
		return []int64{int64(p.exponent[index])}, nil
	default:
		return []int64{int64(p.values[index])}, nil
	}
}

// WriteRegister sets the cells at index; values has the shape ReadRegister
// returns (pool_bitmap may be given fewer words, the rest become zero).
// Values are truncated to the register width (16 bits count, 8 bits
// exponent, 32 bits values); bitmap bits of ranks >= MaxWorkers are rejected
// because Process assumes they are never set.
func (p *Pipeline) WriteRegister(name string, index int, values []int64) error {
	size, err := p.RegisterSize(name)
	if err != nil {
		return err
	}
	if index < 0 || index >= size {
		return fmt.Errorf("%w: %s index %d outside 0..%d", ErrInvalid, regName(name), index, size-1)
	}
	switch regName(name) {
	case RegPoolBitmap:
		if len(values) > p.words {
			return fmt.Errorf("%w: pool_bitmap takes at most %d words, got %d", ErrInvalid, p.words, len(values))
		}
		if len(values) == p.words && p.cfg.MaxWorkers%64 != 0 {
			if uint64(values[p.words-1])>>(p.cfg.MaxWorkers%64) != 0 {
				return fmt.Errorf("%w: pool_bitmap bits beyond MaxWorkers %d", ErrInvalid, p.cfg.MaxWorkers)
			}
		}
		bm := p.bitmap[index*p.words : (index+1)*p.words]
		clear(bm)
		idle := true
		for i, v := range values {
			bm[i] = uint64(v)
			idle = idle && v == 0
		}
		if idle {
			// A controller zeroing a bitmap resets the slot for a new
			// job, whose sequence numbers and packet ids start anywhere:
			// the identity of the last use must go too, or the new job's
			// first packets would be taken for delayed old ones.
			p.used[index], p.waiting[index] = false, false
			p.seq[index], p.packetID[index], p.elements[index] = 0, 0, 0
			p.disown(index%p.cfg.Slots, 1)
		}
		return nil
	}
	if len(values) != 1 {
		return fmt.Errorf("%w: %s takes one value, got %d", ErrInvalid, regName(name), len(values))
	}
	switch regName(name) {
	case RegPoolCount:
		p.count[index] = uint16(values[0])
	case RegPoolExponent:
		p.exponent[index] = int8(values[0])
	default:
		p.values[index] = int32(values[0])
	}
	return nil
}

// ResetPool zeroes the bitmap, countdown and use identity of both sets of slots
// [first, first+count), making them idle: the controller calls it when a job
// (re)starts on a partition, since workers begin again with set 0.
func (p *Pipeline) ResetPool(first, count int) error {
	if first < 0 || count < 0 || first+count > p.cfg.Slots {
		return fmt.Errorf("%w: reset of slots [%d, %d+%d) outside 0..%d", ErrInvalid, first, first, count, p.cfg.Slots)
	}
	for set := 0; set < 2; set++ {
		lo := set*p.cfg.Slots + first
		clear(p.bitmap[lo*p.words : (lo+count)*p.words])
		clear(p.count[lo : lo+count])
		clear(p.elements[lo : lo+count])
		clear(p.seq[lo : lo+count])
		clear(p.packetID[lo : lo+count])
		clear(p.used[lo : lo+count])
		clear(p.waiting[lo : lo+count])
	}
	p.disown(first, count)
	return nil
}

// ClearRegisters zeroes every register of the pool, values and exponents
// included, as a freshly loaded program has them.
func (p *Pipeline) ClearRegisters() {
	clear(p.bitmap)
	clear(p.count)
	clear(p.exponent)
	clear(p.elements)
	clear(p.seq)
	clear(p.packetID)
	clear(p.used)
	clear(p.waiting)
	clear(p.sparse)
	clear(p.block)
	clear(p.next)
	clear(p.values)
	p.disown(0, p.cfg.Slots)
}

// Counter returns one stats counter, summed over the shards.
func (p *Pipeline) Counter(s switchjob.Stat) uint64 {
	if s >= switchjob.NumStats {
		return 0
	}
	return p.Counters()[s]
}

// Counters returns all stats counters, summed over the shards.
func (p *Pipeline) Counters() [switchjob.NumStats]uint64 {
	c := p.stats
	for _, sh := range p.shards {
		for i, v := range sh.stats {
			c[i] += v
		}
	}
	return c
}

// SetCounter overwrites a counter (P4Runtime counter writes, resets).
func (p *Pipeline) SetCounter(s switchjob.Stat, v uint64) error {
	if s >= switchjob.NumStats {
		return fmt.Errorf("%w: counter index %d, have %d", ErrInvalid, s, switchjob.NumStats)
	}
	p.stats[s] = v
	for _, sh := range p.shards {
		sh.stats[s] = 0
	}
	return nil
}

// noReply counts a packet that sends nothing under s, which also tells the
// driver why (out.Reason).
func noReply(st *[switchjob.NumStats]uint64, out *Output, s switchjob.Stat) {
	st[s]++
	out.Reason = s
}

// Process runs one packet from src through the pipeline. The reply, if any,
// is left in out.Packet with its destinations in out.Dests; otherwise
// out.Reason says why nothing went out. The reply has the request's format
// and header (sequence number, packet id, slot and set echoed) with Exp0
// replaced by the slot's maximum exponent and the payload by the slot's sums,
// and is marked as a result (wire.Header.Result), which no switch takes as a
// contribution (StatDropResult); a leaf's partial sums for its parent are
// not marked.
func (p *Pipeline) Process(src netip.AddrPort, pkt []byte, out *Output) {
	p.process(&p.stats, &p.cache, 0, src, pkt, out)
}

// process is Process counting in st; shard, unless 0, is the id of the
// calling Shard, which must own the packet's slot.
func (p *Pipeline) process(st *[switchjob.NumStats]uint64, cache *workerCache, shard int32, src netip.AddrPort, pkt []byte, out *Output) {
	out.Packet = out.Packet[:0]
	out.Dests = out.Dests[:0]
	out.Reason = switchjob.StatReceived
	st[switchjob.StatReceived]++

	w, h, payload, tg, ok := p.admit(st, cache, shard, src, pkt, out)
	if !ok {
		return
	}
	slots := p.cfg.Slots
	idx := int(h.Set)*slots + int(h.Slot)
	other := int(1-h.Set)*slots + int(h.Slot)
	word, bit := int(w.Rank)/64, uint64(1)<<(w.Rank%64)
	bm := p.bitmap[idx*p.words : (idx+1)*p.words]
	seen := bm[word]&bit != 0
	fresh := true
	for _, x := range bm {
		if x != 0 {
			fresh = false
			break
		}
	}
	// All contributions to one slot use describe the same block: same
	// element count, sequence number and packet id. Anything else is a packet
	// delayed from an earlier use of this (slot, set) or a confused sender;
	// adding it would corrupt the sum.
	if !fresh && !p.sameUse(idx, &h) {
		noReply(st, out, switchjob.StatDropMismatch)
		return
	}
	// In the extended format sequence numbers are 32 bits and never wrap
	// in practice, so uses of one (slot, set) carry strictly increasing
	// (sequence, packet id) until the pool is reset. A "fresh" packet that
	// is not newer than the last use is a request delayed in the network
	// beyond that use; starting a use with it would corrupt or stall the
	// next genuine one. The compatible format's 8-bit sequence number
	// wraps, so there only the case below is caught, and (as on the
	// reference switch) the network must not hold packets for several
	// round trips.
	//
	// In both formats a fresh packet identical to the last use is a
	// retransmission that was overtaken by its sender's next packet (which
	// cleared the sender's bit); our workers never reuse a packet id on a
	// slot, so this only drops stale copies.
	if fresh && p.used[idx] && (h.Seq == p.seq[idx] && h.PacketID == p.packetID[idx] ||
		h.Format == wire.FormatExtended && !newer(h.Seq, h.PacketID, p.seq[idx], p.packetID[idx])) {
		noReply(st, out, switchjob.StatDropStale)
		return
	}
	// A new contributor to a completed use can only be a duplicate from a
	// worker that has already moved on (its bit was cleared when it sent to
	// the other set). Touching the bitmaps would undo that worker's mark in
	// the set it is using now, so leave all state alone.
	if !seen && !fresh && p.count[idx] == 0 {
		noReply(st, out, switchjob.StatDropStale)
		return
	}

	bm[word] |= bit
	// Sending to set b means the worker has the result of set 1-b, so its
	// bit there is no longer needed to answer retransmissions; clearing it
	// is what lets set 1-b be reused (fresh) once every worker moved on.
	p.bitmap[other*p.words+word] &^= bit

	base := idx * p.cfg.MaxElements
	if seen {
		res := p.result(idx, &h)
		p.repeated(st, idx, w, &res, p.values[base:base+res.Elements], tg, out)
		return
	}

	st[switchjob.StatAggregated]++
	if fresh {
		// Overwrite instead of add: no reset is ever needed between uses.
		p.count[idx] = w.NumWorkers - 1
		p.exponent[idx] = h.Exp0
		p.elements[idx] = uint16(h.Elements)
		p.seq[idx] = h.Seq
		p.packetID[idx] = h.PacketID
		p.used[idx] = true
		p.waiting[idx] = false
		p.lane[idx] = w.Lane
		p.sparse[idx], p.block[idx], p.next[idx] = h.Sparse, h.Block, h.Next
		wire.ReadPayload(p.values[base:base+h.Elements], payload)
	} else {
		p.count[idx]--
		p.exponent[idx] = max(p.exponent[idx], h.Exp0)
		p.addContribution(idx, &h, payload)
	}
	if p.count[idx] != 0 {
		noReply(st, out, switchjob.StatAbsorbed)
		return
	}
	res := p.result(idx, &h)
	vals := p.values[base : base+res.Elements]

	if len(p.uplinks) != 0 {
		if _, ok := p.uplinks[w.JobID]; ok {
			p.waiting[idx], p.asked[idx] = true, 0
			p.upstream(st, switchjob.StatUpstream, w.JobID, &res, vals, p.exponent[idx], out)
			return
		}
	}
	p.multicast(st, cache, w.JobID, w.MulticastGroup, w.Lane, &res, vals, p.exponent[idx], tg, out)
}

// sameUse reports whether h is a contribution to the use in progress at
// idx. In the sparse mode a worker without values for the use's block
// sends none (Elements 0); the others must agree on the count.
func (p *Pipeline) sameUse(idx int, h *wire.Header) bool {
	if p.seq[idx] != h.Seq || p.packetID[idx] != h.PacketID || p.sparse[idx] != h.Sparse {
		return false
	}
	n := int(p.elements[idx])
	if !h.Sparse {
		return n == h.Elements
	}
	if p.block[idx] != h.Block {
		return false
	}
	if h.Block == wire.DirectoryBlock {
		return n == h.Elements
	}
	return n == h.Elements || n == 0 || h.Elements == 0
}

// addContribution folds a further contribution to the use at idx into
// it: a sum, or for a sparse directory the element-wise minimum of keys.
// A sparse use keeps the minimum of the Next keys too, and takes its
// element count from its first contribution with values.
func (p *Pipeline) addContribution(idx int, h *wire.Header, payload []byte) {
	base := idx * p.cfg.MaxElements
	if !h.Sparse {
		wire.AddPayload(p.values[base:base+h.Elements], payload)
		return
	}
	p.next[idx] = min(p.next[idx], h.Next)
	switch {
	case h.Elements == 0:
	case h.Block == wire.DirectoryBlock:
		vals := p.values[base : base+h.Elements]
		for i := range vals {
			k := binary.BigEndian.Uint32(payload[4*i:])
			vals[i] = int32(min(uint32(vals[i]), k))
		}
	case p.elements[idx] == 0:
		p.elements[idx] = uint16(h.Elements)
		wire.ReadPayload(p.values[base:base+h.Elements], payload)
	default:
		wire.AddPayload(p.values[base:base+h.Elements], payload)
	}
}

// result is the header of the result of the use at idx, which h
// contributed to: h's identity with the use's element count and, in the
// sparse mode, its minimum Next key.
func (p *Pipeline) result(idx int, h *wire.Header) wire.Header {
	res := *h
	res.Elements = int(p.elements[idx])
	if h.Sparse {
		res.Next = p.next[idx]
	}
	return res
}

// admit runs the checks a packet passes before it touches a slot: its
// sender is in the workers table (or, on a leaf, it is the parent's result),
// it parses, its tag verifies, its slot is in the sender's partition and,
// with several shards, served by this one. A packet that fails one is
// counted and answered with nothing (ok false).
func (p *Pipeline) admit(st *[switchjob.NumStats]uint64, cache *workerCache, shard int32, src netip.AddrPort, pkt []byte, out *Output) (w switchjob.Worker, h wire.Header, payload []byte, tg *wire.Tagger, ok bool) {
	w, ok = p.lookupWorker(cache, normalize(src))
	if !ok {
		if len(p.uplinks) == 0 || !p.fromParent(st, cache, shard, normalize(src), pkt, out) {
			noReply(st, out, switchjob.StatDropNotWorker)
		}
		return w, h, nil, nil, false
	}
	h, payload, err := wire.Parse(pkt)
	if err != nil || h.Elements > p.cfg.MaxElements {
		noReply(st, out, switchjob.StatDropMalformed)
		return w, h, nil, nil, false
	}
	// A switch's result is never a contribution, whoever sends it. A
	// lane whose address is another switch's data plane would otherwise
	// take that switch's results as contributions and answer them, and
	// two such switches would answer each other's answers without end.
	if h.Result {
		noReply(st, out, switchjob.StatDropResult)
		return w, h, nil, nil, false
	}
	// The tag is checked before anything else is read from the packet:
	// a forged packet must not touch a register, not even a bitmap.
	if p.cfg.Auth || h.Tagged {
		tg = p.tagger(w.JobID, shard)
		if tg == nil || !h.Tagged || !tg.VerifyRequest(pkt, w.Rank, w.Lane) {
			noReply(st, out, switchjob.StatDropBadTag)
			return w, h, nil, nil, false
		}
	}
	// The slot is absolute; a job may only touch its own partition, which is
	// what isolates concurrent jobs from each other.
	if h.Slot < w.PoolBase || h.Slot-w.PoolBase >= w.PoolSize {
		noReply(st, out, switchjob.StatDropOutOfPartition)
		return w, h, nil, nil, false
	}
	if shard != 0 {
		// Take the slot if no shard serves it; a slot another shard
		// serves is not ours to touch.
		o := &p.owner[h.Slot]
		if cur := o.Load(); cur != shard && (cur != 0 || !o.CompareAndSwap(0, shard)) {
			noReply(st, out, switchjob.StatDropWrongShard)
			return w, h, nil, nil, false
		}
	}
	return w, h, payload, tg, true
}

// repeated answers a worker's second contribution to the use of slot idx
// it is in: a retransmission. An incomplete use has nothing to answer with;
// a use waiting on the parent asks the parent again; a completed use
// answers the sender alone from the slot's copy.
func (p *Pipeline) repeated(st *[switchjob.NumStats]uint64, idx int, w switchjob.Worker, h *wire.Header, vals []int32, tg *wire.Tagger, out *Output) {
	if p.count[idx] != 0 {
		noReply(st, out, switchjob.StatDropIncompleteRetransmit)
		return
	}
	if p.waiting[idx] {
		// The partial sums or the parent's result were lost on the
		// hop above (or are late): ask the parent again. It answers a
		// repeated contribution to a completed use with the result.
		// Every worker here times out on the same loss, so only the
		// first of each round of their retransmissions goes up: the
		// hop above carries one copy per round, not one per worker.
		p.asked[idx]++
		if (p.asked[idx]-1)%w.NumWorkers != 0 {
			noReply(st, out, switchjob.StatDropIncompleteRetransmit)
			return
		}
		p.upstream(st, switchjob.StatUpstreamResend, w.JobID, h, vals, p.exponent[idx], out)
		return
	}
	// The sender lost the multicast: answer it alone.
	st[switchjob.StatRetransmitReply]++
	p.reply(out, h, vals, p.exponent[idx], tg, w.Lane)
	if r, ok := p.replies[ReplyKey{JobID: w.JobID, Rank: w.Rank, Lane: w.Lane}]; ok {
		out.Dests = append(out.Dests, r.Addr)
	} else {
		st[switchjob.StatDropNoReply]++
		out.Packet = out.Packet[:0]
		out.Reason = switchjob.StatDropNoReply
	}
}

// multicast sends a completed use's result to every rank of the group.
// tg, if not nil, tags the result.
func (p *Pipeline) multicast(st *[switchjob.NumStats]uint64, cache *workerCache, jobID uint32, mgid uint16, lane uint8, h *wire.Header, vals []int32, exp int8, tg *wire.Tagger, out *Output) {
	st[switchjob.StatMulticast]++
	f := p.fanout(cache, jobID, mgid, lane)
	if f == nil {
		noReply(st, out, switchjob.StatDropNoGroup)
		return
	}
	p.reply(out, h, vals, exp, tg, lane)
	st[switchjob.StatDropNoReply] += uint64(f.missing)
	out.Dests = append(out.Dests, f.dests...)
	st[switchjob.StatReplicas] += uint64(len(out.Dests))
	if len(out.Dests) == 0 {
		out.Packet = out.Packet[:0]
		out.Reason = switchjob.StatDropNoReply
	}
}

// fanout returns the destinations of group mgid's multicast for lane lane
// of job jobID, from cache when nothing changed since it was filled, or
// nil when the group does not exist.
func (p *Pipeline) fanout(cache *workerCache, jobID uint32, mgid uint16, lane uint8) *fanout {
	f := &cache.fanouts[(uint32(mgid)*31+jobID*7+uint32(lane))%fanoutWays]
	if f.valid && f.gen == p.fanoutGen && f.mgid == mgid && f.jobID == jobID && f.lane == lane {
		return f
	}
	group, ok := p.groups[mgid]
	if !ok {
		return nil
	}
	f.gen, f.valid, f.mgid, f.jobID, f.lane = p.fanoutGen, true, mgid, jobID, lane
	f.dests, f.missing = f.dests[:0], 0
	for _, r := range group {
		ra, ok := p.replies[ReplyKey{JobID: jobID, Rank: r.Instance, Lane: lane}]
		if !ok {
			f.missing++
			continue
		}
		f.dests = append(f.dests, ra.Addr)
	}
	return f
}

// upstream sends a leaf's partial sums for the use of h to the job's
// parent, in the parent's slot numbering.
func (p *Pipeline) upstream(st *[switchjob.NumStats]uint64, why switchjob.Stat, jobID uint32, h *wire.Header, vals []int32, exp int8, out *Output) {
	u := p.uplinks[jobID]
	st[why]++
	up := *h
	up.Slot = h.Slot - u.PoolBase + u.ParentBase
	// Partial sums are a contribution to the parent's aggregation, not
	// a result. The parent holds no key of this switch's jobs: they go
	// up untagged.
	up.Result = false
	p.write(out, &up, vals, exp, nil, 0)
	out.Dests = append(out.Dests, u.Parent)
}

// fromParent handles a packet from a source that is no worker: if it is a
// result from the parent of a job whose use is waiting for it, the result
// replaces the partial sums and goes to the job's workers. It reports
// whether the packet was a parent's (and counted).
func (p *Pipeline) fromParent(st *[switchjob.NumStats]uint64, cache *workerCache, shard int32, src netip.AddrPort, pkt []byte, out *Output) bool {
	fromParent := false
	for _, c := range p.uplinks {
		if c.Parent == src {
			fromParent = true
			break
		}
	}
	if !fromParent {
		return false
	}
	h, payload, err := wire.Parse(pkt)
	if err != nil || h.Elements > p.cfg.MaxElements {
		noReply(st, out, switchjob.StatDropMalformed)
		return true
	}
	// Several jobs may share a parent; their partitions there are
	// disjoint, so the slot says whose result this is.
	var jobID uint32
	var u switchjob.Uplink
	found := false
	for id, c := range p.uplinks {
		if c.Parent == src && h.Slot >= c.ParentBase && h.Slot-c.ParentBase < c.PoolSize {
			jobID, u, found = id, c, true
			break
		}
	}
	if !found {
		noReply(st, out, switchjob.StatDropOutOfPartition)
		return true
	}
	h.Slot = h.Slot - u.ParentBase + u.PoolBase
	if shard != 0 && p.owner[h.Slot].Load() != shard {
		noReply(st, out, switchjob.StatDropWrongShard)
		return true
	}
	idx := int(h.Set)*p.cfg.Slots + int(h.Slot)
	// Only the use that is waiting takes a result, and only the result of
	// that use: a copy delayed or duplicated on the hop above must not
	// overwrite a later use's sums.
	if !p.waiting[idx] || p.count[idx] != 0 || int(p.elements[idx]) != h.Elements || p.seq[idx] != h.Seq || p.packetID[idx] != h.PacketID {
		noReply(st, out, switchjob.StatDropStale)
		return true
	}
	p.waiting[idx] = false
	vals := p.values[idx*p.cfg.MaxElements : idx*p.cfg.MaxElements+h.Elements]
	wire.ReadPayload(vals, payload)
	p.exponent[idx] = h.Exp0
	var tg *wire.Tagger
	if p.cfg.Auth {
		if tg = p.tagger(jobID, shard); tg == nil {
			noReply(st, out, switchjob.StatDropBadTag)
			return true
		}
	}
	st[switchjob.StatFromParent]++
	p.multicast(st, cache, jobID, u.MulticastGroup, p.lane[idx], &h, vals, h.Exp0, tg, out)
	return true
}

// reply writes the result packet: the request header marked as a result
// (wire.Header.Result), with the slot's exponent, then the sums, then,
// with tg, the tag of lane's result.
func (p *Pipeline) reply(out *Output, req *wire.Header, vals []int32, exp int8, tg *wire.Tagger, lane uint8) {
	h := *req
	h.Result = true
	p.write(out, &h, vals, exp, tg, lane)
}

// write writes a packet with h's header, exponent exp and the payload
// vals, then, with tg, the tag of lane's result.
func (p *Pipeline) write(out *Output, req *wire.Header, vals []int32, exp int8, tg *wire.Tagger, lane uint8) {
	h := *req
	h.Exp0 = exp
	h.Tagged = tg != nil
	b, err := h.Append(out.Packet[:0])
	if err != nil {
		// Unreachable: h was parsed from a valid packet, so it re-encodes.
		return
	}
	out.Packet = wire.AppendPayload(b, vals)
	if tg != nil {
		out.Packet = tg.SealResult(out.Packet, lane)
	}
}

// newer reports whether (seq, id) comes after (seq0, id0) in serial number
// arithmetic (RFC 1982), which survives wrapping of either counter.
func newer(seq, id, seq0, id0 uint32) bool {
	if seq != seq0 {
		return int32(seq-seq0) > 0
	}
	return int32(id-id0) > 0
}
