package jobcore

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/jobpb"
)

// TestShardLaneDataplanes: with several shard addresses, every rank of a
// job is told the same shard for each lane, lanes are spread over the
// shards, and jobs start at different shards; with one address the answer
// names no lanes (workers send everything to switch_dataplane).
func TestShardLaneDataplanes(t *testing.T) {
	r := newRig(t, 64)
	one := r.run("one-address", 1, 1)
	if len(one.GetLaneDataplanes()) != 0 {
		t.Fatalf("one data-plane address, lane addresses %v", one.GetLaneDataplanes())
	}

	r = newRig(t, 64)
	shards := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.254:48864"), netip.MustParseAddrPort("10.0.0.254:48865")}
	r.c.cfg.Shards = shards
	var reqs []*jobpb.RegisterRequest
	for rank := range uint32(3) {
		reqs = append(reqs, regReq("four-lanes", rank, 3, 4, 4, 1))
	}
	ws := r.mustRegister(reqs...)
	r.c.Installed(r.takeInstall().Gen, nil, r.now)
	r.collect()
	var first []string
	for i, w := range ws {
		lds := r.answer(w).resp.GetLaneDataplanes()
		if i == 0 {
			first = lds
		}
		if !slices.Equal(lds, first) {
			t.Fatalf("rank %d lanes at %v, rank 0 at %v: a slot's packets would split", i, lds, first)
		}
	}
	if len(first) != 4 || first[0] == first[1] || first[0] != first[2] || first[1] != first[3] {
		t.Fatalf("lane addresses %v, want 4 alternating over both shards", first)
	}
	if resp := r.answer(ws[0]).resp; resp.GetSwitchDataplane() != shards[0].String() {
		t.Fatalf("switch_dataplane %q, want the first shard's", resp.GetSwitchDataplane())
	}
	other := r.run("one-lane", 1, 2)
	if lds := other.GetLaneDataplanes(); len(lds) != 1 || lds[0] == first[0] {
		t.Fatalf("next job's one lane at %v, want the shard after %s", lds, first[0])
	}
}
