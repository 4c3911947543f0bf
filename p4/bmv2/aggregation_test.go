//go:build linux

package bmv2

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/v1model"
	"github.com/switchml/switchml-go/wire"
)

// The job the aggregation tests install: three ranks, rank r behind BMv2
// port r+1, a 64-slot partition at slot 100 of the program's 8192.
const (
	numRanks  = 3
	slotsPer  = 8192 // slots per set in the v1model program
	poolBase  = 100
	poolSize  = 64
	testJobID = 9
	testMgid  = 5
)

// Stats counter indices of the v1model program that the Go model counts
// the same way (switchjob.Stat values 0..8 and 13).
var sharedStats = []switchjob.Stat{
	switchjob.StatReceived, switchjob.StatAggregated, switchjob.StatMulticast, switchjob.StatRetransmitReply,
	switchjob.StatDropNotWorker, switchjob.StatDropMalformed, switchjob.StatDropOutOfPartition,
	switchjob.StatDropIncompleteRetransmit, switchjob.StatAbsorbed, switchjob.StatDropStale,
}

// Full names of the v1model program's pool registers (Thrift names them).
const (
	regBitmap   = "SwitchMLIngress." + pipeline.RegPoolBitmap
	regCount    = "SwitchMLIngress." + pipeline.RegPoolCount
	regExponent = "SwitchMLIngress." + pipeline.RegPoolExponent
	regValues   = "SwitchMLIngress." + pipeline.RegPoolValues
)

var switchEP = endpoint{MAC: [6]byte{0x02, 0x53, 0x4d, 0x4c, 0x00, 0xfe}, Addr: netip.MustParseAddrPort("10.0.0.254:48864")}

// numLanes is the number of lane sockets per rank the job has.
const numLanes = 2

// laneWorkerEP is where rank r's lane sends from.
func laneWorkerEP(r, lane int) endpoint {
	return endpoint{MAC: [6]byte{2, 0, 0, 0, 0, byte(r + 1)},
		Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(r + 1)}), uint16(40000+100*lane+r))}
}

// laneReplyEP is where the results for rank r's lane go. It differs from
// laneWorkerEP in every field, and across lanes, so that a reply the switch
// merely turned around, or addressed for another lane, is caught.
func laneReplyEP(r, lane int) endpoint {
	return endpoint{MAC: [6]byte{2, 0, 0, 0, byte(1 + lane), byte(r + 1)},
		Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(1 + lane), byte(r + 1)}), uint16(41000+100*lane+r))}
}

func workerEP(r int) endpoint { return laneWorkerEP(r, 0) }
func replyEP(r int) endpoint  { return laneReplyEP(r, 0) }

// rig is BMv2 running the v1model program with one job installed, three
// raw ports standing for the workers, and the Go model of the switch fed
// the same packets.
type rig struct {
	t      *testing.T
	ctx    context.Context
	sw     *Switch
	cl     *p4rt.Client
	th     *Thrift
	ports  []*rawPort
	model  *pipeline.Pipeline
	out    pipeline.Output
	rankOf map[netip.AddrPort]int

	sent    int64   // SwitchML frames sent
	ipID    uint16  // IPv4 identification of the next frame
	stats   []int64 // BMv2 counters after the last step
	mstats  [switchjob.NumStats]uint64
	touched map[int]bool // register indices (set*slots + slot) used
	steps   int
	errors  int // reported through errorf
}

// maxErrors bounds the mismatches reported in full; a systematic defect
// shows in the first few, and the summary counts the rest.
const maxErrors = 12

func (g *rig) errorf(format string, args ...any) {
	g.t.Helper()
	g.errors++
	switch {
	case g.errors <= maxErrors:
		g.t.Errorf(format, args...)
	case g.errors == maxErrors+1:
		g.t.Errorf("more mismatches follow; only the summary counts them")
	default:
		g.t.Fail()
	}
}

