package programs

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4info/shape"
)

const p4dir = ".."

func read(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p4dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func spec(t *testing.T, name string) ProgramSpec {
	t.Helper()
	for _, s := range Programs {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no program %q", name)
	return ProgramSpec{}
}

func logDiffs(t *testing.T, diffs []shape.Diff) {
	t.Helper()
	for _, d := range diffs {
		t.Error(d)
	}
}

// The checked-in programs agree with their P4Infos and with the main
// P4Info, up to the deviations listed in Programs.
func TestProgramsMatchP4Info(t *testing.T) {
	diffs, err := CheckAll(p4dir)
	if err != nil {
		t.Fatal(err)
	}
	logDiffs(t, diffs)
}

// The program-specific entities, stated precisely: this is the list the
// README documents, so a change to Programs must be deliberate.
func TestDeviationsAreExactlyThese(t *testing.T) {
	shared := []string{
		"action SwitchMLIngress.send_arp_reply",
		"action SwitchMLIngress.set_drop_rates",
		"table SwitchMLIngress.arp_reply",
		"table SwitchMLIngress.drop_simulator",
	}
	v1 := spec(t, "v1model")
	if len(v1.Absent) != 0 {
		t.Errorf("v1model replaces main entities: %v", v1.Absent)
	}
	leaf := []string{
		"action SwitchMLIngress.set_parent_result",
		"action SwitchMLIngress.set_uplink",
		"register SwitchMLIngress.pool_use",
		"register SwitchMLIngress.pool_waiting",
		"table SwitchMLIngress.from_parent",
		"table SwitchMLIngress.uplink",
	}
	if got, want := sorted(v1.Extra), sorted(append(append([]string{}, shared...), leaf...)); !slices.Equal(got, want) {
		t.Errorf("v1model extra entities = %v, want %v", got, want)
	}

	tna := spec(t, "tna")
	wantAbsent := []string{"register SwitchMLIngress.pool_bitmap", "register SwitchMLIngress.pool_values"}
	if got := sorted(tna.Absent); !slices.Equal(got, wantAbsent) {
		t.Errorf("tna absent = %v, want %v", got, wantAbsent)
	}
	wantExtra := append([]string{}, shared...)
	wantExtra = append(wantExtra, "register SwitchMLIngress.pool_bitmap_pair")
	for j := 0; j < 32; j++ {
		wantExtra = append(wantExtra, "register SwitchMLIngress.pool_values_"+twoDigits(j))
	}
	if got, want := sorted(tna.Extra), sorted(wantExtra); !slices.Equal(got, want) {
		t.Errorf("tna extra = %v, want %v", got, want)
	}
}

// Every name the controller and software switch use (the constants of
// package p4info) exists in each program's checked-in P4Info (TNA: under
// "pipe."), with the id of the constant where the program keeps it (tables
// and actions everywhere; registers and the counter in v1model).
func TestControllerNamesInEveryProgram(t *testing.T) {
	names := map[string]uint32{
		"table " + p4info.TableWorkers:            p4info.TableWorkersID,
		"table " + p4info.TableReplyAddress:       p4info.TableReplyAddressID,
		"action " + p4info.ActionNoAction:         0, // core.p4: the compiler's id
		"action " + p4info.ActionSetWorker:        p4info.ActionSetWorkerID,
		"action " + p4info.ActionDrop:             p4info.ActionDropID,
		"action " + p4info.ActionSetReply:         p4info.ActionSetReplyID,
		"counter " + p4info.CounterStats:          p4info.CounterStatsID,
		"register " + p4info.RegisterPoolBitmap:   p4info.RegisterPoolBitmapID,
		"register " + p4info.RegisterPoolCount:    p4info.RegisterPoolCountID,
		"register " + p4info.RegisterPoolExponent: p4info.RegisterPoolExponentID,
		"register " + p4info.RegisterPoolValues:   p4info.RegisterPoolValuesID,
	}
	for _, s := range Programs {
		m, err := ProgramModel(read(t, s.P4Info), s)
		if err != nil {
			t.Fatal(err)
		}
		for entry, id := range names {
			if slices.Contains(s.Absent, entry) {
				continue // replaced on this target, see TestDeviationsAreExactlyThese
			}
			if !slices.Contains(m.Names(), entry) {
				t.Errorf("%s: missing %s", s.P4Info, entry)
				continue
			}
			got := m.ID(entry)
			if generated := s.GeneratedExternIDs && (strings.HasPrefix(entry, "register ") || strings.HasPrefix(entry, "counter ")); generated {
				continue
			}
			if id != 0 && got != id {
				t.Errorf("%s: %s has id %#x, p4info constant says %#x", s.P4Info, entry, got, id)
			}
		}
	}
}

// The parameters, keys and widths the controller programs, spelled out once
// more from the P4Info documentation so that a change in the main P4Info
// and all programs together still shows up here.
func TestSharedShapes(t *testing.T) {
	for _, s := range Programs {
		m, err := ProgramModel(read(t, s.P4Info), s)
		if err != nil {
			t.Fatal(err)
		}
		checkSharedTables(t, s.Name, m)
		checkSharedActions(t, s.Name, m)
		checkSharedExterns(t, s.Name, m)
	}
	checkV1ModelValues(t)
	checkTNARegisters(t)
}

// checkSharedTables checks the keys of workers and reply_address, and the
// default action and size of workers.
func checkSharedTables(t *testing.T, name string, m *shape.Model) {
	t.Helper()
	w := m.Tables[p4info.TableWorkers]
	if w == nil || len(w.Keys) != 2 ||
		w.Keys[0] != (shape.Key{ID: 1, Name: "hdr.ipv4.src_addr", Width: 32, Match: "EXACT"}) ||
		w.Keys[1] != (shape.Key{ID: 2, Name: "hdr.udp.src_port", Width: 16, Match: "EXACT"}) ||
		w.ConstDefault != p4info.ActionDrop || w.Size != 16384 {
		t.Errorf("%s: workers = %+v", name, w)
	}
	r := m.Tables[p4info.TableReplyAddress]
	if r == nil || len(r.Keys) != 3 ||
		r.Keys[0] != (shape.Key{ID: 1, Name: "meta.job_id", Width: 32, Match: "EXACT"}) ||
		r.Keys[1] != (shape.Key{ID: 2, Name: "meta.rank", Width: 16, Match: "EXACT"}) ||
		r.Keys[2] != (shape.Key{ID: 3, Name: "meta.lane", Width: 8, Match: "EXACT"}) {
		t.Errorf("%s: reply_address = %+v", name, r)
	}
}

// checkSharedActions checks the parameters of set_worker and set_reply.
func checkSharedActions(t *testing.T, name string, m *shape.Model) {
	t.Helper()
	want := []shape.Param{{ID: 1, Name: "job_id", Width: 32}, {ID: 2, Name: "rank", Width: 16}, {ID: 3, Name: "num_workers", Width: 16}, {ID: 4, Name: "mgid", Width: 16}, {ID: 5, Name: "lane", Width: 8}, {ID: 6, Name: "pool_base", Width: 32}, {ID: 7, Name: "pool_size", Width: 32}}
	if a := m.Actions[p4info.ActionSetWorker]; a == nil || !slices.Equal(a.Params, want) {
		t.Errorf("%s: set_worker = %+v", name, a)
	}
	want = []shape.Param{{ID: 1, Name: "dst_mac", Width: 48}, {ID: 2, Name: "dst_ipv4", Width: 32}, {ID: 3, Name: "dst_port", Width: 16}}
	if a := m.Actions[p4info.ActionSetReply]; a == nil || !slices.Equal(a.Params, want) {
		t.Errorf("%s: set_reply = %+v", name, a)
	}
}

// checkSharedExterns checks the stats counter and the pool_count and
// pool_exponent registers.
func checkSharedExterns(t *testing.T, name string, m *shape.Model) {
	t.Helper()
	if c := m.Counters[p4info.CounterStats]; c == nil || c.Size != p4info.StatsSize || c.Unit != "PACKETS" {
		t.Errorf("%s: stats = %+v", name, c)
	}
	if c := m.Registers[p4info.RegisterPoolCount]; c == nil || c.ElemType() != "bit<16>" || c.Size != p4info.PoolIndices {
		t.Errorf("%s: pool_count = %+v", name, c)
	}
	if c := m.Registers[p4info.RegisterPoolExponent]; c == nil || c.ElemType() != "int<8>" || c.Size != p4info.PoolIndices {
		t.Errorf("%s: pool_exponent = %+v", name, c)
	}
}

// checkV1ModelValues checks v1model's pool_values: one bit<32> cell per
// value of every pool index.
func checkV1ModelValues(t *testing.T) {
	t.Helper()
	v1, err := ProgramModel(read(t, "v1model/switchml.p4info.txtpb"), spec(t, "v1model"))
	if err != nil {
		t.Fatal(err)
	}
	if r := v1.Registers[p4info.RegisterPoolValues]; r == nil || r.Size != p4info.PoolIndices*p4info.ValuesPerIndex || r.ElemType() != "bit<32>" {
		t.Errorf("v1model pool_values = %+v", r)
	}
}

// checkTNARegisters checks TNA's pair registers: pool_bitmap_pair per slot
// and each pool_values_NN per pool index.
func checkTNARegisters(t *testing.T) {
	t.Helper()
	tna, err := ProgramModel(read(t, "tna/switchml.p4info.txtpb"), spec(t, "tna"))
	if err != nil {
		t.Fatal(err)
	}
	if r := tna.Registers["SwitchMLIngress.pool_bitmap_pair"]; r == nil || r.Size != p4info.Slots || r.ElemType() != "{f1:bit<32>,f2:bit<32>}" {
		t.Errorf("tna pool_bitmap_pair = %+v", r)
	}
	for _, p := range Data().Pairs {
		if r := tna.Registers["SwitchMLIngress.pool_values_"+p.N]; r == nil || r.Size != p4info.PoolIndices || r.ElemType() != "{first:bit<32>,second:bit<32>}" {
			t.Errorf("tna pool_values_%s = %+v", p.N, r)
		}
	}
}

// The checked-in P4 files are what go generate makes from the templates.
func TestGeneratedFilesUpToDate(t *testing.T) {
	for _, s := range Programs {
		tmpl := read(t, s.Source+".tmpl")
		want, err := Generate(filepath.Base(s.Source)+".tmpl", tmpl)
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, s.Source); !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./p4/programs", s.Source)
		}
	}
}

