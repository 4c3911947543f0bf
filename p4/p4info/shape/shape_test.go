package shape

import (
	"slices"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/switchml/switchml-go/p4/p4info"
)

func mainInfo(t *testing.T) *p4configv1.P4Info {
	t.Helper()
	info, err := p4info.Load()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func model(t *testing.T, info *p4configv1.P4Info) *Model {
	t.Helper()
	m, err := FromP4Info(info)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// lookup is the entity a p4info finder (p4info.Table, ...) finds by name.
func lookup[T any](t *testing.T, find func(*p4configv1.P4Info, string) (T, error), info *p4configv1.P4Info, name string) T {
	t.Helper()
	v, err := find(info, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Order, documentation and annotations are not part of a pipeline's shape.
func TestCompareIgnoresPresentation(t *testing.T) {
	a, b := mainInfo(t), mainInfo(t)
	slices.Reverse(b.Tables)
	slices.Reverse(b.Actions)
	slices.Reverse(b.Registers)
	for _, tab := range b.Tables {
		tab.Preamble.Doc = &p4configv1.Documentation{Brief: "reworded"}
		tab.Preamble.Annotations = append(tab.Preamble.Annotations, "@hidden")
		slices.Reverse(tab.ActionRefs)
	}
	if d := Compare(model(t, a), model(t, b), Options{}); len(d) != 0 {
		t.Errorf("reordered, redocumented P4Info differs: %v", d)
	}
}

// Each change of the shape is reported on the entity it concerns, and only
// the options meant for it silence it.
func TestCompareReportsEachChange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*testing.T, *p4configv1.P4Info)
		entity  string
		msg     string
		silence *Options // options under which the change is not reported
	}{
		{"table renamed", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).Preamble.Name = "SwitchMLIngress.peers"
		}, p4info.TableWorkers, "table in A, missing in B", &Options{AName: "A", BName: "B", Skip: func(kind, name string) bool { return kind == KindTable }}},
		{"table id", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableReplyAddress).Preamble.Id++
		}, p4info.TableReplyAddress, "id 0x2000002 in A, 0x2000003 in B", nil},
		{"key width", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).MatchFields[1].Bitwidth = 15
		}, p4info.TableWorkers, "match field hdr.udp.src_port is 16 bits in A, 15 in B", nil},
		{"key kind", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).MatchFields[0].Match = &p4configv1.MatchField_MatchType_{MatchType: p4configv1.MatchField_LPM}
		}, p4info.TableWorkers, "is EXACT in A, LPM in B", nil},
		{"key id", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableReplyAddress).MatchFields[2].Id = 9
		}, p4info.TableReplyAddress, "match field meta.lane has id 3 in A, 9 in B", nil},
		{"action scope", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).ActionRefs[0].Scope = p4configv1.ActionRef_TABLE_AND_DEFAULT
		}, p4info.TableWorkers, "scope TABLE_ONLY in A, TABLE_AND_DEFAULT in B", nil},
		{"const default", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).ConstDefaultActionId = p4info.ActionNoActionID
		}, p4info.TableWorkers, `const default action "SwitchMLIngress.drop" in A, "NoAction" in B`, nil},
		{"table size", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).Size++
		}, p4info.TableWorkers, "size 16384 in A, 16385 in B", &Options{IgnoreSizes: true}},
		{"parameter width", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Action, i, p4info.ActionSetWorker).Params[1].Bitwidth = 8
		}, p4info.ActionSetWorker, "parameter rank is 16 bits in A, 8 in B", nil},
		{"parameter renamed", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Action, i, p4info.ActionSetReply).Params[2].Name = "port"
		}, p4info.ActionSetReply, `parameter 3 is "dst_port" in A, "port" in B`, nil},
		{"parameter dropped", func(t *testing.T, i *p4configv1.P4Info) {
			a := lookup(t, p4info.Action, i, p4info.ActionSetWorker)
			a.Params = a.Params[:6]
		}, p4info.ActionSetWorker, "7 parameters in A, 6 in B", nil},
		{"register sign", func(t *testing.T, i *p4configv1.P4Info) {
			bs := lookup(t, p4info.Register, i, p4info.RegisterPoolExponent).TypeSpec.GetBitstring()
			bs.TypeSpec = &p4configv1.P4BitstringLikeTypeSpec_Bit{Bit: &p4configv1.P4BitTypeSpec{Bitwidth: 8}}
		}, p4info.RegisterPoolExponent, "element type int<8> in A, bit<8> in B", nil},
		{"register size", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Register, i, p4info.RegisterPoolCount).Size = 16
		}, p4info.RegisterPoolCount, "size 16384 in A, 16 in B", &Options{IgnoreSizes: true}},
		{"counter unit", func(t *testing.T, i *p4configv1.P4Info) {
			i.Counters[0].Spec.Unit = p4configv1.CounterSpec_BYTES
		}, p4info.CounterStats, "unit PACKETS in A, BYTES in B", nil},
		{"architecture", func(t *testing.T, i *p4configv1.P4Info) {
			i.PkgInfo.Arch = "tna"
		}, "pkg_info", `architecture "v1model" in A, "tna" in B`, &Options{IgnoreArch: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mainInfo(t), mainInfo(t)
			tc.mutate(t, b)
			ma, mb := model(t, a), model(t, b)
			d := Compare(ma, mb, Options{AName: "A", BName: "B"})
			if !reports(d, tc.entity, tc.msg) {
				t.Errorf("no diff for %s saying %q; got %v", tc.entity, tc.msg, d)
			}
			if tc.silence != nil {
				if d := Compare(ma, mb, *tc.silence); len(d) != 0 {
					t.Errorf("with %+v: %v, want no diff", *tc.silence, d)
				}
			}
		})
	}
}

