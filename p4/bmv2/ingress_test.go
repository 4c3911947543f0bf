//go:build linux

package bmv2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/wire"
)

// statDropSimulated is the v1model program's counter of contributions its
// drop simulator discarded.
const statDropSimulated = switchjob.Stat(31)

// fixLengths rewrites the IPv4 total length, the UDP length and the IPv4
// checksum of a frame whose payload was changed.
func fixLengths(fr []byte) []byte {
	ip := fr[ethLen:]
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[ipv4Len+4:], uint16(len(ip)-ipv4Len))
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], ^onesSum(ip[:ipv4Len]))
	return fr
}

// TestIngressChecks sends what the switch must refuse (unknown senders,
// a switch's result offered as a contribution, slots outside the partition, sizes and formats the v1model program does
// not take, damaged headers, other traffic) and checks that nothing comes
// back and that the right counter moves; a use that follows still
// aggregates.
func TestIngressChecks(t *testing.T) {
	g := newRig(t)
	rng := rand.New(rand.NewPCG(3, 4))
	u := &use{slot: poolBase + 9, seq: 17, pid: 0x5151, exps: [numRanks]int8{-6, -2, -4}}
	for r := range u.vals {
		u.vals[r] = blockValues(rng, r, false)
	}
	stranger := workerEP(0)
	stranger.Addr = netip.AddrPortFrom(stranger.Addr.Addr(), 39999)
	received := func(s switchjob.Stat) map[switchjob.Stat]int64 {
		return map[switchjob.Stat]int64{switchjob.StatReceived: 1, s: 1}
	}
	malformed := received(switchjob.StatDropMalformed)
	withSlot := func(slot uint32) packet {
		p := u.packet(0)
		p.hdr.Slot, p.stats = slot, received(switchjob.StatDropOutOfPartition)
		return p
	}

	cases := []struct {
		what string
		p    packet
	}{
		{"unknown sender (source port)", func() packet {
			p := u.packet(0)
			p.from, p.stats = &stranger, received(switchjob.StatDropNotWorker)
			return p
		}()},
		{"a switch's result (the header's result bit) from a worker's address", func() packet {
			p := u.packet(0)
			p.hdr.Result, p.stats = true, received(switchjob.StatDropResult)
			return p
		}()},
		{"slot below the partition", withSlot(poolBase - 1)},
		{"slot just past the partition", withSlot(poolBase + poolSize)},
		{"largest 14-bit slot", withSlot(wire.MaxCompatSlot)},
		{"payload cut short (size code 1, 32 values)", func() packet {
			p := u.packet(0)
			p.edit = func(fr []byte) []byte { return fixLengths(fr[:len(fr)-128]) }
			p.stats = malformed
			return p
		}()},
		{"128-byte packet (size code 0), which only the software switch takes", func() packet {
			p := u.packet(0)
			p.hdr.Elements, p.vals = 32, p.vals[:32]
			p.bmv2Only, p.stats = true, malformed
			return p
		}()},
		{"extended header, which only the software switch takes", func() packet {
			p := u.packet(0)
			p.hdr.Format = wire.FormatExtended
			p.bmv2Only, p.stats = true, malformed
			return p
		}()},
		{"bad IPv4 header checksum", func() packet {
			p := u.packet(0)
			p.edit = func(fr []byte) []byte { fr[ethLen+11] ^= 0x40; return fr }
			p.bmv2Only, p.stats = true, malformed
			return p
		}()},
		{"UDP to another port (not SwitchML)", func() packet {
			p := u.packet(0)
			p.edit = func(fr []byte) []byte { binary.BigEndian.PutUint16(fr[ethLen+ipv4Len+2:], 53); return fr }
			p.bmv2Only, p.uncounted = true, true
			return p
		}()},
	}
	for _, c := range cases {
		g.step(c.what+" is dropped", c.p, nothing())
	}
	// None of it touched the slot: a use there still aggregates.
	g.run("use after the refused packets", u, []int{2, 0, 1})
}

// arpFrame builds an ARP request (op 1) or reply (op 2).
func arpFrame(op uint16, dstMAC, senderMAC [6]byte, senderIP netip.Addr, targetMAC [6]byte, targetIP netip.Addr) []byte {
	b := append([]byte(nil), dstMAC[:]...)
	b = append(b, senderMAC[:]...)
	b = append(b, 0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4)
	b = binary.BigEndian.AppendUint16(b, op)
	s4, t4 := senderIP.As4(), targetIP.As4()
	b = append(b, senderMAC[:]...)
	b = append(b, s4[:]...)
	b = append(b, targetMAC[:]...)
	return append(b, t4[:]...)
}

