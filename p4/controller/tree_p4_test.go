package controller

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/switchjob"
)

const twoBMv2Leaves = `{"spine": {"p4runtime": "127.0.0.1:9559", "dataplane": "10.0.0.1:48864", "thrift": "127.0.0.1:9090", "mac": "02:00:00:00:00:01"},
 "leaves": [{"p4runtime": "127.0.0.1:9560", "dataplane": "10.0.1.1:48864", "thrift": "127.0.0.1:9091", "workers": ["10.0.1.0/24"], "uplink_port": 9, "port": 1, "mac": "02:00:00:00:01:01"},
            {"p4runtime": "127.0.0.1:9561", "dataplane": "10.0.2.1:48864", "thrift": "127.0.0.1:9092", "workers": ["10.0.2.0/24"], "uplink_port": 7, "port": 2}]}`

// TestHierarchTreeP4Uplinks: on a tree of P4 switches, each leaf's entries
// of a job carry its uplink (the spine's data plane, the leaf's port to
// it, the same slots), the spine's replicas the ports to the leaves and
// its replies the leaves' MACs; a software tree's entries carry no uplink.
func TestHierarchTreeP4Uplinks(t *testing.T) {
	topo, err := ParseTopology(strings.NewReader(twoBMv2Leaves))
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.checkP4(KindBMv2); err != nil {
		t.Fatal(err)
	}
	j := switchjob.Placement{JobID: 9, PoolBase: 16, PoolSize: 8, Group: 3, World: 4}
	for r, h := range []string{"10.0.1.5", "10.0.2.7", "10.0.1.6", "10.0.2.8"} {
		a := netip.AddrPortFrom(netip.MustParseAddr(h), 5000)
		j.Workers = append(j.Workers, switchjob.Lane{Rank: uint16(r), Addr: a})
		j.Replies = append(j.Replies, switchjob.Lane{Rank: uint16(r), Addr: a})
		j.Replicas = append(j.Replicas, switchjob.Replica{EgressPort: uint32(1 + r/2), Instance: uint16(r)})
	}
	for _, p4 := range []bool{true, false} {
		spine, l0, l1 := &recorder{}, &recorder{}, &recorder{}
		tree, err := NewTree(topo, spine, []Switch{l0, l1})
		if err != nil {
			t.Fatal(err)
		}
		tree.shape.Uplinks = p4
		if err := tree.InstallJob(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		for k, leaf := range []*recorder{l0, l1} {
			u, id := leaf.installed[0].Uplink, leaf.installed[0].JobID
			if !p4 {
				if u != nil {
					t.Errorf("software leaf %d got an uplink entry %+v", k, u)
				}
				continue
			}
			wantMAC := [6]byte{2, 0, 0, 0, 0, 1}
			if u == nil || id != 9 || u.Parent != netip.MustParseAddrPort("10.0.0.1:48864") || u.Port != []uint32{9, 7}[k] ||
				u.ParentBase != 16 || u.PoolBase != 16 || u.PoolSize != 8 || u.MulticastGroup != 3 || u.ParentMAC != wantMAC {
				t.Errorf("leaf %d uplink %+v: want job 9 to 10.0.0.1:48864 out of port %d, slots 16+8 on both, group 3, MAC %x", k, u, []uint32{9, 7}[k], wantMAC)
			}
		}
		s := spine.installed[0]
		if s.Uplink != nil || len(s.Replicas) != 2 || s.Replicas[0].EgressPort != 1 || s.Replicas[1].EgressPort != 2 ||
			s.Replies[0].MAC != [6]byte{2, 0, 0, 0, 1, 1} || s.Replies[1].MAC != [6]byte{} {
			t.Errorf("spine entries %+v: want replicas to ports 1 and 2, leaf 0's MAC in its reply entry, no uplink", s)
		}
	}
	// A leaf without a broadcast default MAC of the spine: frames go up to
	// broadcast.
	topo.Spine.mac = [6]byte{}
	l0 := &recorder{}
	tree, _ := NewTree(topo, &recorder{}, []Switch{l0, &recorder{}})
	tree.shape.Uplinks = true
	if err := tree.InstallJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if got := l0.installed[0].Uplink.ParentMAC; got != [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} {
		t.Errorf("uplink MAC without the spine's: %x, want broadcast", got)
	}
}

// TestHierarchTopologyP4Errors: what a tree of P4 switches needs beyond a
// software tree is asked for by name.
func TestHierarchTopologyP4Errors(t *testing.T) {
	for _, c := range []struct{ text, kind, want string }{
		{twoLeaves, KindBMv2, "no thrift address"},
		{strings.Replace(twoBMv2Leaves, `"uplink_port": 9, `, "", 1), KindBMv2, "needs uplink_port"},
		{strings.Replace(twoBMv2Leaves, `"port": 2`, `"port": 0`, 1), KindBMv2, "needs uplink_port"},
		{twoBMv2Leaves, KindTofino, "has no leaf role"},
		{strings.Replace(twoBMv2Leaves, `"mac": "02:00:00:00:00:01"`, `"mac": "02:00"`, 1), KindBMv2, "want an Ethernet address"},
	} {
		topo, err := ParseTopology(strings.NewReader(c.text))
		if err == nil {
			err = topo.checkP4(c.kind)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %s: %v, want an error saying %q", c.text, c.kind, err, c.want)
		}
	}
}
