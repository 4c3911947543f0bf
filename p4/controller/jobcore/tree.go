package jobcore

// A two-level tree of switches that the job service sees as one switch:
// a job placed on the one switch becomes each leaf's placement (its
// workers, ranked among themselves) and the spine's (one worker per leaf
// the job uses, sending from the leaf's data plane).

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/switchml/switchml-go/p4/switchjob"
)

// Tree is the shape of a tree of switches, as splitting a placement needs it.
type Tree struct {
	Spine  TreeSwitch
	Leaves []TreeSwitch
	// Uplinks: the leaves are P4 switches, whose jobs each get an uplink
	// entry (Placement.Uplink) instead of following a parent of their own.
	Uplinks bool
	// Name describes the tree in errors.
	Name string
}

// TreeSwitch is one switch of a Tree.
type TreeSwitch struct {
	// Dataplane is the address the switch's data plane is bound to, and
	// MAC its Ethernet address (zero: unknown).
	Dataplane netip.AddrPort
	MAC       [6]byte
	// Workers are the address prefixes of a leaf's workers.
	Workers []netip.Prefix
	// Port is the spine's port cabled to a leaf, UplinkPort the leaf's
	// port cabled to the spine (P4 leaves only).
	Port, UplinkPort uint32
}

// LeafOf returns the index of the leaf a worker address attaches to.
func (t Tree) LeafOf(a netip.Addr) (int, bool) {
	a = a.Unmap()
	for i, l := range t.Leaves {
		for _, p := range l.Workers {
			if p.Contains(a) {
				return i, true
			}
		}
	}
	return 0, false
}

// broadcastMAC addresses a parent whose Ethernet address is unknown.
var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Split makes each switch's placement from a job's placement on the tree as
// one switch: the job sits at the same slots on every switch. Leaves
// without workers of the job get none (nil).
func (t Tree) Split(p switchjob.Placement) (spine switchjob.Placement, leaves []*switchjob.Placement, err error) {
	leaves = make([]*switchjob.Placement, len(t.Leaves))
	leafOf := map[uint16]int{}        // global rank -> leaf
	local := map[uint16]uint16{}      // global rank -> rank at its leaf
	addrOf := map[uint16]netip.Addr{} // global rank -> its first lane's address
	for _, w := range p.Workers {
		if _, ok := addrOf[w.Rank]; !ok {
			addrOf[w.Rank] = w.Addr.Addr()
		}
	}
	counts := make([]uint16, len(t.Leaves))
	for _, r := range slices.Sorted(maps.Keys(addrOf)) {
		addr := addrOf[r]
		l, ok := t.LeafOf(addr)
		if !ok {
			return spine, nil, fmt.Errorf("rank %d's address %v is under no leaf of the topology (%s); add its prefix to a leaf's workers", r, addr, t.Name)
		}
		leafOf[r], local[r] = l, counts[l]
		counts[l]++
	}
	at := func(l int) *switchjob.Placement {
		if leaves[l] == nil {
			leaves[l] = &switchjob.Placement{JobID: p.JobID, PoolBase: p.PoolBase, PoolSize: p.PoolSize, Group: p.Group, World: int(counts[l])}
		}
		return leaves[l]
	}
	for _, w := range p.Workers {
		l := leafOf[w.Rank]
		lw := w
		lw.Rank = local[w.Rank]
		at(l).Workers = append(at(l).Workers, lw)
	}
	for _, r := range p.Replies {
		l := leafOf[r.Rank]
		if leaves[l] == nil {
			return spine, nil, fmt.Errorf("reply entry for rank %d, which has no worker entry", r.Rank)
		}
		lr := r
		lr.Rank = local[r.Rank]
		leaves[l].Replies = append(leaves[l].Replies, lr)
	}
	for _, rep := range p.Replicas {
		l := leafOf[rep.Instance]
		if leaves[l] == nil {
			return spine, nil, fmt.Errorf("replica for rank %d, which has no worker entry", rep.Instance)
		}
		lrep := rep
		lrep.Instance = local[rep.Instance]
		leaves[l].Replicas = append(leaves[l].Replicas, lrep)
	}
	// The spine: one worker per leaf in use, all lanes from the leaf's one
	// data-plane address.
	spine = switchjob.Placement{JobID: p.JobID, PoolBase: p.PoolBase, PoolSize: p.PoolSize, Group: p.Group}
	for _, e := range leaves {
		if e != nil {
			spine.World++
		}
	}
	rank := uint16(0)
	for l, e := range leaves {
		if e == nil {
			continue
		}
		leaf := t.Leaves[l]
		spine.Workers = append(spine.Workers, switchjob.Lane{Rank: rank, Addr: leaf.Dataplane})
		spine.Replies = append(spine.Replies, switchjob.Lane{Rank: rank, MAC: leaf.MAC, Addr: leaf.Dataplane})
		spine.Replicas = append(spine.Replicas, switchjob.Replica{EgressPort: leaf.Port, Instance: rank})
		if t.Uplinks {
			mac := t.Spine.MAC
			if mac == ([6]byte{}) {
				mac = broadcastMAC
			}
			e.Uplink = &switchjob.LeafUplink{Port: leaf.UplinkPort, ParentMAC: mac, Uplink: switchjob.Uplink{
				Parent: t.Spine.Dataplane, ParentBase: p.PoolBase, PoolBase: p.PoolBase, PoolSize: p.PoolSize, MulticastGroup: p.Group,
			}}
		}
		rank++
	}
	return spine, leaves, nil
}

// Dataplane is the data plane a rank whose lanes send from addrs sends to:
// its leaf's (a rank without lanes: none). The sparse mode, whose
// directory a tree does not carry, and a rank under no leaf are refused.
func (t Tree) Dataplane(rank uint32, sparse bool, addrs []netip.AddrPort) (netip.AddrPort, error) {
	if sparse {
		return netip.AddrPort{}, Invalid("the sparse mode runs on a single software switch, and this controller programs a tree of switches: join without switchml.Config.Sparse, or through a controller of one switch")
	}
	if len(addrs) == 0 {
		return netip.AddrPort{}, nil
	}
	l, ok := t.LeafOf(addrs[0].Addr())
	if !ok {
		return netip.AddrPort{}, Invalid("rank %d sends from %v, which is under no leaf of the controller's topology (%s); add its prefix to a leaf's workers, or bind the worker to a listed address",
			rank, addrs[0].Addr(), t.Name)
	}
	return t.Leaves[l].Dataplane, nil
}
