package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// Topology describes a two-level tree of switches that one controller
// programs as one: leaves aggregate the workers attached to them and pass
// their partial sums up to the spine, whose result comes back down. Each
// leaf must run as a leaf of the spine (`switchml switch --parent` with the
// spine's data-plane address); the controller places every job at the same
// slots on every switch.
//
// The file is JSON:
//
//	{"spine":  {"p4runtime": "10.0.0.1:9559", "dataplane": "10.0.0.1:48864"},
//	 "leaves": [{"p4runtime": "10.0.1.1:9559", "dataplane": "10.0.1.1:48864", "workers": ["10.0.1.0/24"]},
//	            {"p4runtime": "10.0.2.1:9559", "dataplane": "10.0.2.1:48864", "workers": ["10.0.2.0/24"]}]}
//
// A leaf's workers are the address prefixes its workers send from.
//
// BMv2 switches (controller --target-kind bmv2) run the leaf role of the
// v1model program: the controller gives each leaf's jobs an uplink entry
// instead of a --parent. Each leaf then also names its port cabled to the
// spine ("uplink_port") and the spine's port cabled to it ("port"), and
// every switch its Thrift server ("thrift", for the pool's register
// resets); "mac" is a switch's Ethernet address, written into the frames
// sent to it (default: broadcast):
//
//	{"spine":  {"p4runtime": "127.0.0.1:9559", "dataplane": "10.0.0.1:48864", "thrift": "127.0.0.1:9090"},
//	 "leaves": [{"p4runtime": "127.0.0.1:9560", "dataplane": "10.0.1.1:48864", "thrift": "127.0.0.1:9091",
//	             "workers": ["10.0.1.0/24"], "uplink_port": 9, "port": 1}, ...]}
type Topology struct {
	Spine  TopologySwitch   `json:"spine"`
	Leaves []TopologySwitch `json:"leaves"`

	// Registers, if set, reaches the registers of a P4 switch of the tree
	// through its Thrift address (BMv2; see RegisterBackend).
	Registers func(thrift string) p4rt.RegisterBackend `json:"-"`
}

// TopologySwitch is one switch of a Topology.
type TopologySwitch struct {
	// Name labels the switch in logs and errors (default: spine, leaf0, ...).
	Name string `json:"name,omitempty"`
	// P4Runtime is the switch's P4Runtime address.
	P4Runtime string `json:"p4runtime"`
	// Dataplane is the address workers (or, for the spine, the leaves) send
	// to, and the switch sends from.
	Dataplane string `json:"dataplane"`
	// Workers are the address prefixes of a leaf's workers.
	Workers []string `json:"workers,omitempty"`
	// P4 switches only. UplinkPort is a leaf's port cabled to the spine,
	// Port the spine's port cabled to the leaf, Thrift the switch's Thrift
	// server (BMv2) and MAC its Ethernet address.
	UplinkPort uint32 `json:"uplink_port,omitempty"`
	Port       uint32 `json:"port,omitempty"`
	Thrift     string `json:"thrift,omitempty"`
	MAC        string `json:"mac,omitempty"`

	dataplane netip.AddrPort
	prefixes  []netip.Prefix
	mac       [6]byte
}

