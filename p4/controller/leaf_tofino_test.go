package controller

import (
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/targets"
	"github.com/switchml/switchml-go/p4/tna"
)

// TestPrepareTofino2Leaf: the Tofino 2 leaf program is taken where a
// Tofino 2 program is, as one switch: its bf-p4c output directory brings
// the leaf's P4Info (bfrt.json lists the uplink table), and so does the leaf's
// P4Info given as Options.P4Info. It resolves in the slot_delta form. A tree of Tofinos stays
// refused.
func TestPrepareTofino2Leaf(t *testing.T) {
	plain := bfOutput(t, "tofino2")
	leaf := bfOutput(t, "tofino2")
	writeFile(t, leaf, "bfrt.json", `{"schema_version": "1.0.0", "tables": [{"name": "pipe.SwitchMLIngress.workers"}, {"name": "pipe.SwitchMLIngress.uplink"}]}`)
	leafP4Info, err := targets.ParseP4Info(tna.P4InfoTofino2LeafText)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name         string
		deviceConfig string
		p4i          *p4configv1.P4Info
		wantLeaf     bool
	}{
		{"leaf output directory", leaf, nil, true},
		{"plain output directory", plain, nil, false},
		{"the leaf's P4Info", plain, leafP4Info, true},
	} {
		o := flagDefaults(KindTofino)
		o.Ports, o.DeviceConfigFile, o.P4Info = ports, c.deviceConfig, c.p4i
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

	topology := parseTopology(t, `{"spine": {"p4runtime": "10.0.0.1:9559", "dataplane": "10.0.0.1:48864"},
		"leaves": [{"p4runtime": "10.0.1.1:9559", "dataplane": "10.0.1.1:48864", "workers": ["10.0.1.0/24"]}]}`)
	o := flagDefaults(KindTofino)
	o.Ports, o.DeviceConfigFile, o.P4Info, o.Topology = ports, leaf, leafP4Info, topology
	if _, err := o.Prepare(); err == nil || !strings.Contains(err.Error(), "Topology with TargetKind tofino") {
		t.Errorf("a tree of Tofino 2 leaves: %v, want the refusal of a topology with tofino", err)
	}
}