// The generated per-element code covers all 64 elements exactly once where
// it should: a dropped or duplicated element would aggregate silently wrong.
func TestGeneratedElementCoverage(t *testing.T) {
	v1 := string(read(t, "v1model/switchml.p4"))
	for e := 0; e < Elements; e++ {
		n := twoDigits(e)
		for _, stmt := range []string{
			"value_t v" + n + ";",
			"pool_values.write(meta.value_base + " + itoa(e) + ", hdr.values.v" + n + ");",
			"sum = sum + hdr.values.v" + n + ";",
			"pool_values.read(hdr.values.v" + n + ", meta.value_base + " + itoa(e) + ");",
		} {
			if c := strings.Count(v1, stmt); c != 1 {
				t.Errorf("v1model: %q appears %d times", stmt, c)
			}
		}
	}
	tna := string(read(t, "tna/switchml.p4"))
	for j := 0; j < Elements/2; j++ {
		n, lo, hi := twoDigits(j), twoDigits(2*j), twoDigits(2*j+1)
		for _, stmt := range []string{
			"value.first = hdr.values.v" + lo + ";",
			"value.second = hdr.values.v" + hi + ";",
			"value.first = value.first + hdr.values.v" + lo + ";",
			"value.second = value.second + hdr.values.v" + hi + ";",
			"hdr.values.v" + lo + " = pool_values_" + n + "_add.execute(meta.idx);",
			"hdr.values.v" + lo + " = pool_values_" + n + "_read_first.execute(meta.idx);",
			"hdr.values.v" + hi + " = pool_values_" + n + "_read_second.execute(meta.idx);",
			"values_" + n + ".apply();",
		} {
			if c := strings.Count(tna, stmt); c != 1 {
				t.Errorf("tna: %q appears %d times", stmt, c)
			}
		}
	}
}

