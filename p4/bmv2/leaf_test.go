//go:build linux

package bmv2

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/v1model"
	"github.com/switchml/switchml-go/wire"
)

// The leaf test's job: two ranks behind BMv2 ports 1 and 2, the parent
// switch behind port 3, the job's partition at slot poolBase here and at
// leafParentBase there.
const (
	leafRanks      = 2
	leafParentPort = 3
	leafParentBase = 300
)

var leafParentEP = endpoint{MAC: [6]byte{0x02, 0x53, 0x4d, 0x4c, 0x00, 0x01}, Addr: netip.MustParseAddrPort("10.9.0.1:48864")}

// Counters the leaf role moves, beyond sharedStats.
var leafStats = []switchjob.Stat{switchjob.StatUpstream, switchjob.StatUpstreamResend, switchjob.StatFromParent}

// leafRig is BMv2 running the v1model program as a leaf: one job with an
// uplink (installed by the P4Runtime client, Placement.Uplink), raw
// ports for the two workers and for the parent, and the Go pipeline as a
// leaf of the same parent, fed the same packets.
type leafRig struct {
	t     *testing.T
	ctx   context.Context
	cl    *p4rt.Client
	ports []*rawPort // ranks 0, 1, then the parent
	model *pipeline.Pipeline
	out   pipeline.Output
	sent  int64
	ipID  uint16
	stats []int64
	mst   [switchjob.NumStats]uint64
}