func newRig(t *testing.T) *rig {
	tools := needSwitch(t)
	jsonPath, _ := compiled(t, tools)
	js, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	bmPorts := map[uint32]string{}
	for r := 0; r < numRanks; r++ {
		vethPair(t, ifName("w", r), ifName("s", r))
		bmPorts[uint32(r+1)] = ifName("s", r)
	}
	sw := startSwitch(t, tools, bmPorts, "info")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	t.Cleanup(cancel)
	g := &rig{t: t, ctx: ctx, sw: sw, rankOf: map[netip.AddrPort]int{}, touched: map[int]bool{}}
	g.cl, err = p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.cl.Close() })
	// The checked-in P4Info is what the controller pushes to BMv2
	// (switchml controller --target-kind bmv2).
	if err := g.cl.SetPipeline(ctx, loadP4Info(t, v1model.P4InfoText), js, 0); err != nil {
		t.Fatal(err)
	}

	job := switchjob.Placement{JobID: testJobID, PoolBase: poolBase, PoolSize: poolSize, Group: testMgid, World: numRanks}
	g.model, err = pipeline.New(pipeline.Config{Slots: slotsPer, MaxElements: elements, MaxWorkers: 32})
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < numRanks; r++ {
		for lane := 0; lane < numLanes; lane++ {
			l := switchjob.Lane{Rank: uint16(r), Lane: uint8(lane), Addr: laneWorkerEP(r, lane).Addr}
			rep := switchjob.Lane{Rank: uint16(r), Lane: uint8(lane), MAC: laneReplyEP(r, lane).MAC, Addr: laneReplyEP(r, lane).Addr}
			job.Workers = append(job.Workers, l)
			job.Replies = append(job.Replies, rep)
			g.rankOf[rep.Addr] = r
			must(t, g.model.InsertWorker(pipeline.WorkerKey{Addr: l.Addr}, job.Worker(l)))
			must(t, g.model.InsertReply(pipeline.ReplyKey{JobID: testJobID, Rank: rep.Rank, Lane: rep.Lane}, pipeline.Reply{MAC: rep.MAC, Addr: rep.Addr}))
		}
		job.Replicas = append(job.Replicas, switchjob.Replica{EgressPort: uint32(r + 1), Instance: uint16(r)})
	}
	replicas := job.Replicas
	must(t, g.model.InsertMulticastGroup(testMgid, replicas))
	if err := g.cl.InstallJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	// BMv2's P4Runtime server has no register access (see
	// TestControllerResetPool), so the pool is reset through Thrift, as
	// the controller's ResetPool does it elsewhere: bitmap and countdown
	// of both sets.
	g.th, err = sw.Thrift(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.th.Close() })
	for _, reg := range []string{regBitmap, regCount} {
		for set := 0; set < 2; set++ {
			first := set*slotsPer + poolBase
			must(t, g.th.RegisterWriteRange(ctx, reg, first, first+poolSize, 0))
		}
	}
	must(t, g.model.ResetPool(poolBase, poolSize))

	for r := 0; r < numRanks; r++ {
		p, err := openRawPort(ifName("w", r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.close)
		g.ports = append(g.ports, p)
	}
	if g.stats, err = g.cl.ReadCounters(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// packet is one contribution (or retransmission) of a rank.
type packet struct {
	rank int
	hdr  wire.Header
	vals []int32

	// For the checks of what the switch must refuse:
	from *endpoint           // sender other than workerEP(rank) (another lane, a stranger)
	edit func([]byte) []byte // applied to the built frame
	// bmv2Only: the Go model cannot see what edit changed (Ethernet, IPv4,
	// UDP) or takes more than the v1model program; counter deltas are
	// checked against stats instead of the model's.
	bmv2Only bool
	// uncounted: the switch must not count it at all (not SwitchML).
	uncounted bool
	// stats are the counter moves this packet must cause (nil: not
	// checked, beyond BMv2 and the model agreeing). With bmv2Only they
	// are BMv2's; otherwise the model's, which BMv2's must equal.
	stats map[switchjob.Stat]int64
}

func (p packet) String() string {
	return fmt.Sprintf("rank %d slot %d set %d seq %d packet %#x exp %d", p.rank, p.hdr.Slot, p.hdr.Set, p.hdr.Seq, p.hdr.PacketID, p.hdr.Exp0)
}

// step sends p, waits until BMv2 has processed it, and checks what every
// rank received against want (nil: nothing) and against the Go model fed
// the same packet. It returns the frames each rank received.
func (g *rig) step(what string, p packet, want []*result) [][][]byte {
	t := g.t
	t.Helper()
	g.steps++
	label := fmt.Sprintf("%s: %v", what, p)
	for r, port := range g.ports {
		for _, b := range port.drain() {
			g.errorf("%s: before sending, a frame no step accounts for reached rank %d: %v", label, r, parseFrame(b))
		}
	}
	g.touched[int(p.hdr.Set)*slotsPer+int(p.hdr.Slot)] = true

	src := workerEP(p.rank)
	if p.from != nil {
		src = *p.from
	}
	fr, err := buildFrame(src, switchEP, g.ipID, p.hdr, p.vals)
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	g.ipID++
	if p.edit != nil {
		fr = p.edit(fr)
	}
	if !p.bmv2Only {
		before := g.model.Counters()
		g.model.Process(src.Addr, fr[ethLen+ipv4Len+udpLen:], &g.out)
		if p.stats != nil {
			after := g.model.Counters()
			for i := range after {
				if d := int64(after[i] - before[i]); d != p.stats[switchjob.Stat(i)] {
					g.errorf("%s: the model's counter %v moved by %d, want %d", label, switchjob.Stat(i), d, p.stats[switchjob.Stat(i)])
				}
			}
		}
	}
	if err := g.ports[p.rank].send(fr); err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	if p.uncounted {
		// Nothing to wait for: give the switch time to do something wrong.
		time.Sleep(50 * time.Millisecond)
	} else {
		g.sent++
		g.waitProcessed(label)
	}

	// Collect: every rank that should get a frame gets it within the
	// deadline; then a short grace catches duplicates and strays.
	got := make([][][]byte, numRanks)
	deadline := time.Now().Add(3 * time.Second)
	for {
		missing := false
		for r := range got {
			got[r] = append(got[r], g.ports[r].drain()...)
			if want[r] != nil && len(got[r]) == 0 {
				missing = true
			}
		}
		if !missing || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	for r := range got {
		got[r] = append(got[r], g.ports[r].drain()...)
	}

	for _, m := range checkStep(got, want) {
		g.errorf("%s: %s", label, m)
	}
	if p.bmv2Only {
		g.checkStats(label, p.stats)
		return got
	}
	for _, m := range g.compareModel(got) {
		g.errorf("%s: BMv2 and the Go model differ: %s", label, m)
	}
	g.compareStats(label)
	return got
}

// waitProcessed waits until BMv2's ingress has counted every frame sent.
func (g *rig) waitProcessed(label string) {
	t := g.t
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := g.cl.ReadCounters(g.ctx)
		if err != nil {
			t.Fatalf("%s: read counters: %v", label, err)
		}
		if len(st) > 0 && st[0] >= g.sent {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: BMv2 counted %v received after 5s, want %d: the frame did not reach the pipeline (counters %v)",
				label, st[:min(1, len(st))], g.sent, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// compareModel compares the frames each rank received with the model's
// output for the same packet: who gets a reply and its bytes.
func (g *rig) compareModel(got [][][]byte) []string {
	var out []string
	var want [numRanks]int
	for _, d := range g.out.Dests {
		r, ok := g.rankOf[d]
		if !ok {
			out = append(out, fmt.Sprintf("the model replied to %v, no rank's reply address", d))
			continue
		}
		want[r]++
	}
	for r := range got {
		if len(got[r]) != want[r] {
			why := ""
			if len(g.out.Dests) == 0 {
				why = fmt.Sprintf(" (the model sent nothing: %v)", g.out.Reason)
			}
			out = append(out, fmt.Sprintf("rank %d: BMv2 sent %d frames, the model %d%s", r, len(got[r]), want[r], why))
			continue
		}
		if want[r] == 0 {
			continue
		}
		f := parseFrame(got[r][0])
		if !bytes.Equal(f.SML, g.out.Packet) {
			mh, mp, err := wire.Parse(g.out.Packet)
			diff := ""
			if err == nil && f.Hdr == mh {
				for i := 0; i < mh.Elements && i < len(f.Vals); i++ {
					if mv := int32(uint32(mp[4*i])<<24 | uint32(mp[4*i+1])<<16 | uint32(mp[4*i+2])<<8 | uint32(mp[4*i+3])); mv != f.Vals[i] {
						diff = fmt.Sprintf(": first difference at value[%d]: BMv2 %d, model %d", i, f.Vals[i], mv)
						break
					}
				}
			}
			out = append(out, fmt.Sprintf("rank %d: BMv2 sent %+v, the model %+v (%v)%s", r, f.Hdr, mh, err, diff))
		}
	}
	return out
}

// compareStats checks that BMv2's counters moved as the model's did for
// the last packet. A counter read can fall between two counts of one
// packet's ingress pass, so a difference is read again before it counts.
func (g *rig) compareStats(label string) {
	t := g.t
	t.Helper()
	mnow := g.model.Counters()
	st, diffs, err := countersMoved(g.ctx, g.cl, sharedStats, g.stats, &g.mstats, &mnow)
	if err != nil {
		t.Fatalf("%s: read counters: %v", label, err)
	}
	g.stats, g.mstats = st, mnow
	if len(diffs) > 0 {
		g.errorf("%s: counters: %s", label, strings.Join(diffs, "; "))
	}
}

// countersMoved reads BMv2's counters and compares how each of stats moved
// since before with how the model's moved from mbefore to mnow. A read can
// fall between two counts of one packet's ingress pass, so a difference is
// read again, three reads at most. It returns the last read and the
// differences left.
func countersMoved(ctx context.Context, cl *p4rt.Client, stats []switchjob.Stat, before []int64, mbefore, mnow *[switchjob.NumStats]uint64) ([]int64, []string, error) {
	var diffs []string
	for try := 0; ; try++ {
		st, err := cl.ReadCounters(ctx)
		if err != nil {
			return nil, nil, err
		}
		diffs = diffs[:0]
		for _, s := range stats {
			if bm, md := at(st, int(s))-at(before, int(s)), int64(mnow[s]-mbefore[s]); bm != md {
				diffs = append(diffs, fmt.Sprintf("%v +%d on BMv2, +%d in the model", s, bm, md))
			}
		}
		if len(diffs) == 0 || try == 2 {
			return st, diffs, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkStats checks that BMv2's counters moved by want for the last packet
// (every other counter unchanged).
func (g *rig) checkStats(label string, want map[switchjob.Stat]int64) {
	t := g.t
	t.Helper()
	var diffs []string
	for try := 0; try < 3; try++ {
		st, err := g.cl.ReadCounters(g.ctx)
		if err != nil {
			t.Fatalf("%s: read counters: %v", label, err)
		}
		diffs = diffs[:0]
		for i := 0; i < max(len(st), len(g.stats)); i++ {
			if d := at(st, i) - at(g.stats, i); d != want[switchjob.Stat(i)] {
				diffs = append(diffs, fmt.Sprintf("counter %d (%v) +%d, want +%d", i, switchjob.Stat(i), d, want[switchjob.Stat(i)]))
			}
		}
		if len(diffs) == 0 || try == 2 {
			g.stats = st
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(diffs) > 0 {
		g.errorf("%s: counters: %s", label, strings.Join(diffs, "; "))
	}
}

func at(s []int64, i int) int64 {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// use is one aggregation on (slot, set): every rank contributes a block
// with its exponent.
type use struct {
	slot uint32
	set  uint8
	lane int // the ranks' lane sockets the use comes from and goes to
	seq  uint8
	pid  uint32
	exps [numRanks]int8
	vals [numRanks][]int32
}

func (u *use) packet(r int) packet {
	from := laneWorkerEP(r, u.lane)
	return packet{rank: r, vals: u.vals[r], from: &from, hdr: wire.Header{
		Format: wire.FormatCompat, Seq: uint32(u.seq), PacketID: u.pid, Set: u.set, Slot: u.slot,
		Exp0: u.exps[r], Exp1: int8(3*r + 1), Elements: elements,
	}}
}

// sum is the element-wise wrapping int32 sum and the largest exponent.
func (u *use) sum() ([]int32, int8) {
	s := make([]int32, elements)
	e := int8(math.MinInt8)
	for r := 0; r < numRanks; r++ {
		for i, v := range u.vals[r] {
			s[i] += v // wraps, as the switch's 32-bit adder does
		}
		e = max(e, u.exps[r])
	}
	return s, e
}

// result is what rank `to` must receive for this use, answering packet
// `by` (the completing contribution, or a retransmission).
func (u *use) result(to int, by packet) *result {
	vals, exp := u.sum()
	h := by.hdr
	h.Exp0 = exp
	h.Result = true
	return &result{Src: switchEP, Dst: laneReplyEP(to, u.lane), Hdr: h, Vals: vals}
}

// all is the multicast of a completed use answering packet by.
func (u *use) all(by packet) []*result {
	w := make([]*result, numRanks)
	for r := range w {
		w[r] = u.result(r, by)
	}
	return w
}

func nothing() []*result { return make([]*result, numRanks) }

// only is a reply to rank r alone.
func only(r int, w *result) []*result {
	s := nothing()
	s[r] = w
	return s
}

// run sends the contributions in the given order and checks that nothing
// comes back until the last, which every rank receives.
func (g *rig) run(what string, u *use, order []int) [][][]byte {
	var got [][][]byte
	for i, r := range order {
		p := u.packet(r)
		if i < len(order)-1 {
			g.step(fmt.Sprintf("%s, arrival %d of %d", what, i+1, len(order)), p, nothing())
		} else {
			got = g.step(fmt.Sprintf("%s, arrival %d of %d (completes)", what, i+1, len(order)), p, u.all(p))
		}
	}
	return got
}

// blockValues returns a rank's 64 values: the extremes and values whose
// sums wrap first, then random ones over the whole int32 range.
func blockValues(rng *rand.Rand, r int, zero bool) []int32 {
	v := make([]int32, elements)
	if zero {
		return v
	}
	v[0] = math.MaxInt32 // sum wraps past the top
	v[1] = math.MinInt32 // sum wraps past the bottom
	v[2] = -1
	v[3] = -int32(r+1) * 1000
	v[4] = []int32{math.MaxInt32, 1, -1}[r%3] // MaxInt32 + 1 - 1: wraps and comes back
	v[5] = int32(r) - 1                       // -1, 0, 1: sums to 0
	for i := 6; i < elements; i++ {
		v[i] = int32(rng.Uint32())
	}
	return v
}

var permutations = [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}

// exponentCases are per-rank block exponents: gradients put negative
// exponents on most blocks, different across ranks; -126 is an all-zero
// block, and the int8 extremes are there for the comparison's sign.
var exponentCases = []struct {
	name string
	exps [numRanks]int8
	zero [numRanks]bool // all-zero block (exponent -126)
}{
	{"negative, different", [numRanks]int8{-3, -7, -1}, [numRanks]bool{}},
	{"negative, same", [numRanks]int8{-7, -7, -7}, [numRanks]bool{}},
	{"all-zero blocks", [numRanks]int8{-126, -126, -126}, [numRanks]bool{true, true, true}},
	{"one non-zero block", [numRanks]int8{-126, -12, -126}, [numRanks]bool{true, false, true}},
	{"negative, descending", [numRanks]int8{-1, -2, -3}, [numRanks]bool{}},
	{"mixed signs", [numRanks]int8{4, -5, 0}, [numRanks]bool{}},
	{"int8 extremes", [numRanks]int8{-128, 127, -1}, [numRanks]bool{}},
	{"close negatives", [numRanks]int8{-40, -41, -39}, [numRanks]bool{}},
}

// TestAggregationOrders checks, on BMv2 running the v1model program, that
// a three-rank job aggregates correctly in every arrival order, with
// negative and differing exponents, zero blocks and wrapping sums, on
// several slots and both sets, and that retransmissions and the other-set
// bit clearing of design.md section 3 behave. Every packet also goes
// through the Go model of the switch (p4/pipeline), and the two must agree
// on who receives what and on their counters.
func TestAggregationOrders(t *testing.T) {
	g := newRig(t)
	start := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	slots := []uint32{poolBase, poolBase + 1, poolBase + 31, poolBase + poolSize - 1}
	nextSet := map[uint32]uint8{}
	uses := 0
	pid := uint32(0x1000)

	var badExp, badVals []string
	checkerChecked := false
	for _, c := range exponentCases {
		for _, order := range permutations {
			slot := slots[uses%len(slots)]
			u := &use{slot: slot, set: nextSet[slot], lane: uses / len(slots) % numLanes, seq: uint8(uses * 37), pid: pid, exps: c.exps}
			nextSet[slot] ^= 1
			pid += 0x10001
			for r := range u.vals {
				u.vals[r] = blockValues(rng, r, c.zero[r])
			}
			name := fmt.Sprintf("%s %v, order %v", c.name, c.exps, order)
			got := g.run(name, u, order)
			uses++
			// Once, on the first use BMv2 got right: the checker must
			// reject the same frames against wrong expectations.
			if want := u.all(u.packet(order[len(order)-1])); !checkerChecked && len(checkStep(got, want)) == 0 {
				checkTheChecker(t, got, want)
				checkerChecked = true
			}
			// Summary of what the ranks got, for the log.
			vals, exp := u.sum()
			for r := range got {
				if len(got[r]) != 1 {
					badVals = append(badVals, fmt.Sprintf("%s: rank %d got %d frames", name, r, len(got[r])))
					continue
				}
				f := parseFrame(got[r][0])
				if f.Hdr.Exp0 != exp {
					badExp = append(badExp, fmt.Sprintf("%s: exponent %d, want %d", name, f.Hdr.Exp0, exp))
				}
				if !slices.Equal(f.Vals, vals) {
					badVals = append(badVals, fmt.Sprintf("%s: rank %d's values differ", name, r))
				}
				break
			}
		}
	}
	t.Logf("%d uses (%d exponent cases x %d arrival orders) on slots %v, both sets, %d lanes: %d packets in %v",
		uses, len(exponentCases), len(permutations), slots, numLanes, g.sent, time.Since(start).Round(time.Millisecond))
	if !checkerChecked {
		t.Error("no use came out right, so the checker itself was not checked")
	}
	if len(badExp) > 0 {
		t.Errorf("the result's exponent is wrong in %d of %d uses:\n\t%s\n"+
			"A known cause: BMv2 does not sign-extend a register cell read into a signed field, so after "+
			"pool_exponent.read(exponent, idx) the int<8> local holds 253 for -3, and once the stored exponent is "+
			"negative no later contribution wins \"hdr.exponents.exp0 > exponent\" (BMv2 trace: \"read value 253\", "+
			"then that condition false for exp0 -1). Comparing offset-binary bits, "+
			"((bit<8>)hdr.exponents.exp0 ^ 0x80) > ((bit<8>)exponent ^ 0x80), does not depend on it.",
			len(badExp), uses, strings.Join(badExp, "\n\t"))
	}
	if len(badVals) > 0 {
		t.Errorf("the result's values are wrong in %d of %d uses:\n\t%s", len(badVals), uses, strings.Join(badVals, "\n\t"))
	}

	g.retransmissions(rng)
	g.compareRegisters()
	t.Logf("%d packets in all, %v", g.sent, time.Since(start).Round(time.Millisecond))
}

// retransmissions checks, on a slot of its own, the cases of design.md
// section 3 steps 2 and 4: a duplicate before completion is dropped (and
// not added twice), a retransmission for a complete set is answered to its
// sender only, and a contribution to the other set clears the sender's bit
// (after which its retransmission for the old set is no longer answered,
// and the old set starts afresh once every rank moved on).
func (g *rig) retransmissions(rng *rand.Rand) {
	const slot = poolBase + 5
	a := &use{slot: slot, set: 0, seq: 200, pid: 0xA0A0A0A0, exps: [numRanks]int8{-9, -4, -6}}
	b := &use{slot: slot, set: 1, seq: 201, pid: 0xB0B0B0B0, exps: [numRanks]int8{-2, -8, -8}}
	c := &use{slot: slot, set: 0, seq: 202, pid: 0xC0C0C0C0, exps: [numRanks]int8{-30, -31, -29}}
	for r := 0; r < numRanks; r++ {
		a.vals[r] = blockValues(rng, r, false)
		b.vals[r] = blockValues(rng, r, false)
		c.vals[r] = blockValues(rng, r, false)
	}
	idx0, idx1 := slot, slotsPer+slot

	g.step("set 0: rank 1 contributes", a.packet(1), nothing())
	g.step("set 0: rank 1's duplicate before completion is dropped", a.packet(1), nothing())
	g.step("set 0: rank 0 contributes", a.packet(0), nothing())
	g.step("set 0: rank 1's duplicate is dropped again", a.packet(1), nothing())
	g.step("set 0: rank 2 completes (each rank's block added once)", a.packet(2), a.all(a.packet(2)))

	g.step("set 0 complete: rank 2's retransmission is answered to rank 2 only", a.packet(2), only(2, a.result(2, a.packet(2))))
	g.step("set 0 complete: rank 0's retransmission is answered to rank 0 only", a.packet(0), only(0, a.result(0, a.packet(0))))
	g.expectBitmaps("set 0 complete", idx0, 0b111, idx1, 0)

	g.step("set 1: rank 1 moves on", b.packet(1), nothing())
	g.expectBitmaps("rank 1 sent to set 1", idx0, 0b101, idx1, 0b010)
	g.step("set 0: rank 1's late retransmission is stale (its bit is clear): dropped", a.packet(1), nothing())
	g.step("set 0: rank 0 (bit still set) is still answered", a.packet(0), only(0, a.result(0, a.packet(0))))
	g.step("set 1: rank 2 contributes", b.packet(2), nothing())
	g.step("set 1: rank 0 completes", b.packet(0), b.all(b.packet(0)))
	g.expectBitmaps("every rank sent to set 1", idx0, 0, idx1, 0b111)

	// Set 0 is fresh again: its next use overwrites, nothing of a leaks.
	// Rank 2 lost set 1's result: it retransmits while the others have
	// moved on to set 0, and is still answered.
	g.step("set 0 reused: rank 0", c.packet(0), nothing())
	g.expectBitmaps("rank 0 reused set 0", idx0, 0b001, idx1, 0b110)
	g.step("set 0 reused: rank 1", c.packet(1), nothing())
	g.step("set 1: rank 2 lost the result; its retransmission is answered to it alone", b.packet(2), only(2, b.result(2, b.packet(2))))
	g.step("set 0 reused: rank 2 completes", c.packet(2), c.all(c.packet(2)))
	g.expectBitmaps("every rank sent to set 0 again", idx0, 0b111, idx1, 0)
	g.step("set 0: rank 1 lost the result; its retransmission is answered to it alone", c.packet(1), only(1, c.result(1, c.packet(1))))
}

// expectBitmaps reads the worker bitmaps of two register indices from BMv2
// and the model and checks both against the protocol's.
func (g *rig) expectBitmaps(what string, idxA int, wantA uint64, idxB int, wantB uint64) {
	t := g.t
	t.Helper()
	for _, c := range []struct {
		idx  int
		want uint64
	}{{idxA, wantA}, {idxB, wantB}} {
		bm, err := g.th.RegisterRead(g.ctx, regBitmap, c.idx)
		if err != nil {
			t.Fatalf("%s: read pool_bitmap[%d]: %v", what, c.idx, err)
		}
		m, err := g.model.ReadRegister(pipeline.RegPoolBitmap, c.idx)
		if err != nil {
			t.Fatal(err)
		}
		if bm != c.want || uint64(m[0]) != c.want {
			t.Errorf("%s: pool_bitmap[set %d, slot %d] = %#b on BMv2, %#b in the model, want %#b",
				what, c.idx/slotsPer, c.idx%slotsPer, bm, m[0], c.want)
		}
	}
}

// compareRegisters compares the pool registers of every index the test
// used, BMv2 against the model.
func (g *rig) compareRegisters() {
	t := g.t
	idxs := slices.Sorted(maps.Keys(g.touched))
	for _, idx := range idxs {
		for _, reg := range []struct {
			name string
			bits int
		}{{pipeline.RegPoolBitmap, 32}, {pipeline.RegPoolCount, 16}, {pipeline.RegPoolExponent, 8}} {
			bm, err := g.th.RegisterRead(g.ctx, "SwitchMLIngress."+reg.name, idx)
			if err != nil {
				t.Fatalf("read %s[%d]: %v", reg.name, idx, err)
			}
			m, err := g.model.ReadRegister(reg.name, idx)
			if err != nil {
				t.Fatal(err)
			}
			if want := uint64(m[0]) & (1<<reg.bits - 1); bm != want {
				t.Errorf("%s[set %d, slot %d]: BMv2 %#x, model %#x", reg.name, idx/slotsPer, idx%slotsPer, bm, want)
			}
		}
		for e := 0; e < elements; e++ {
			v, err := g.th.RegisterRead(g.ctx, regValues, idx*elements+e)
			if err != nil {
				t.Fatalf("read pool_values[%d]: %v", idx*elements+e, err)
			}
			m, err := g.model.ReadRegister(pipeline.RegPoolValues, idx*elements+e)
			if err != nil {
				t.Fatal(err)
			}
			if int32(uint32(v)) != int32(m[0]) {
				t.Errorf("pool_values[set %d, slot %d][%d]: BMv2 %d, model %d", idx/slotsPer, idx%slotsPer, e, int32(uint32(v)), m[0])
				break
			}
		}
	}
	// Both ends agree on every counter the model keeps too.
	st, err := g.cl.ReadCounters(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc := g.model.Counters()
	for _, s := range sharedStats {
		if at(st, int(s)) != int64(mc[s]) {
			t.Errorf("counter %v: BMv2 %d, model %d", s, at(st, int(s)), mc[s])
		}
	}
	t.Logf("BMv2 counters: %v", st)
}

// checkTheChecker feeds the checker real frames from BMv2 with wrong
// expectations, each of which it must report: a test that cannot fail
// proves nothing.
func checkTheChecker(t *testing.T, got [][][]byte, want []*result) {
	t.Helper()
	clone := func() []*result {
		w := make([]*result, len(want))
		for i, x := range want {
			if x != nil {
				c := *x
				c.Vals = append([]int32(nil), x.Vals...)
				w[i] = &c
			}
		}
		return w
	}
	mutations := []struct {
		name   string
		mutate func(w []*result) []*result
	}{
		{"last value off by one", func(w []*result) []*result { w[1].Vals[elements-1]++; return w }},
		{"first value off by one", func(w []*result) []*result { w[0].Vals[0]--; return w }},
		{"exponent one higher", func(w []*result) []*result { w[2].Hdr.Exp0++; return w }},
		{"packet id", func(w []*result) []*result { w[0].Hdr.PacketID ^= 1; return w }},
		{"sequence number", func(w []*result) []*result { w[1].Hdr.Seq ^= 1; return w }},
		{"set", func(w []*result) []*result { w[2].Hdr.Set ^= 1; return w }},
		{"reply port", func(w []*result) []*result { w[0].Dst.Addr = netip.AddrPortFrom(w[0].Dst.Addr.Addr(), 1); return w }},
		{"reply MAC", func(w []*result) []*result { w[1].Dst.MAC[0] ^= 2; return w }},
		{"switch address", func(w []*result) []*result { w[2].Src.Addr = workerEP(2).Addr; return w }},
		{"a rank expecting nothing", func(w []*result) []*result { w[1] = nil; return w }},
		{"ranks swapped", func(w []*result) []*result { w[0], w[1] = w[1], w[0]; return w }},
	}
	for _, m := range mutations {
		if len(checkStep(got, m.mutate(clone()))) == 0 {
			t.Errorf("the checker accepted BMv2's frames against a wrong expectation (%s)", m.name)
		}
	}
	// A duplicate and a missing frame are caught too.
	dup := [][][]byte{got[0], append(append([][]byte(nil), got[1]...), got[1]...), got[2]}
	if len(checkStep(dup, want)) == 0 {
		t.Error("the checker accepted a duplicated reply")
	}
	if len(checkStep([][][]byte{got[0], nil, got[2]}, want)) == 0 {
		t.Error("the checker accepted a missing reply")
	}
}
