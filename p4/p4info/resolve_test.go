package p4info_test

import (
	"net/netip"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/tna"
	"github.com/switchml/switchml-go/p4/v1model"
)

func parse(t *testing.T, text []byte) *p4configv1.P4Info {
	t.Helper()
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(text, info); err != nil {
		t.Fatal(err)
	}
	return info
}

func TestResolveMainAndV1model(t *testing.T) {
	main, err := p4info.Load()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := p4info.Resolve(main)
	if err != nil {
		t.Fatal(err)
	}
	if ids != p4info.DefaultIDs() {
		t.Errorf("main P4Info resolves to %+v, want the package constants %+v", ids, p4info.DefaultIDs())
	}
	v1, err := p4info.Resolve(parse(t, v1model.P4InfoText))
	if err != nil {
		t.Fatal(err)
	}
	want := p4info.DefaultIDs()
	want.TableDropSimulator, want.ActionSetDropRates = 0x02000100, 0x01000100
	want.TableARPReply, want.ActionSendARPReply = 0x02000101, 0x01000101
	want.TableUplink, want.ActionSetUplink = 0x02000102, 0x01000102
	want.TableFromParent, want.ActionSetParentResult = 0x02000103, 0x01000103
	if v1 != want {
		t.Errorf("v1model P4Info resolves to %+v, want %+v", v1, want)
	}
	if !v1.Leaf() || ids.Leaf() {
		t.Errorf("Leaf(): v1model %v, main %v; want true, false", v1.Leaf(), ids.Leaf())
	}
}

// TestUplinkEntries: a leaf's two entries of a job carry the ids resolved
// from the program's P4Info and the uplink's values; a program without
// the tables, and values beyond the fields' widths, are refused.
func TestUplinkEntries(t *testing.T) {
	ids, err := p4info.Resolve(parse(t, v1model.P4InfoText))
	if err != nil {
		t.Fatal(err)
	}
	u := switchjob.LeafUplink{Port: 5, ParentMAC: [6]byte{2, 0, 0, 0, 0, 9}, Uplink: switchjob.Uplink{
		Parent: netip.MustParseAddrPort("10.1.0.254:48864"), ParentBase: 300, PoolBase: 100, PoolSize: 64, MulticastGroup: 3}}
	up, from, err := p4info.UplinkEntries(ids, 7, u, true)
	if err != nil {
		t.Fatal(err)
	}
	if up.GetTableId() != 0x02000102 || up.GetAction().GetAction().GetActionId() != 0x01000102 {
		t.Errorf("uplink entry ids: table %#x action %#x", up.GetTableId(), up.GetAction().GetAction().GetActionId())
	}
	// The bases form, to the byte and in order: set_uplink's 32-bit
	// parent_base as its fifth parameter, set_parent_result's pool_base
	// and parent_base.
	wantParams(t, up, [][2]uint64{{1, 5}, {2, 0x020000000009}, {3, 0x0a0100fe}, {4, 48864}, {5, 300}})
	wantParams(t, from, [][2]uint64{{1, 7}, {2, 3}, {3, 100}, {4, 300}})
	r := from.GetMatch()[2].GetRange()
	lo, _ := p4info.Uint(r.GetLow(), 14)
	hi, _ := p4info.Uint(r.GetHigh(), 14)
	if from.GetTableId() != 0x02000103 || from.GetPriority() == 0 || lo != 300 || hi != 363 {
		t.Errorf("from_parent entry: table %#x priority %d slots %d..%d, want 300..363", from.GetTableId(), from.GetPriority(), lo, hi)
	}
	if del, _, err := p4info.UplinkEntries(ids, 7, u, false); err != nil || del.GetAction() != nil {
		t.Errorf("DELETE entries: %v, action %v", err, del.GetAction())
	}
	if _, _, err := p4info.UplinkEntries(p4info.DefaultIDs(), 7, u, true); err == nil || !strings.Contains(err.Error(), "cannot be a leaf") {
		t.Errorf("main P4Info: %v, want a refusal", err)
	}
	bad := u
	bad.Port = 512
	if _, _, err := p4info.UplinkEntries(ids, 7, bad, true); err == nil {
		t.Error("port 512 on 9-bit ports accepted")
	}
	bad = u
	bad.ParentBase = 16380
	if _, _, err := p4info.UplinkEntries(ids, 7, bad, true); err == nil {
		t.Error("slots beyond 14 bits accepted")
	}
}

