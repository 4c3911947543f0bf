package controller

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
)

const twoLeaves = `{"spine": {"p4runtime": "10.0.0.1:9559", "dataplane": "10.0.0.1:48864"},
 "leaves": [{"p4runtime": "10.0.1.1:9559", "dataplane": "10.0.1.1:48864", "workers": ["10.0.1.0/24"]},
            {"name": "east", "p4runtime": "10.0.2.1:9559", "dataplane": "10.0.2.1:48864", "workers": ["10.0.2.7", "10.0.3.0/24"]}]}`

func TestHierarchTopologyParse(t *testing.T) {
	topo, err := ParseTopology(strings.NewReader(twoLeaves))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr string
		leaf int
		ok   bool
	}{{"10.0.1.9", 0, true}, {"10.0.2.7", 1, true}, {"10.0.3.200", 1, true}, {"10.0.2.8", 0, false}, {"::ffff:10.0.1.3", 0, true}} {
		l, ok := topo.LeafOf(netip.MustParseAddr(c.addr))
		if ok != c.ok || ok && l != c.leaf {
			t.Errorf("LeafOf(%s) = %d, %v; want %d, %v", c.addr, l, ok, c.leaf, c.ok)
		}
	}
	if topo.Leaves[0].Name != "leaf0" || topo.Leaves[1].Name != "east" || topo.Spine.Name != "spine" {
		t.Errorf("names %s, %s, %s", topo.Spine.Name, topo.Leaves[0].Name, topo.Leaves[1].Name)
	}
}

func TestHierarchTopologyErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`{"spine": {"p4runtime": "a:1", "dataplane": "10.0.0.1:1"}}`, "no leaves"},
		{`{"spine": {"p4runtime": "a:1", "dataplane": "10.0.0.1:1"}, "leaves": [{"p4runtime": "b:1", "dataplane": "10.0.1.1:1"}]}`, "lists no workers"},
		{`{"spine": {"p4runtime": "a:1", "dataplane": "0.0.0.0:1"}, "leaves": [{"p4runtime": "b:1", "dataplane": "10.0.1.1:1", "workers": ["10.0.1.0/24"]}]}`, "bound to"},
		{`{"spine": {"p4runtime": "a:1", "dataplane": "10.0.0.1:1"}, "leaves": [{"p4runtime": "b:1", "dataplane": "10.0.0.1:1", "workers": ["10.0.1.0/24"]}]}`, "share the data plane"},
		{`{"spine": {"p4runtime": "a:1", "dataplane": "10.0.0.1:1"}, "leaves": [{"p4runtime": "b:1", "dataplane": "10.0.1.1:1", "workers": ["10.0.0.0/16"]}, {"p4runtime": "c:1", "dataplane": "10.0.2.1:1", "workers": ["10.0.2.0/24"]}]}`, "overlap"},
		{`{"spine": {"p4runtime": "a:1", "dataplane": "10.0.0.1:1"}, "leaves": [{"p4runtime": "b:1", "dataplane": "10.0.1.1:1", "workers": ["ten"]}]}`, "want an address or a prefix"},
		{`{"spine": {"p4runtime": "a:1", "dataplane": "10.0.0.1:1", "workers": ["10.0.0.0/24"]}, "leaves": []}`, "no leaves"},
		{`{"spine": {"p4runtime": "a:1", "dataplane": "10.0.0.1:1"}, "leafs": []}`, "unknown field"},
		{`{"spine": {"dataplane": "10.0.0.1:1"}, "leaves": [{"p4runtime": "b:1", "dataplane": "10.0.1.1:1", "workers": ["10.0.1.0/24"]}]}`, "no p4runtime"},
	} {
		_, err := ParseTopology(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTopology(%s) = %v, want an error saying %q", c.text, err, c.want)
		}
	}
}

// recorder is a Switch that keeps what it was asked to install.
type recorder struct {
	installed, removed []switchjob.Placement
	resets             int
	fail               error
}

func (r *recorder) InstallJob(_ context.Context, j switchjob.Placement) error {
	if r.fail != nil {
		return r.fail
	}
	r.installed = append(r.installed, j)
	return nil
}
func (r *recorder) RemoveJob(_ context.Context, j switchjob.Placement) error {
	r.removed = append(r.removed, j)
	return nil
}
func (r *recorder) ResetPool(context.Context, int, int, int) error { r.resets++; return nil }