// A forgotten id is not compared, on either side; the rest still is.
func TestForgetIDs(t *testing.T) {
	ma, mb := model(t, mainInfo(t)), model(t, mainInfo(t))
	mb.Actions[p4info.ActionNoAction].ID = 0x01abcdef // a compiler's own choice
	if d := Compare(ma, mb, Options{}); !reports(d, p4info.ActionNoAction, "id 0x1000001") {
		t.Fatalf("changed NoAction id not reported: %v", d)
	}
	mb.ForgetIDs(KindAction + " " + p4info.ActionNoAction)
	if id := mb.ID(KindAction + " " + p4info.ActionNoAction); id != 0 {
		t.Errorf("forgotten id = %#x", id)
	}
	if d := Compare(ma, mb, Options{}); len(d) != 0 {
		t.Errorf("forgotten id still compared: %v", d)
	}
	if id := ma.ID(KindTable + " " + p4info.TableWorkers); id != p4info.TableWorkersID {
		t.Errorf("workers id = %#x, want %#x", id, p4info.TableWorkersID)
	}
}

// References that do not resolve, and names given twice, are errors rather
// than entities silently left out of the comparison.
func TestFromP4InfoRefusesBrokenReferences(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*testing.T, *p4configv1.P4Info)
		want   string
	}{
		{"dangling action ref", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).ActionRefs[0].Id = 0x01000099
		}, "action id 0x1000099 is not in the P4Info"},
		{"dangling const default", func(t *testing.T, i *p4configv1.P4Info) {
			lookup(t, p4info.Table, i, p4info.TableWorkers).ConstDefaultActionId = 0x01000099
		}, "const default action id 0x1000099"},
		{"table twice", func(t *testing.T, i *p4configv1.P4Info) {
			i.Tables = append(i.Tables, i.Tables[0])
		}, "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := mainInfo(t)
			tc.mutate(t, info)
			if _, err := FromP4Info(info); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromP4Info error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func reports(diffs []Diff, entity, msg string) bool {
	for _, d := range diffs {
		if d.Entity == entity && strings.Contains(d.Msg, msg) {
			return true
		}
	}
	return false
}
