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

func logDiffs(t *testing.T, diffs []Diff) {
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
	if got := sorted(v1.Extra); !slices.Equal(got, shared) {
		t.Errorf("v1model extra entities = %v, want %v", got, shared)
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
// package p4info) exists in each program, with the id of the constant.
func TestControllerNamesInEveryProgram(t *testing.T) {
	names := map[string]uint32{
		"table " + p4info.TableWorkers:            p4info.TableWorkersID,
		"table " + p4info.TableReplyAddress:       p4info.TableReplyAddressID,
		"action " + p4info.ActionNoAction:         0, // core.p4: id not pinned in the source
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
		prog, err := ParseProgram(string(read(t, s.Source)))
		if err != nil {
			t.Fatal(err)
		}
		info, err := ModelFromText(read(t, s.P4Info))
		if err != nil {
			t.Fatal(err)
		}
		for entry, id := range names {
			if slices.Contains(s.Absent, entry) {
				continue // replaced on this target, see TestDeviationsAreExactlyThese
			}
			for side, m := range map[string]*Model{s.Source: prog.Model, s.P4Info: info} {
				if !slices.Contains(m.Names(), entry) {
					t.Errorf("%s: missing %s", side, entry)
					continue
				}
				if got := modelID(m, entry); id != 0 && got != id {
					t.Errorf("%s: %s has id %#x, p4info constant says %#x", side, entry, got, id)
				}
			}
		}
	}
}

// The parameters, keys and widths the controller programs, spelled out once
// more from the P4Info documentation so that a change in the main P4Info
// and all programs together still shows up here.
func TestSharedShapes(t *testing.T) {
	for _, s := range Programs {
		prog, err := ParseProgram(string(read(t, s.Source)))
		if err != nil {
			t.Fatal(err)
		}
		m := prog.Model
		w := m.Tables[p4info.TableWorkers]
		if w == nil || len(w.Keys) != 2 ||
			w.Keys[0] != (Key{ID: 1, Name: "hdr.ipv4.src_addr", Width: 32, Match: "EXACT"}) ||
			w.Keys[1] != (Key{ID: 2, Name: "hdr.udp.src_port", Width: 16, Match: "EXACT"}) ||
			w.ConstDefault != p4info.ActionDrop || w.Size != 16384 {
			t.Errorf("%s: workers = %+v", s.Name, w)
		}
		r := m.Tables[p4info.TableReplyAddress]
		if r == nil || len(r.Keys) != 3 ||
			r.Keys[0] != (Key{ID: 1, Name: "meta.job_id", Width: 32, Match: "EXACT"}) ||
			r.Keys[1] != (Key{ID: 2, Name: "meta.rank", Width: 16, Match: "EXACT"}) ||
			r.Keys[2] != (Key{ID: 3, Name: "meta.lane", Width: 8, Match: "EXACT"}) {
			t.Errorf("%s: reply_address = %+v", s.Name, r)
		}
		want := []Param{{1, "job_id", 32}, {2, "rank", 16}, {3, "num_workers", 16}, {4, "mgid", 16}, {5, "lane", 8}, {6, "pool_base", 32}, {7, "pool_size", 32}}
		if a := m.Actions[p4info.ActionSetWorker]; a == nil || !slices.Equal(a.Params, want) {
			t.Errorf("%s: set_worker = %+v", s.Name, a)
		}
		want = []Param{{1, "dst_mac", 48}, {2, "dst_ipv4", 32}, {3, "dst_port", 16}}
		if a := m.Actions[p4info.ActionSetReply]; a == nil || !slices.Equal(a.Params, want) {
			t.Errorf("%s: set_reply = %+v", s.Name, a)
		}
		if c := m.Counters[p4info.CounterStats]; c == nil || c.Size != p4info.StatsSize || c.Unit != "PACKETS" {
			t.Errorf("%s: stats = %+v", s.Name, c)
		}
		if c := m.Registers[p4info.RegisterPoolCount]; c == nil || c.elemString() != "bit<16>" || c.Size != p4info.PoolIndices {
			t.Errorf("%s: pool_count = %+v", s.Name, c)
		}
		if c := m.Registers[p4info.RegisterPoolExponent]; c == nil || c.elemString() != "int<8>" || c.Size != p4info.PoolIndices {
			t.Errorf("%s: pool_exponent = %+v", s.Name, c)
		}
	}
	v1, err := ParseProgram(string(read(t, "v1model/switchml.p4")))
	if err != nil {
		t.Fatal(err)
	}
	if r := v1.Model.Registers[p4info.RegisterPoolValues]; r == nil || r.Size != p4info.PoolIndices*p4info.ValuesPerIndex || r.elemString() != "bit<32>" {
		t.Errorf("v1model pool_values = %+v", r)
	}
	tna, err := ParseProgram(string(read(t, "tna/switchml.p4")))
	if err != nil {
		t.Fatal(err)
	}
	if r := tna.Model.Registers["SwitchMLIngress.pool_bitmap_pair"]; r == nil || r.Size != p4info.Slots || r.elemString() != "{set0:bit<32>,set1:bit<32>}" {
		t.Errorf("tna pool_bitmap_pair = %+v", r)
	}
	if r := tna.Model.Registers["SwitchMLIngress.pool_values_31"]; r == nil || r.Size != p4info.PoolIndices || r.elemString() != "{first:bit<32>,second:bit<32>}" {
		t.Errorf("tna pool_values_31 = %+v", r)
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
			"hdr.values.v" + lo + " = pool_values_" + n + "_add.execute(meta.idx);",
			"hdr.values.v" + lo + " = pool_values_" + n + "_read_first.execute(meta.idx);",
			"hdr.values.v" + hi + " = pool_values_" + n + "_read_second.execute(meta.idx);",
		} {
			if c := strings.Count(tna, stmt); c != 1 {
				t.Errorf("tna: %q appears %d times", stmt, c)
			}
		}
		// Tofino: at most 4 RegisterActions per register.
		if c := strings.Count(tna, "(pool_values_"+n+") "); c != 4 {
			t.Errorf("tna: pool_values_%s has %d RegisterActions, want 4", n, c)
		}
	}
}

// mutation changes text with a regexp that must match exactly once.
type mutation struct {
	name   string
	file   string // "source" or "p4info"
	re     string
	repl   string
	entity string // the diff must name this entity
	msg    string // and contain this
	count  int    // matches of re expected; 0 means 1
}

// The checker notices a change on either side: each mutation of a copy of a
// program or its P4Info must produce a diff naming the changed entity.
func TestCheckerReportsMutations(t *testing.T) {
	muts := []mutation{
		{"rename table in source", "source", `table workers \{`, "table workerz {", "SwitchMLIngress.workers", "missing in", 0},
		// Declaration and table reference renamed together: still valid P4.
		{"rename action in source", "source", `\bset_reply\b`, "set_replies", "SwitchMLEgress.set_reply", "missing in", 2},
		{"rename action param in source", "source", `bit<16> num_workers, bit<16> mgid`, "bit<16> n_workers, bit<16> mgid", "SwitchMLIngress.set_worker", `parameter 3 is "n_workers"`, 0},
		{"narrow action param in source", "source", `bit<8> lane, bit<32> pool_base`, "bit<16> lane, bit<32> pool_base", "SwitchMLIngress.set_worker", "parameter lane is 16 bits", 0},
		{"change match kind in source", "source", `hdr\.udp\.src_port : exact;`, "hdr.udp.src_port : ternary;", "SwitchMLIngress.workers", "is TERNARY", 0},
		{"change key field in source", "source", `meta\.lane : exact;`, "meta.job_id : exact;", "SwitchMLEgress.reply_address", `match field 3 is "meta.job_id"`, 0},
		{"drop a key in source", "source", `meta\.rank : ternary;\n`, "", "SwitchMLIngress.drop_simulator", "1 match fields", 0},
		{"change table size in source", "source", `size = 64;\n(\s+\}\n\n\s+// ARP)`, "size = 128;\n$1", "SwitchMLIngress.drop_simulator", "size 128", 0},
		{"change action scope in source", "source", `@tableonly set_worker;`, "set_worker;", "SwitchMLIngress.workers", "scope TABLE_AND_DEFAULT", 0},
		{"change default action in source", "source", `(actions = \{\n\s+@tableonly set_worker;\n\s+@defaultonly drop;\n\s+\}\n\s+)const default_action = drop\(\);`, "${1}default_action = drop();", "SwitchMLIngress.workers", "const default action", 0},
		{"change table id in source", "source", `@id\(0x02000002\)`, "@id(0x02000009)", "SwitchMLEgress.reply_address", "id 0x2000009", 0},
		{"rename register in source", "source", `\) pool_count;`, ") pool_counts;", "SwitchMLIngress.pool_count", "missing in", 0},
		{"widen register in source", "source", `register<bit<16>>\(POOL_INDICES\) pool_count;`, "register<bit<32>>(POOL_INDICES) pool_count;", "SwitchMLIngress.pool_count", "element type bit<32>", 0},
		{"unsign register in source", "source", `register<int<8>>`, "register<bit<8>>", "SwitchMLIngress.pool_exponent", "element type bit<8>", 0},
		{"resize register in source", "source", `register<value_t>\(POOL_VALUES\)`, "register<value_t>(POOL_INDICES)", "SwitchMLIngress.pool_values", "size 16384", 0},
		{"rename counter in source", "source", `CounterType\.packets\) stats;`, "CounterType.packets) stat;", "SwitchMLIngress.stats", "missing in", 0},
		{"counter unit in source", "source", `CounterType\.packets\) stats;`, "CounterType.bytes) stats;", "SwitchMLIngress.stats", "unit BYTES", 0},
		{"rename control in source", "source", `control SwitchMLEgress\(`, "control SwitchMLEgres(", "SwitchMLEgress.reply_address", "missing in", 0},
		{"remove @id in source", "source", `@id\(0x01000100\)\n`, "", "action SwitchMLIngress.set_drop_rates", "no @id", 0},

		{"rename table in p4info", "p4info", `name: "SwitchMLIngress\.workers"`, `name: "SwitchMLIngress.worker"`, "SwitchMLIngress.workers", "missing in", 0},
		{"rename param in p4info", "p4info", `name: "dst_port"`, `name: "dst_udp_port"`, "SwitchMLEgress.set_reply", `parameter 3 is "dst_port"`, 0},
		{"narrow key in p4info", "p4info", `(name: "hdr\.udp\.src_port"\n\s+)bitwidth: 16`, "${1}bitwidth: 15", "SwitchMLIngress.workers", "15", 0},
		{"match kind in p4info", "p4info", `(name: "meta\.rank"\n\s+bitwidth: 16\n\s+)match_type: TERNARY`, "${1}match_type: EXACT", "SwitchMLIngress.drop_simulator", "is TERNARY", 0},
		{"register size in p4info", "p4info", `size: 1048576`, "size: 1048575", "SwitchMLIngress.pool_values", "1048575", 0},
		{"register id in p4info", "p4info", `id: 369098754\n`, "id: 369098760\n", "SwitchMLIngress.pool_count", "id 0x16000002", 0},
		{"counter size in p4info", "p4info", `size: 32\n`, "size: 16\n", "SwitchMLIngress.stats", "size 32", 0},
	}
	runMutations(t, "v1model", muts)
}

// The same for the TNA program's own shapes (pair registers, TNA externs).
func TestCheckerReportsTNAMutations(t *testing.T) {
	muts := []mutation{
		{"rename pair register", "source", `\) pool_values_07;`, ") pool_values_7;", "SwitchMLIngress.pool_values_07", "missing in", 0},
		{"rename pair member", "source", `value_t second; // element 2j\+1`, "value_t hi;", "SwitchMLIngress.pool_values_00", "element type", 0},
		{"resize bitmap pair", "source", `Register<bitmap_pair_t, slot_t>\(SLOTS\)`, "Register<bitmap_pair_t, slot_t>(POOL_INDICES)", "SwitchMLIngress.pool_bitmap_pair", "size 16384", 0},
		{"counter type", "source", `CounterType_t\.PACKETS\) stats;`, "CounterType_t.BYTES) stats;", "SwitchMLIngress.stats", "unit BYTES", 0},
		{"register in p4info", "p4info", `name: "SwitchMLIngress\.pool_values_31"`, `name: "SwitchMLIngress.pool_values_32"`, "SwitchMLIngress.pool_values_31", "missing in", 0},
		{"struct member in p4info", "p4info", `name: "set1"`, `name: "set_1"`, "SwitchMLIngress.pool_bitmap_pair", "element type", 0},
	}
	runMutations(t, "tna", muts)
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

func TestParseProgramErrors(t *testing.T) {
	for name, src := range map[string]string{
		"no architecture":   "control C() { apply {} }",
		"unbalanced":        "#include <v1model.p4>\ncontrol C(inout H hdr) { table t { key = { hdr.x : exact; } ",
		"undeclared action": "#include <v1model.p4>\nstruct H { bit<8> x; }\ncontrol C(inout H hdr) { table t { key = { hdr.x : exact; } actions = { nope; } } apply {} }",
		"unknown key field": "#include <v1model.p4>\nstruct H { bit<8> x; }\ncontrol C(inout H hdr) { table t { key = { hdr.y : exact; } actions = { NoAction; } } apply {} }",
		"unknown size":      "#include <v1model.p4>\ncontrol C() { register<bit<8>>(N) r; apply {} }",
		"comment":           "#include <v1model.p4>\n/* open",
	} {
		if _, err := ParseProgram(src); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseProgramBasics(t *testing.T) {
	src := `#include <core.p4>
#include <v1model.p4>
typedef bit<9> port_t;
const bit<32> N = 2 * (3 + 1) << 2;   // 32
header h_t { port_t p; bit<4> a; bit<4> b; }
struct hs { h_t h; }
action top_level(bit<8> x) { }
control C(inout hs hdr, inout standard_metadata_t sm) {
    register<bit<32>>(N) r;  // generic closing >> in one go
    @name(".renamed") counter(N, CounterType.packets_and_bytes) c;
    action a(port_t port, in bit<8> notcp) { }
    @hidden action helper() { }
    table t {
        key = { hdr.h.p : lpm @name("port"); hdr.h.a[3:1] : range; }
        actions = { a; @defaultonly top_level; }
        size = N + 1;
    }
    @hidden table u { key = { hdr.h.b : exact; } actions = { helper; } }
    apply { t.apply(); helper(); }
}
V1Switch(C(), C()) main;
`
	p, err := ParseProgram(src)
	if err != nil {
		t.Fatal(err)
	}
	m := p.Model
	got := m.Names()
	want := []string{"action C.a", "action top_level", "counter renamed", "register C.r", "table C.t"}
	if !slices.Equal(got, want) {
		t.Fatalf("names = %v, want %v", got, want)
	}
	tab := m.Tables["C.t"]
	if tab.Size != 33 || len(tab.Keys) != 2 ||
		tab.Keys[0] != (Key{ID: 1, Name: "port", Width: 9, Match: "LPM"}) ||
		tab.Keys[1] != (Key{ID: 2, Name: "hdr.h.a[3:1]", Width: 3, Match: "RANGE"}) ||
		tab.Actions["C.a"] != "TABLE_AND_DEFAULT" || tab.Actions["top_level"] != "DEFAULT_ONLY" {
		t.Errorf("table = %+v", tab)
	}
	if a := m.Actions["C.a"]; len(a.Params) != 1 || a.Params[0] != (Param{ID: 1, Name: "port", Width: 9}) {
		t.Errorf("action a = %+v", a)
	}
	if r := m.Registers["C.r"]; r.Size != 32 || r.elemString() != "bit<32>" {
		t.Errorf("register = %+v", r)
	}
	if c := m.Counters["renamed"]; c.Size != 32 || normUnit(c.Unit) != "BOTH" {
		t.Errorf("counter = %+v", c)
	}
}

func reported(diffs []Diff, entity, msg string) bool {
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

// runMutations applies each mutation to target's source or P4Info on its
// own and expects the checker to report it.
func runMutations(t *testing.T, target string, muts []mutation) {
	t.Helper()
	s := spec(t, target)
	src, info := string(read(t, s.Source)), string(read(t, s.P4Info))
	for _, m := range muts {
		t.Run(m.name, func(t *testing.T) {
			re := regexp.MustCompile(m.re)
			text := src
			if m.file == "p4info" {
				text = info
			}
			if n, want := len(re.FindAllStringIndex(text, -1)), max(m.count, 1); n != want {
				t.Fatalf("pattern %q matches %d times, want %d", m.re, n, want)
			}
			mutated := re.ReplaceAllString(text, m.repl)
			var diffs []Diff
			var err error
			if m.file == "p4info" {
				diffs, err = CheckProgram([]byte(src), []byte(mutated), s)
			} else {
				diffs, err = CheckProgram([]byte(mutated), []byte(info), s)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reported(diffs, m.entity, m.msg) {
				t.Errorf("no diff for %s containing %q; got %v", m.entity, m.msg, diffs)
			}
		})
	}
}
