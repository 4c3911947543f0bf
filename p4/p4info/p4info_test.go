package p4info

import (
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

func TestLoadIDsMatchConstants(t *testing.T) {
	info, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := info.GetPkgInfo().GetArch(); got != "v1model" {
		t.Errorf("arch = %q, want v1model", got)
	}
	want := map[string]uint32{
		TableWorkers:         TableWorkersID,
		TableReplyAddress:    TableReplyAddressID,
		ActionNoAction:       ActionNoActionID,
		ActionSetWorker:      ActionSetWorkerID,
		ActionDrop:           ActionDropID,
		ActionSetReply:       ActionSetReplyID,
		CounterStats:         CounterStatsID,
		RegisterPoolBitmap:   RegisterPoolBitmapID,
		RegisterPoolCount:    RegisterPoolCountID,
		RegisterPoolExponent: RegisterPoolExponentID,
		RegisterPoolValues:   RegisterPoolValuesID,
	}
	for name, id := range want {
		got, err := ID(info, name)
		if err != nil {
			t.Errorf("ID(%q): %v", name, err)
			continue
		}
		if got != id {
			t.Errorf("ID(%q) = %#x, want %#x", name, got, id)
		}
		back, err := Name(info, id)
		if err != nil || back != name {
			t.Errorf("Name(%#x) = %q, %v; want %q", id, back, err, name)
		}
	}
	if n := len(Preambles(info)); n != len(want) {
		t.Errorf("P4Info has %d entities, constants cover %d", n, len(want))
	}
}

func TestIDsUniqueAndPrefixed(t *testing.T) {
	info, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]string{}
	check := func(p *p4configv1.Preamble, prefix p4configv1.P4Ids_Prefix) {
		if old, dup := seen[p.GetId()]; dup {
			t.Errorf("id %#x used by %q and %q", p.GetId(), old, p.GetName())
		}
		seen[p.GetId()] = p.GetName()
		if got := p4configv1.P4Ids_Prefix(p.GetId() >> 24); got != prefix {
			t.Errorf("%q id %#x has prefix %v, want %v", p.GetName(), p.GetId(), got, prefix)
		}
	}
	for _, x := range info.GetTables() {
		check(x.GetPreamble(), p4configv1.P4Ids_TABLE)
	}
	for _, x := range info.GetActions() {
		check(x.GetPreamble(), p4configv1.P4Ids_ACTION)
	}
	for _, x := range info.GetCounters() {
		check(x.GetPreamble(), p4configv1.P4Ids_COUNTER)
	}
	for _, x := range info.GetRegisters() {
		check(x.GetPreamble(), p4configv1.P4Ids_REGISTER)
	}
}

func TestFieldsAndParams(t *testing.T) {
	info, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	type field struct {
		name  string
		id    uint32
		width int32
	}
	tables := map[string][]field{
		TableWorkers:      {{"hdr.ipv4.src_addr", WorkersSrcAddrID, 32}, {"hdr.udp.src_port", WorkersSrcPortID, 16}},
		TableReplyAddress: {{"meta.job_id", ReplyJobID, 32}, {"meta.rank", ReplyRankID, 16}, {"meta.lane", ReplyLaneID, 8}},
	}
	for tn, fields := range tables {
		tab, err := Table(info, tn)
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.GetMatchFields()) != len(fields) {
			t.Errorf("%s: %d match fields, want %d", tn, len(tab.GetMatchFields()), len(fields))
		}
		for i, f := range fields {
			mf := tab.GetMatchFields()[i]
			if mf.GetName() != f.name || mf.GetId() != f.id || mf.GetBitwidth() != f.width ||
				mf.GetMatchType() != p4configv1.MatchField_EXACT {
				t.Errorf("%s field %d = %v, want %+v exact", tn, i, mf, f)
			}
		}
	}
	actions := map[string][]field{
		ActionSetWorker: {
			{"job_id", SetWorkerJobID, 32}, {"rank", SetWorkerRank, 16}, {"num_workers", SetWorkerNumWorkers, 16},
			{"mgid", SetWorkerMgid, 16}, {"lane", SetWorkerLane, 8}, {"pool_base", SetWorkerPoolBase, 32},
			{"pool_size", SetWorkerPoolSize, 32},
		},
		ActionSetReply: {{"dst_mac", SetReplyDstMAC, 48}, {"dst_ipv4", SetReplyDstIPv4, 32}, {"dst_port", SetReplyDstPort, 16}},
	}
	for an, params := range actions {
		a, err := Action(info, an)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.GetParams()) != len(params) {
			t.Errorf("%s: %d params, want %d", an, len(a.GetParams()), len(params))
		}
		for i, f := range params {
			p := a.GetParams()[i]
			if p.GetName() != f.name || p.GetId() != f.id || p.GetBitwidth() != f.width {
				t.Errorf("%s param %d = %v, want %+v", an, i, p, f)
			}
			if id, err := ParamID(a, f.name); err != nil || id != f.id {
				t.Errorf("ParamID(%s, %s) = %d, %v", an, f.name, id, err)
			}
		}
	}
	regs := map[string][2]int32{
		RegisterPoolBitmap:   {32, PoolIndices},
		RegisterPoolCount:    {16, PoolIndices},
		RegisterPoolExponent: {8, PoolIndices},
		RegisterPoolValues:   {32, PoolIndices * ValuesPerIndex},
	}
	for rn, ws := range regs {
		r, err := Register(info, rn)
		if err != nil {
			t.Fatal(err)
		}
		bs := r.GetTypeSpec().GetBitstring()
		w := bs.GetBit().GetBitwidth() + bs.GetInt().GetBitwidth()
		if w != ws[0] || r.GetSize() != ws[1] {
			t.Errorf("%s: width %d size %d, want %d %d", rn, w, r.GetSize(), ws[0], ws[1])
		}
	}
	c, err := Counter(info, "stats")
	if err != nil || c.GetSpec().GetUnit() != p4configv1.CounterSpec_PACKETS || c.GetSize() != StatsSize {
		t.Errorf("stats counter = %v, %v", c, err)
	}
	if _, err := Table(info, "nope"); err == nil {
		t.Error("Table(nope) found something")
	}
}

func TestLoadReturnsFreshCopy(t *testing.T) {
	a, _ := Load()
	a.Tables = nil
	b, err := Load()
	if err != nil || len(b.GetTables()) != 2 {
		t.Fatalf("second Load sees caller's modification: %v tables, %v", len(b.GetTables()), err)
	}
}
