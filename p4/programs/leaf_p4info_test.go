package programs

import (
	"testing"

	"github.com/switchml/switchml-go/p4/p4tools"
)

// bf-p4c writes for the leaf role on Tofino 2 exactly the checked-in
// tna/switchml.tofino2-leaf.p4info.txtpb, the P4Info the controller
// resolves the leaf's slot_delta actions from.
func TestTofino2LeafP4Info(t *testing.T) {
	tools := p4tools.ForTest(t)
	c := bfp4cLeaf(tools, leafSource(t), "tofino2-leaf", "tofino2", "t2na")
	if c.err != nil {
		t.Fatalf("bf-p4c on the leaf role for Tofino 2: %v\n%.4000s", c.err, c.output)
	}
	if !equalP4Info(t, c.p4info, read(t, "tna/switchml.tofino2-leaf.p4info.txtpb")) {
		t.Error("tna/switchml.tofino2-leaf.p4info.txtpb is not what bf-p4c writes for the leaf role on Tofino 2: copy the compiler's P4Info over it (keep the header comment)")
	}
}