// ParseTopology reads and checks a topology file.
func ParseTopology(r io.Reader) (*Topology, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var t Topology
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("topology: %w (see Topology's doc for the format)", err)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *Topology) check() error {
	if t.Spine.Name == "" {
		t.Spine.Name = "spine"
	}
	if len(t.Leaves) == 0 {
		return errors.New("topology: no leaves; a tree needs at least one leaf under the spine (for one switch, leave Topology out)")
	}
	if len(t.Spine.Workers) != 0 {
		return fmt.Errorf("topology: the spine lists workers %v; workers attach to leaves", t.Spine.Workers)
	}
	seen := map[netip.AddrPort]string{}
	check := func(sw *TopologySwitch) error {
		if sw.P4Runtime == "" {
			return fmt.Errorf("topology: %s has no p4runtime address", sw.Name)
		}
		dp, err := netip.ParseAddrPort(sw.Dataplane)
		if err != nil || dp.Addr().IsUnspecified() || dp.Port() == 0 {
			return fmt.Errorf("topology: %s: dataplane %q: want the ip:port the switch's data plane is bound to", sw.Name, sw.Dataplane)
		}
		sw.dataplane = netip.AddrPortFrom(dp.Addr().Unmap(), dp.Port())
		sw.mac = [6]byte{}
		if sw.MAC != "" {
			hw, err := net.ParseMAC(sw.MAC)
			if err != nil || len(hw) != 6 {
				return fmt.Errorf("topology: %s: mac %q: want an Ethernet address such as 02:53:4d:4c:00:01", sw.Name, sw.MAC)
			}
			sw.mac = [6]byte(hw)
		}
		if other, ok := seen[sw.dataplane]; ok {
			return fmt.Errorf("topology: %s and %s share the data plane %v", other, sw.Name, sw.dataplane)
		}
		seen[sw.dataplane] = sw.Name
		return nil
	}
	if err := check(&t.Spine); err != nil {
		return err
	}
	for i := range t.Leaves {
		l := &t.Leaves[i]
		if l.Name == "" {
			l.Name = fmt.Sprintf("leaf%d", i)
		}
		if err := check(l); err != nil {
			return err
		}
		if len(l.Workers) == 0 {
			return fmt.Errorf("topology: %s lists no workers: give the address prefixes its workers send from", l.Name)
		}
		l.prefixes = nil
		for _, w := range l.Workers {
			p, err := netip.ParsePrefix(w)
			if err != nil {
				if a, aerr := netip.ParseAddr(w); aerr == nil {
					p, err = a.Prefix(a.BitLen())
				}
			}
			if err != nil {
				return fmt.Errorf("topology: %s: workers entry %q: want an address or a prefix like 10.0.1.0/24", l.Name, w)
			}
			p = p.Masked()
			for j := range i + 1 {
				for _, q := range t.Leaves[j].prefixes {
					if q.Overlaps(p) {
						return fmt.Errorf("topology: %s's workers %v overlap %s's %v: a worker attaches to one leaf", l.Name, p, t.Leaves[j].Name, q)
					}
				}
			}
			l.prefixes = append(l.prefixes, p)
		}
	}
	return nil
}

// checkP4 checks what a tree of P4 switches of kind needs beyond a tree of
// software switches: ports between the leaves and the spine, a Thrift
// server for every BMv2 switch, and a program with the leaf role.
func (t *Topology) checkP4(kind string) error {
	if !(Target{Kind: kind}).capabilities().Tree {
		return fmt.Errorf("topology: the %s program has no leaf role; a tree runs on software switches (their Parent set) or BMv2 (TargetKind bmv2)", kind)
	}
	sws := append([]TopologySwitch{t.Spine}, t.Leaves...)
	for i, sw := range sws {
		if sw.Thrift == "" {
			return fmt.Errorf("topology: %s has no thrift address: the controller resets a BMv2 switch's pool through its Thrift server (simple_switch_grpc --thrift-port)", sw.Name)
		}
		if i == 0 {
			continue
		}
		if sw.UplinkPort == 0 || sw.Port == 0 {
			return fmt.Errorf("topology: %s needs uplink_port (its port cabled to the spine) and port (the spine's port cabled to it): a P4 switch cannot learn them", sw.Name)
		}
	}
	return nil
}

// LeafOf returns the index of the leaf a worker address attaches to.
func (t *Topology) LeafOf(a netip.Addr) (int, bool) { return t.shape().LeafOf(a) }