// A program P4Info that drifts from the main P4Info is caught, and so is a
// deviation list that no longer tells the truth.
func TestCheckAgainstMainReportsDrift(t *testing.T) {
	mainInfo := read(t, MainP4Info)
	cases := []struct {
		name    string
		spec    string
		re      string
		repl    string
		edit    func(*ProgramSpec)
		entity  string
		msg     string
		mutMain bool
	}{
		{name: "renamed action in program p4info", spec: "v1model", re: `name: "SwitchMLIngress\.drop"`, repl: `name: "SwitchMLIngress.discard"`, entity: "SwitchMLIngress.drop", msg: "missing in v1model/switchml.p4info.txtpb"},
		{name: "new entity in main only", spec: "tna", mutMain: true, re: `name: "SwitchMLIngress\.pool_count"`, repl: `name: "SwitchMLIngress.pool_countdown"`, entity: "SwitchMLIngress.pool_countdown", msg: "missing in tna/switchml.p4info.txtpb"},
		{name: "param width differs from main", spec: "tna", re: `(name: "pool_size"\n\s+)bitwidth: 32`, repl: "${1}bitwidth: 16", entity: "SwitchMLIngress.set_worker", msg: "parameter pool_size is 32 bits"},
		{name: "undocumented extra", spec: "v1model", edit: func(s *ProgramSpec) { s.Extra = s.Extra[1:] }, entity: "SwitchMLIngress.drop_simulator", msg: "missing in p4info/switchml.p4info.txtpb"},
		{name: "absent entity that is present", spec: "v1model", edit: func(s *ProgramSpec) { s.Absent = []string{"register SwitchMLIngress.pool_count"} }, entity: "register SwitchMLIngress.pool_count", msg: "listed as absent but present"},
		{name: "extra entity that does not exist", spec: "tna", edit: func(s *ProgramSpec) { s.Extra = append(slices.Clone(s.Extra), "table SwitchMLIngress.nothing") }, entity: "table SwitchMLIngress.nothing", msg: "not in tna/switchml.p4info.txtpb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := spec(t, c.spec)
			s.Extra = slices.Clone(s.Extra)
			if c.edit != nil {
				c.edit(&s)
			}
			progInfo := read(t, s.P4Info)
			m := mainInfo
			if c.re != "" {
				re := regexp.MustCompile(c.re)
				target := progInfo
				if c.mutMain {
					target = mainInfo
				}
				if n := len(re.FindAllIndex(target, -1)); n != 1 {
					t.Fatalf("pattern %q matches %d times, want 1", c.re, n)
				}
				out := re.ReplaceAll(target, []byte(c.repl))
				if c.mutMain {
					m = out
				} else {
					progInfo = out
				}
			}
			diffs, err := CheckAgainstMain(m, progInfo, s)
			if err != nil {
				t.Fatal(err)
			}
			if !reported(diffs, c.entity, c.msg) {
				t.Errorf("no diff for %s containing %q; got %v", c.entity, c.msg, diffs)
			}
		})
	}
}

func reported(diffs []shape.Diff, entity, msg string) bool {
	for _, d := range diffs {
		if strings.Contains(d.Entity, entity) && strings.Contains(d.String(), msg) {
			return true
		}
	}
	return false
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func twoDigits(i int) string {
	return string([]byte{byte('0' + i/10), byte('0' + i%10)})
}

func itoa(i int) string {
	if i < 10 {
		return string([]byte{byte('0' + i)})
	}
	return twoDigits(i)
}