// exchange sends a frame on rank's port and returns what every port
// received within wait.
func (g *rig) exchange(rank int, fr []byte, wait time.Duration) [][][]byte {
	for _, p := range g.ports {
		p.drain()
	}
	if err := g.ports[rank].send(fr); err != nil {
		g.t.Fatal(err)
	}
	time.Sleep(wait)
	got := make([][][]byte, numRanks)
	for r, p := range g.ports {
		got[r] = p.drain()
	}
	return got
}

// TestARPAndSimulatedLoss drives the v1model program's own tables through
// the controller: the ARP responder (InstallARPReply) and the drop
// simulator (SetSimulatedLoss) on the way in and on the way out.
func TestARPAndSimulatedLoss(t *testing.T) {
	g := newRig(t)
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	me := workerEP(0)
	ask := func(ip netip.Addr) []byte {
		return arpFrame(1, bcast, me.MAC, me.Addr.Addr(), [6]byte{}, ip)
	}
	ctr := func() []int64 {
		st, err := g.cl.ReadCounters(g.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	before := ctr()
	if got := g.exchange(0, ask(switchEP.Addr.Addr()), 100*time.Millisecond); len(got[0])+len(got[1])+len(got[2]) != 0 {
		t.Errorf("ARP request answered before any arp_reply entry: %x", got)
	}
	if err := g.cl.InstallARPReply(g.ctx, switchEP.Addr.Addr(), switchEP.MAC); err != nil {
		t.Fatal(err)
	}
	got := g.exchange(0, ask(switchEP.Addr.Addr()), 100*time.Millisecond)
	want := arpFrame(2, me.MAC, switchEP.MAC, switchEP.Addr.Addr(), me.MAC, me.Addr.Addr())
	if len(got[0]) != 1 || !bytes.Equal(got[0][0], want) || len(got[1])+len(got[2]) != 0 {
		t.Errorf("ARP reply: ports got %x\nwant on rank 0's port only: %x", got, want)
	}
	if got := g.exchange(0, ask(netip.MustParseAddr("10.0.0.77")), 100*time.Millisecond); len(got[0])+len(got[1])+len(got[2]) != 0 {
		t.Errorf("ARP request for another address answered: %x", got)
	}
	if after := ctr(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("ARP traffic moved the SwitchML counters: %v -> %v", before, after)
	}
	g.stats = ctr()

	rng := rand.New(rand.NewPCG(5, 6))
	u := &use{slot: poolBase + 12, seq: 33, pid: 0x7777, exps: [numRanks]int8{-11, -13, -12}}
	for r := range u.vals {
		u.vals[r] = blockValues(rng, r, false)
	}
	lossy := func(r int, stats map[switchjob.Stat]int64) packet {
		p := u.packet(r)
		p.bmv2Only, p.stats = true, stats
		return p
	}
	// Rates are out of 65536: 0.99998 drops all but one packet in 65536.
	if err := g.cl.SetSimulatedLoss(g.ctx, 0.99998, 0); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < numRanks; r++ {
		g.step(fmt.Sprintf("ingress loss: rank %d's contribution is lost", r),
			lossy(r, map[switchjob.Stat]int64{switchjob.StatReceived: 1, statDropSimulated: 1}), nothing())
	}
	if err := g.cl.SetSimulatedLoss(g.ctx, 0, 0.99998); err != nil {
		t.Fatal(err)
	}
	absorbed := map[switchjob.Stat]int64{switchjob.StatReceived: 1, switchjob.StatAggregated: 1, switchjob.StatAbsorbed: 1}
	g.step("egress loss: rank 1 contributes", lossy(1, absorbed), nothing())
	g.step("egress loss: rank 2 contributes", lossy(2, absorbed), nothing())
	g.step("egress loss: rank 0 completes, every copy of the result is lost", lossy(0,
		map[switchjob.Stat]int64{switchjob.StatReceived: 1, switchjob.StatAggregated: 1, switchjob.StatMulticast: 1}), nothing())
	if err := g.cl.SetSimulatedLoss(g.ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	p := lossy(2, map[switchjob.Stat]int64{switchjob.StatReceived: 1, switchjob.StatRetransmitReply: 1})
	g.step("loss off: rank 2's retransmission gets the result", p, only(2, u.result(2, p)))
}
