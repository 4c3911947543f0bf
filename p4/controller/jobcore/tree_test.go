package jobcore

import (
	"net/netip"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// twoLeaves is a tree of two leaves, 10.0.1.0/24 and 10.0.2.0/24.
func twoLeaves() Tree {
	leaf := func(net string, dp string) TreeSwitch {
		return TreeSwitch{Dataplane: netip.MustParseAddrPort(dp), Workers: []netip.Prefix{netip.MustParsePrefix(net)}}
	}
	return Tree{Spine: TreeSwitch{Dataplane: netip.MustParseAddrPort("10.0.0.1:48864")},
		Leaves: []TreeSwitch{leaf("10.0.1.0/24", "10.0.1.1:48864"), leaf("10.0.2.0/24", "10.0.2.1:48864")}, Name: "two leaves"}
}

// TestTreeDataplane: a rank sends to its leaf; a sparse job and a rank
// under no leaf are refused as invalid.
func TestTreeDataplane(t *testing.T) {
	tr := twoLeaves()
	lanes := []netip.AddrPort{netip.MustParseAddrPort("10.0.2.7:5000")}
	if dp, err := tr.Dataplane(1, false, lanes); err != nil || dp != netip.MustParseAddrPort("10.0.2.1:48864") {
		t.Errorf("rank under leaf 1: %v, %v; want leaf 1's data plane", dp, err)
	}
	if _, err := tr.Dataplane(1, true, lanes); status.Code(err) != codes.InvalidArgument {
		t.Errorf("sparse job on a tree: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := tr.Dataplane(1, false, []netip.AddrPort{netip.MustParseAddrPort("192.168.0.1:5000")}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("rank under no leaf: %v, want INVALID_ARGUMENT", err)
	}
}

// TestTreeSplit: ranks 0 and 2 under leaf 0, rank 1 under leaf 1: each
// leaf gets its ranks renumbered, the spine one worker per leaf.
func TestTreeSplit(t *testing.T) {
	p := switchjob.Placement{JobID: 4, PoolBase: 8, PoolSize: 4, Group: 2, World: 3}
	for r, h := range []string{"10.0.1.5", "10.0.2.5", "10.0.1.6"} {
		l := switchjob.Lane{Rank: uint16(r), Addr: netip.AddrPortFrom(netip.MustParseAddr(h), 5000)}
		p.Workers, p.Replies = append(p.Workers, l), append(p.Replies, l)
		p.Replicas = append(p.Replicas, switchjob.Replica{Instance: uint16(r)})
	}
	spine, leaves, err := twoLeaves().Split(p)
	if err != nil {
		t.Fatal(err)
	}
	if l0 := leaves[0]; l0 == nil || l0.World != 2 || l0.Workers[1].Rank != 1 || l0.Workers[1].Addr.Addr() != netip.MustParseAddr("10.0.1.6") || l0.Uplink != nil {
		t.Errorf("leaf 0: %+v; want ranks 0 and 2 as 0 and 1 of 2", l0)
	}
	if l1 := leaves[1]; l1 == nil || l1.World != 1 || l1.Workers[0].Rank != 0 || len(l1.Replicas) != 1 {
		t.Errorf("leaf 1: %+v; want rank 1 as 0 of 1", l1)
	}
	if spine.World != 2 || len(spine.Workers) != 2 || spine.Workers[1].Addr != netip.MustParseAddrPort("10.0.2.1:48864") || spine.PoolBase != 8 {
		t.Errorf("spine: %+v; want the two leaves' data planes as ranks 0 and 1, on slots 8..11", spine)
	}
}