// TestHierarchTreeSplit: a 4-rank job, ranks 0 and 2 under leaf 0 and
// ranks 1 and 3 under the second leaf, two lanes each.
func TestHierarchTreeSplit(t *testing.T) {
	topo, err := ParseTopology(strings.NewReader(twoLeaves))
	if err != nil {
		t.Fatal(err)
	}
	spine, l0, l1 := &recorder{}, &recorder{}, &recorder{}
	tree, err := NewTree(topo, spine, []Switch{l0, l1})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"10.0.1.5", "10.0.2.7", "10.0.1.6", "10.0.3.1"}
	j := splitJob(hosts)
	if err := tree.ResetPool(context.Background(), 16, 8, 512); err != nil {
		t.Fatal(err)
	}
	if err := tree.InstallJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if spine.resets != 1 || l0.resets != 1 || l1.resets != 1 {
		t.Errorf("pool resets: spine %d, leaves %d and %d; want one each", spine.resets, l0.resets, l1.resets)
	}
	for k, leaf := range []*recorder{l0, l1} {
		checkLeafInstall(t, k, leaf, hosts)
	}
	checkSpineInstall(t, spine)
	// A rank under no leaf cannot be placed; a failing spine undoes the
	// leaves' installs.
	bad := j
	bad.Workers = append([]switchjob.Lane(nil), j.Workers...)
	bad.Workers[0].Addr = netip.MustParseAddrPort("192.168.0.1:5000")
	if err := tree.InstallJob(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "under no leaf") {
		t.Errorf("rank outside the topology: %v", err)
	}
	spine.fail = errors.New("spine down")
	if err := tree.InstallJob(context.Background(), j); err == nil || !strings.Contains(err.Error(), "spine down") {
		t.Errorf("failing spine: %v", err)
	}
	if len(l0.removed) != 1 || len(l1.removed) != 1 {
		t.Errorf("after the spine failed the leaves had %d and %d removals, want 1 each", len(l0.removed), len(l1.removed))
	}
}

// splitJob is job 9 of one rank per host, two lanes each, in group
// 3 on pool slots 16 to 24.
func splitJob(hosts []string) switchjob.Placement {
	j := switchjob.Placement{JobID: 9, PoolBase: 16, PoolSize: 8, Group: 3, World: 4}
	for r, h := range hosts {
		for lane := range 2 {
			a := netip.AddrPortFrom(netip.MustParseAddr(h), uint16(5000+lane))
			j.Workers = append(j.Workers, switchjob.Lane{Rank: uint16(r), Lane: uint8(lane), Addr: a})
			j.Replies = append(j.Replies, switchjob.Lane{Rank: uint16(r), Lane: uint8(lane), Addr: a})
		}
		j.Replicas = append(j.Replicas, switchjob.Replica{Instance: uint16(r)})
	}
	return j
}

// checkLeafInstall checks leaf k got one install of its two ranks (global
// ranks k and k+2) as local ranks 0 and 1 of 2, on the job's pool slots.
func checkLeafInstall(t *testing.T, k int, leaf *recorder, hosts []string) {
	t.Helper()
	if len(leaf.installed) != 1 {
		t.Fatalf("leaf %d: %d installs", k, len(leaf.installed))
	}
	e := leaf.installed[0]
	if len(e.Workers) != 4 || len(e.Replies) != 4 || len(e.Replicas) != 2 || e.Group != 3 {
		t.Fatalf("leaf %d entries %+v: want 2 ranks x 2 lanes, 2 replicas, group 3", k, e)
	}
	for _, w := range e.Workers {
		// Global ranks k and k+2 become local ranks 0 and 1.
		wantLocal := uint16(0)
		if w.Addr.Addr() == netip.MustParseAddr(hosts[k+2]) {
			wantLocal = 1
		}
		if e.World != 2 || w.Rank != wantLocal || e.PoolBase != 16 || e.PoolSize != 8 {
			t.Errorf("leaf %d worker %v: rank %d of %d, pool %d+%d; want rank %d of 2, pool 16+8", k, w.Addr, w.Rank, e.World, e.PoolBase, e.PoolSize, wantLocal)
		}
	}
}

// checkSpineInstall checks the spine got one install with the two leaves'
// data planes as its ranks 0 and 1 of 2.
func checkSpineInstall(t *testing.T, spine *recorder) {
	t.Helper()
	if len(spine.installed) != 1 {
		t.Fatalf("spine: %d installs", len(spine.installed))
	}
	s := spine.installed[0]
	if len(s.Workers) != 2 || s.Workers[0].Addr != netip.MustParseAddrPort("10.0.1.1:48864") || s.Workers[1].Addr != netip.MustParseAddrPort("10.0.2.1:48864") ||
		s.Workers[1].Rank != 1 || s.World != 2 || len(s.Replies) != 2 || s.Replies[1].Addr != s.Workers[1].Addr {
		t.Fatalf("spine entries %+v: want the two leaves' data planes as ranks 0 and 1 of 2", s)
	}
}