// wantParams checks an entry's action parameters: ids and canonical values
// (p4info.Bytes), in order.
func wantParams(t *testing.T, e *p4v1.TableEntry, params [][2]uint64) {
	t.Helper()
	got := e.GetAction().GetAction().GetParams()
	if len(got) != len(params) {
		t.Fatalf("table %#x: %d parameters, want %d", e.GetTableId(), len(got), len(params))
	}
	for i, p := range params {
		if got[i].GetParamId() != uint32(p[0]) || string(got[i].GetValue()) != string(p4info.Bytes(p[1])) {
			t.Errorf("table %#x parameter %d: id %d value %x, want id %d value %x", e.GetTableId(), i, got[i].GetParamId(), got[i].GetValue(), p[0], p4info.Bytes(p[1]))
		}
	}
}

func TestResolveTNA(t *testing.T) {
	ids, err := p4info.Resolve(parse(t, tna.P4InfoText))
	if err != nil {
		t.Fatal(err)
	}
	if ids.RegisterPoolBitmapPair == 0 || ids.RegisterPoolBitmap != 0 {
		t.Errorf("TNA P4Info: pool_bitmap_pair %#x, pool_bitmap %#x; want the pair register alone", ids.RegisterPoolBitmapPair, ids.RegisterPoolBitmap)
	}
	if ids.TableWorkers == 0 || ids.RegisterPoolCount == 0 || ids.CounterStats == 0 {
		t.Errorf("TNA P4Info resolves to %+v", ids)
	}
}

// TestResolvePipelinePrefix: the Tofino compiler names objects
// "pipe.Control.object"; they resolve by the name without the prefix, to
// the ids the P4Info gives.
func TestResolvePipelinePrefix(t *testing.T) {
	info, _ := p4info.Load()
	for _, tb := range info.GetTables() {
		tb.Preamble.Name = "pipe." + tb.Preamble.Name
		tb.Preamble.Id += 0x100
	}
	for _, a := range info.GetActions() {
		a.Preamble.Name = "pipe." + a.Preamble.Name
	}
	ids, err := p4info.Resolve(info)
	if err != nil {
		t.Fatal(err)
	}
	if ids.TableWorkers != p4info.TableWorkersID+0x100 || ids.ActionSetReply != p4info.ActionSetReplyID {
		t.Errorf("prefixed names resolve to %+v", ids)
	}
	// Two prefixes are not a pipeline instance name.
	info, _ = p4info.Load()
	info.Tables[0].Preamble.Name = "a.b." + info.Tables[0].Preamble.Name
	if _, err := p4info.Resolve(info); err == nil {
		t.Error("a table under two prefixes resolved")
	}
}

func TestResolveRefusesOtherPipelines(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*p4configv1.P4Info)
		want   string
	}{
		{"renamed table", func(i *p4configv1.P4Info) { i.Tables[0].Preamble.Name = "SwitchMLIngress.peers" }, "no table SwitchMLIngress.workers"},
		{"missing register", func(i *p4configv1.P4Info) { i.Registers = i.Registers[2:] }, "pool_bitmap"},
		{"narrow param", func(i *p4configv1.P4Info) {
			a, _ := p4info.Action(i, p4info.ActionSetWorker)
			a.Params[1].Bitwidth = 8
		}, "parameter rank is id 2, 8 bits"},
		{"renumbered field", func(i *p4configv1.P4Info) {
			tb, _ := p4info.Table(i, p4info.TableReplyAddress)
			tb.MatchFields[0].Id = 9
		}, "match field meta.job_id is id 9"},
		{"empty", func(i *p4configv1.P4Info) { *i = p4configv1.P4Info{} }, "no action SwitchMLEgress.set_reply"},
	} {
		info, _ := p4info.Load()
		c.mutate(info)
		_, err := p4info.Resolve(info)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Resolve error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
