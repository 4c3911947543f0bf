package controller

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/switchml/switchml-go/p4/controller/jobcore"
)

// TestPlacementEntriesRoundTrip: a placement the core made, turned into
// the switch's entries and read back as a restarted controller reads them,
// is the same placement (but for the key, which cannot be read back).
func TestPlacementEntriesRoundTrip(t *testing.T) {
	p := jobcore.Placement{JobID: 5, PoolBase: 8, PoolSize: 16, Group: 3, World: 2, Key: jobcore.Key("0123456789abcdef0123456789abcdef")}
	for rank := range uint16(2) {
		for lane := range uint8(2) {
			p.Workers = append(p.Workers, jobcore.Lane{Rank: rank, Lane: lane, Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rank + 1)}), 30000+uint16(lane)), MAC: [6]byte{2, 0, 0, 0, 0, byte(rank)}})
		}
		p.Members = append(p.Members, jobcore.Member{Port: 7 + uint32(rank), Rank: rank})
	}
	p.Replies = p.Workers
	j := entriesOf(p)
	if len(j.Workers) != 4 || len(j.Replies) != 4 || len(j.Replicas) != 2 || j.Key == nil {
		t.Fatalf("entries %+v, want 4 workers, 4 replies, 2 replicas and the key", j)
	}
	if w := j.Workers[3]; w.JobID != 5 || w.NumWorkers != 2 || w.MulticastGroup != 3 || w.PoolBase != 8 || w.PoolSize != 16 || w.Rank != 1 || w.Lane != 1 {
		t.Fatalf("worker entry %+v", w)
	}
	got := placementsOf(j.Workers, j.Replies, map[uint16][]Replica{3: j.Replicas})
	want := p
	want.Key = nil
	// The workers table holds no MAC: the reply entries do.
	want.Workers = nil
	for _, l := range p.Workers {
		l.MAC = [6]byte{}
		want.Workers = append(want.Workers, l)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
}
