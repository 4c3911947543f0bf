package controller

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/jobpb"
)

// TestSparseRefusedOnP4Targets: a P4 switch's program has no sparse
// pipeline, so a sparse registration is refused there with a reason, and
// taken by the software switch.
func TestSparseRefusedOnP4Targets(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.2")
	bmv2 := bmv2Target(t, map[netip.Addr]uint32{a: 1})
	r := p4Req("emb", 0, 2)
	r.LaneAddresses = []string{"10.0.0.2:5000", "10.0.0.2:5001"}
	addrs := []netip.AddrPort{netip.MustParseAddrPort(r.LaneAddresses[0]), netip.MustParseAddrPort(r.LaneAddresses[1])}
	if err := bmv2.check(r, addrs); err != nil {
		t.Fatalf("dense registration refused: %v", err)
	}
	r.Sparse, r.Format = true, jobpb.Format_FORMAT_EXTENDED
	if err := bmv2.check(r, addrs); err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("sparse registration on bmv2: err = %v, want a refusal naming the sparse mode", err)
	}
	soft, err := TargetFor(KindSoftswitch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := soft.check(r, addrs); err != nil {
		t.Fatalf("sparse registration on the software switch: %v", err)
	}
}

// TestSparseRefusedOnATree: a controller that programs a tree of switches
// refuses a sparse registration, saying why, before it touches the job.
func TestSparseRefusedOnATree(t *testing.T) {
	topo, err := ParseTopology(strings.NewReader(twoLeaves))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := NewTree(topo, &recorder{}, []Switch{&recorder{}, &recorder{}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewJobService(tree, ServiceConfig{Dataplane: netip.MustParseAddrPort("10.0.0.1:48864"), Slots: testSlots, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r := regReq("emb", 0, 2, 1, 4, 0)
	r.LaneAddresses = []string{"10.0.1.5:5000"}
	r.Sparse, r.Format = true, jobpb.Format_FORMAT_EXTENDED
	_, err = svc.Register(testCtx(t), r)
	if err == nil || !strings.Contains(err.Error(), "sparse mode runs on a single software switch") {
		t.Fatalf("sparse registration on a tree: err = %v", err)
	}
}
