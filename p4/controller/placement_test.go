package controller

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
)

// TestPlacementRoundTrip: a placement the core made, written to a switch
// and read back as a restarted controller reads it, is the same placement
// (but for the lanes' MACs, which only the reply entries hold).
func TestPlacementRoundTrip(t *testing.T) {
	target, _ := startSwitch(t)
	ctx := testCtx(t)
	c := dial(t, ctx, target, 1)
	if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	p := switchjob.Placement{JobID: 5, PoolBase: 8, PoolSize: 16, Group: 3, World: 2}
	for rank := range uint16(2) {
		for lane := range uint8(2) {
			p.Workers = append(p.Workers, switchjob.Lane{Rank: rank, Lane: lane, Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rank + 1)}), 30000+uint16(lane)), MAC: [6]byte{2, 0, 0, 0, 0, byte(rank)}})
		}
		p.Replicas = append(p.Replicas, switchjob.Replica{EgressPort: 7 + uint32(rank), Instance: rank})
	}
	p.Replies = p.Workers
	if err := c.InstallJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := p
	want.Workers = nil
	for _, l := range p.Workers {
		l.MAC = [6]byte{}
		want.Workers = append(want.Workers, l)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
}
