package controller

import (
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/tna"
)

// TestPrepareTofino2Leaf: the Tofino 2 leaf program is taken where a
// Tofino 2 program is, as one switch: its bf-p4c output directory brings
// the leaf's P4Info (bfrt.json lists the uplink table), and --p4info gives
// it as well. It resolves in the slot_delta form. A tree of Tofinos stays
// refused.
func TestPrepareTofino2Leaf(t *testing.T) {
	dir := t.TempDir()
	ports := writeFile(t, dir, "ports.txt", "10.0.0.1 1\n")
	plain := bfOutput(t, "tofino2")
	leaf := bfOutput(t, "tofino2")
	writeFile(t, leaf, "bfrt.json", `{"schema_version": "1.0.0", "tables": [{"name": "pipe.SwitchMLIngress.workers"}, {"name": "pipe.SwitchMLIngress.uplink"}]}`)
	leafP4Info := writeFile(t, dir, "leaf.p4info.txtpb", string(tna.P4InfoTofino2LeafText))

	for _, c := range []struct {
		name              string
		deviceConfig, p4i string
		wantLeaf          bool
	}{
		{"leaf output directory", leaf, "", true},
		{"plain output directory", plain, "", false},
		{"--p4info of the leaf", plain, leafP4Info, true},
	} {
		o := flagDefaults(KindTofino)
		o.PortMapFile, o.DeviceConfigFile, o.P4InfoFile = ports, c.deviceConfig, c.p4i
		cfg, err := o.Prepare()
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		ids, err := p4info.Resolve(cfg.P4Info)
		if err != nil {
			t.Errorf("%s: the P4Info Prepare chose does not resolve: %v", c.name, err)
			continue
		}
		if ids.Leaf() != c.wantLeaf || ids.LeafSlotDelta != c.wantLeaf || ids.RegisterPoolTag == 0 {
			t.Errorf("%s: Leaf() %v, LeafSlotDelta %v, pool_tag %#x; want the Tofino 2 P4Info, leaf %v", c.name, ids.Leaf(), ids.LeafSlotDelta, ids.RegisterPoolTag, c.wantLeaf)
		}
	}

	topology := writeFile(t, dir, "tree.json", `{"spine": {"p4runtime": "10.0.0.1:9559", "dataplane": "10.0.0.1:48864"},
		"leaves": [{"p4runtime": "10.0.1.1:9559", "dataplane": "10.0.1.1:48864", "workers": ["10.0.1.0/24"]}]}`)
	o := flagDefaults(KindTofino)
	o.PortMapFile, o.DeviceConfigFile, o.P4InfoFile, o.TopologyFile = ports, leaf, leafP4Info, topology
	if _, err := o.Prepare(); err == nil || !strings.Contains(err.Error(), "--topology with --target-kind tofino") {
		t.Errorf("a tree of Tofino 2 leaves: %v, want the refusal of --topology with tofino", err)
	}
}