func newLeafRig(t *testing.T) *leafRig {
	tools := needSwitch(t)
	jsonPath, _ := compiled(t, tools)
	js, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	bmPorts := map[uint32]string{}
	for i := 0; i <= leafRanks; i++ {
		vethPair(t, ifName("lw", i), ifName("ls", i))
		bmPorts[uint32(i+1)] = ifName("ls", i)
	}
	sw := startSwitch(t, tools, bmPorts, "info")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	t.Cleanup(cancel)
	g := &leafRig{t: t, ctx: ctx}
	if g.cl, err = p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.Addr()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.cl.Close() })
	if err := g.cl.SetPipeline(ctx, loadP4Info(t, v1model.P4InfoText), js, 0); err != nil {
		t.Fatal(err)
	}
	if g.model, err = pipeline.New(pipeline.Config{Slots: slotsPer, MaxElements: elements, MaxWorkers: 32}); err != nil {
		t.Fatal(err)
	}
	up := switchjob.Uplink{Parent: leafParentEP.Addr, ParentBase: leafParentBase, PoolBase: poolBase, PoolSize: poolSize, MulticastGroup: testMgid}
	job := switchjob.Placement{JobID: testJobID, PoolBase: poolBase, PoolSize: poolSize, Group: testMgid, World: leafRanks,
		Uplink: &switchjob.LeafUplink{Uplink: up, Port: leafParentPort, ParentMAC: leafParentEP.MAC}}
	for r := 0; r < leafRanks; r++ {
		l := switchjob.Lane{Rank: uint16(r), Addr: workerEP(r).Addr}
		job.Workers = append(job.Workers, l)
		job.Replies = append(job.Replies, switchjob.Lane{Rank: uint16(r), MAC: replyEP(r).MAC, Addr: replyEP(r).Addr})
		job.Replicas = append(job.Replicas, switchjob.Replica{EgressPort: uint32(r + 1), Instance: uint16(r)})
		must(t, g.model.InsertWorker(pipeline.WorkerKey{Addr: l.Addr}, job.Worker(l)))
		must(t, g.model.InsertReply(pipeline.ReplyKey{JobID: testJobID, Rank: uint16(r)}, pipeline.Reply{MAC: replyEP(r).MAC, Addr: replyEP(r).Addr}))
	}
	replicas := job.Replicas
	must(t, g.model.InsertMulticastGroup(testMgid, replicas))
	must(t, g.model.InsertUplink(testJobID, up))
	if err := g.cl.InstallJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	// The controller's pool reset, through Thrift.
	th, err := sw.Thrift(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.cl.SetRegisterBackend(th)
	t.Cleanup(func() { th.Close() })
	must(t, g.cl.ResetPool(ctx, poolBase, poolSize, slotsPer))
	must(t, g.model.ResetPool(poolBase, poolSize))
	for i := 0; i <= leafRanks; i++ {
		p, err := openRawPort(ifName("lw", i))
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

// step sends a packet from port `from` (a rank, or leafRanks for the
// parent), waits until BMv2 has counted it, and compares what every port
// received with what the Go model sends for the same packet: who gets a
// frame, its addresses and its SwitchML bytes, and the counters. want
// names the counter the model must move (besides received), so that each
// step shows the path it takes. It returns the frames per port.
func (g *leafRig) step(what string, from int, h wire.Header, vals []int32, want switchjob.Stat) [][][]byte {
	t := g.t
	t.Helper()
	src := leafParentEP
	if from < leafRanks {
		src = workerEP(from)
	}
	fr, err := buildFrame(src, switchEP, g.ipID, h, vals)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	g.ipID++
	before := g.model.Counters()
	g.model.Process(src.Addr, fr[ethLen+ipv4Len+udpLen:], &g.out)
	if d := g.model.Counters()[want] - before[want]; d != 1 {
		t.Fatalf("%s: the model moved %v by %d, want 1 (it sent %d packets: %v)", what, want, d, len(g.out.Dests), g.out.Reason)
	}
	if err := g.ports[from].send(fr); err != nil {
		t.Fatal(err)
	}
	g.sent++
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := g.cl.ReadCounters(g.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) > 0 && st[0] >= g.sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: BMv2 did not count the frame as received", what)
		}
		time.Sleep(time.Millisecond)
	}
	wantAt := make([]netip.AddrPort, len(g.ports))
	for _, d := range g.out.Dests {
		p := leafRanks
		for r := 0; r < leafRanks; r++ {
			if d == replyEP(r).Addr {
				p = r
			}
		}
		if p == leafRanks && d != leafParentEP.Addr {
			t.Fatalf("%s: the model sent to %v, neither a rank nor the parent", what, d)
		}
		wantAt[p] = d
	}
	got := make([][][]byte, len(g.ports))
	for {
		missing := false
		for p := range got {
			got[p] = append(got[p], g.ports[p].drain()...)
			missing = missing || wantAt[p].IsValid() && len(got[p]) == 0
		}
		if !missing || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // strays and duplicates
	for p := range got {
		got[p] = append(got[p], g.ports[p].drain()...)
		n := 0
		if wantAt[p].IsValid() {
			n = 1
		}
		if len(got[p]) != n {
			t.Errorf("%s: port %d got %d frames, the model sends %d there", what, p+1, len(got[p]), n)
			continue
		}
		if n == 0 {
			continue
		}
		f := parseFrame(got[p][0])
		for _, pr := range f.problems {
			t.Errorf("%s: port %d: %s", what, p+1, pr)
		}
		wantDst := endpoint{MAC: leafParentEP.MAC, Addr: wantAt[p]}
		if p < leafRanks {
			wantDst.MAC = replyEP(p).MAC
		}
		if f.Src != switchEP || f.Dst != wantDst {
			t.Errorf("%s: port %d: frame %v -> %v, want %v -> %v", what, p+1, f.Src, f.Dst, switchEP, wantDst)
		}
		if !bytes.Equal(f.SML, g.out.Packet) {
			mh, _, _ := wire.Parse(g.out.Packet)
			t.Errorf("%s: port %d: BMv2 sent %v, the model %+v", what, p+1, f, mh)
		}
	}
	g.compareStats(what)
	return got
}

// compareStats checks that BMv2's counters moved as the model's did.
func (g *leafRig) compareStats(what string) {
	t := g.t
	t.Helper()
	mnow := g.model.Counters()
	stats := append(append([]switchjob.Stat{}, sharedStats...), leafStats...)
	st, diffs, err := countersMoved(g.ctx, g.cl, stats, g.stats, &g.mst, &mnow)
	if err != nil {
		t.Fatal(err)
	}
	g.stats, g.mst = st, mnow
	if len(diffs) > 0 {
		t.Errorf("%s: counters: %s", what, strings.Join(diffs, "; "))
	}
}

// TestBMv2Leaf drives the v1model program's leaf role with hand-built
// frames, each compared packet for packet with p4/pipeline's leaf: the
// partial sums go up to the parent once both ranks have contributed, in
// the parent's slot numbering; retransmissions to the waiting use send
// them up again once per round of the ranks; the parent's result is taken
// only by the waiting use it belongs to and multicast to the ranks;
// results that are stale, duplicated or from a stranger are dropped; a
// retransmission after the result is answered from it.
func TestBMv2Leaf(t *testing.T) {
	g := newLeafRig(t)
	rng := rand.New(rand.NewPCG(7, 11))
	hdr := func(slot uint32, set uint8, seq, id uint32, exp int8) wire.Header {
		return wire.Header{Format: wire.FormatCompat, Elements: elements, Slot: slot, Set: set, Seq: seq, PacketID: id, Exp0: exp}
	}
	vals := func() []int32 {
		v := make([]int32, elements)
		for i := range v {
			v[i] = rng.Int32() >> 4
		}
		return v
	}
	// up returns the one frame that went to the parent.
	up := func(got [][][]byte) frame {
		if len(got[leafRanks]) != 1 {
			t.Fatalf("want one frame to the parent, got %d", len(got[leafRanks]))
		}
		return parseFrame(got[leafRanks][0])
	}
	// parentResult is the parent's answer to partial sums f, with another
	// leaf's contribution added and exponent exp.
	parentResult := func(f frame, other []int32, exp int8) (wire.Header, []int32) {
		h := f.Hdr
		h.Exp0 = exp
		sum := make([]int32, len(f.Vals))
		for i := range sum {
			sum[i] = f.Vals[i] + other[i]
		}
		return h, sum
	}

	for round, c := range []struct {
		slot      uint32
		set       uint8
		seq, id   uint32
		exps      [2]int8
		parentExp int8
	}{
		{poolBase + 3, 0, 1, 0x1000, [2]int8{-5, -3}, -2},
		{poolBase + 3, 1, 2, 0x1001, [2]int8{4, 4}, 5},
		{poolBase + 3, 0, 3, 0x1002, [2]int8{0, -128}, 127}, // set 0 again: a fresh use
		{poolBase + poolSize - 1, 0, 4, 0x2000, [2]int8{-1, 1}, 1},
	} {
		name := func(s string) string { return fmt.Sprintf("use %d: %s", round, s) }
		v0, v1 := vals(), vals()
		g.step(name("rank 0 contributes"), 0, hdr(c.slot, c.set, c.seq, c.id, c.exps[0]), v0, switchjob.StatAbsorbed)
		partial := up(g.step(name("rank 1 completes: partial sums go up"), 1, hdr(c.slot, c.set, c.seq, c.id, c.exps[1]), v1, switchjob.StatUpstream))
		if want := c.slot - poolBase + leafParentBase; partial.Hdr.Slot != want {
			t.Errorf("%s: partial sums for slot %d at the parent, want %d", name("up"), partial.Hdr.Slot, want)
		}
		// Retransmissions while waiting: the first of each round of the
		// two ranks goes up again.
		g.step(name("rank 0 retransmits: sent up again"), 0, hdr(c.slot, c.set, c.seq, c.id, c.exps[0]), v0, switchjob.StatUpstreamResend)
		g.step(name("rank 1 retransmits in the same round: dropped"), 1, hdr(c.slot, c.set, c.seq, c.id, c.exps[1]), v1, switchjob.StatDropIncompleteRetransmit)
		g.step(name("rank 1 retransmits again: sent up again"), 1, hdr(c.slot, c.set, c.seq, c.id, c.exps[1]), v1, switchjob.StatUpstreamResend)

		other := vals()
		rh, rv := parentResult(partial, other, c.parentExp)
		stale := rh
		stale.PacketID++
		g.step(name("a result of another use (packet id): dropped"), leafRanks, stale, rv, switchjob.StatDropStale)
		stale = rh
		stale.Seq++
		g.step(name("a result of another use (sequence number): dropped"), leafRanks, stale, rv, switchjob.StatDropStale)
		got := g.step(name("the parent's result: multicast"), leafRanks, rh, rv, switchjob.StatFromParent)
		for r := 0; r < leafRanks; r++ {
			if len(got[r]) == 1 {
				if f := parseFrame(got[r][0]); f.Hdr.Slot != c.slot || f.Hdr.Exp0 != c.parentExp {
					t.Errorf("%s: rank %d got slot %d exponent %d, want slot %d exponent %d", name("result"), r, f.Hdr.Slot, f.Hdr.Exp0, c.slot, c.parentExp)
				}
			}
		}
		g.step(name("the parent's result again: dropped"), leafRanks, rh, rv, switchjob.StatDropStale)
		g.step(name("rank 0 lost the result: answered from it"), 0, hdr(c.slot, c.set, c.seq, c.id, c.exps[0]), v0, switchjob.StatRetransmitReply)
	}
	// A stranger sending from another address is no parent.
	stranger := leafParentEP
	stranger.Addr = netip.AddrPortFrom(stranger.Addr.Addr(), stranger.Addr.Port()+1)
	fr, err := buildFrame(stranger, switchEP, 1, hdr(leafParentBase, 0, 9, 9, 0), vals())
	if err != nil {
		t.Fatal(err)
	}
	before := g.model.Counters()[switchjob.StatDropNotWorker]
	g.model.Process(stranger.Addr, fr[ethLen+ipv4Len+udpLen:], &g.out)
	if g.model.Counters()[switchjob.StatDropNotWorker] != before+1 {
		t.Fatal("the model took a stranger's packet")
	}
	must(t, g.ports[leafRanks].send(fr))
	g.sent++
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := g.cl.ReadCounters(g.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if at(st, 0) >= g.sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("BMv2 did not count the stranger's frame")
		}
		time.Sleep(time.Millisecond)
	}
	g.compareStats("a stranger's packet")
	time.Sleep(20 * time.Millisecond)
	for p, port := range g.ports {
		if n := len(port.drain()); n != 0 {
			t.Errorf("a stranger's packet: %d frames reached port %d", n, p+1)
		}
	}
}