// shape is the tree as the job core splits placements over it.
func (t *Topology) shape() jobcore.Tree {
	sw := func(s TopologySwitch) jobcore.TreeSwitch {
		return jobcore.TreeSwitch{Dataplane: s.dataplane, MAC: s.mac, Workers: s.prefixes, Port: s.Port, UplinkPort: s.UplinkPort}
	}
	tr := jobcore.Tree{Spine: sw(t.Spine), Name: t.String()}
	for _, l := range t.Leaves {
		tr.Leaves = append(tr.Leaves, sw(l))
	}
	return tr
}

// String summarises the tree for logs.
func (t *Topology) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v <-", t.Spine.Name, t.Spine.dataplane)
	for _, l := range t.Leaves {
		fmt.Fprintf(&b, " %s %v %v", l.Name, l.dataplane, l.Workers)
	}
	return b.String()
}

// Tree programs a Topology's switches as one Switch for the job service:
// a job's entries, made for one switch with every rank, are split into each
// leaf's (its workers, ranked among themselves) and the spine's (one worker
// per leaf the job uses, sending from the leaf's data plane).
type Tree struct {
	topo   *Topology
	spine  Switch
	leaves []Switch
	// shape is the topology as the job core splits placements over it;
	// shape.Uplinks: the leaves are P4 switches, whose jobs each get an
	// uplink entry (Placement.Uplink) instead of following a --parent.
	shape jobcore.Tree
}

// NewTree returns the tree of spine and leaves (in the topology's order).
func NewTree(topo *Topology, spine Switch, leaves []Switch) (*Tree, error) {
	if len(leaves) != len(topo.Leaves) {
		return nil, fmt.Errorf("controller: NewTree: %d leaf switches for %d topology leaves", len(leaves), len(topo.Leaves))
	}
	return &Tree{topo: topo, spine: spine, leaves: leaves, shape: topo.shape()}, nil
}

// InstallJob installs the job's entries on its leaves, then on the spine;
// on failure it removes what went in.
func (t *Tree) InstallJob(ctx context.Context, p switchjob.Placement) error {
	spine, leaves, err := t.shape.Split(p)
	if err != nil {
		return invalid("%v", err)
	}
	var done []int
	undo := func() {
		for _, l := range done {
			_ = t.leaves[l].RemoveJob(ctx, *leaves[l])
		}
	}
	for l, e := range leaves {
		if e == nil {
			continue
		}
		if err := t.leaves[l].InstallJob(ctx, *e); err != nil {
			undo()
			return fmt.Errorf("%s: %w", t.topo.Leaves[l].Name, err)
		}
		done = append(done, l)
	}
	if err := t.spine.InstallJob(ctx, spine); err != nil {
		undo()
		return fmt.Errorf("%s: %w", t.topo.Spine.Name, err)
	}
	return nil
}

// RemoveJob removes the job's entries from the spine and its leaves.
func (t *Tree) RemoveJob(ctx context.Context, p switchjob.Placement) error {
	spine, leaves, err := t.shape.Split(p)
	if err != nil {
		return invalid("%v", err)
	}
	var errs []error
	if err := t.spine.RemoveJob(ctx, spine); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", t.topo.Spine.Name, err))
	}
	for l, e := range leaves {
		if e == nil {
			continue
		}
		if err := t.leaves[l].RemoveJob(ctx, *e); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.topo.Leaves[l].Name, err))
		}
	}
	return errors.Join(errs...)
}

// ResetPool makes the slots idle on every switch of the tree.
func (t *Tree) ResetPool(ctx context.Context, base, size, slots int) error {
	if err := t.spine.ResetPool(ctx, base, size, slots); err != nil {
		return fmt.Errorf("%s: %w", t.topo.Spine.Name, err)
	}
	for l, sw := range t.leaves {
		if err := sw.ResetPool(ctx, base, size, slots); err != nil {
			return fmt.Errorf("%s: %w", t.topo.Leaves[l].Name, err)
		}
	}
	return nil
}
