package programs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/proto"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4info/shape"
	"github.com/switchml/switchml-go/p4/p4tools"
	"github.com/switchml/switchml-go/p4/stratum"
)

// The compilers run once per test binary, in a directory TestMain removes.
var scratch string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "switchml-programs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// compiled is what one compiler run left: the P4Info text, the compiler's
// output (warnings) and the output directory. cached says the run was
// restored from the compile cache (p4tools.RunCached): the same compiler
// ran on the same source before, and this is what it wrote then.
type compiled struct {
	p4info []byte
	output string
	dir    string
	cached bool
	err    error
}

func (c *compiled) get(t *testing.T) *compiled {
	t.Helper()
	c.logCached(t)
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c
}

// logCached says in the test's log when the compile was restored.
func (c *compiled) logCached(t *testing.T) {
	t.Helper()
	if c.cached {
		t.Logf("%s: the compiler's result for this source, restored from the compile cache (%s=off compiles afresh)",
			filepath.Base(c.dir), p4tools.EnvCompileCache)
	}
}

// p4cV1Model compiles a v1model source with p4c-bm2-ss into a fresh
// directory under scratch.
func p4cV1Model(tools *p4tools.Tools, src []byte, name string) *compiled {
	dir := filepath.Join(scratch, name)
	c := &compiled{dir: dir}
	if c.err = os.MkdirAll(dir, 0o755); c.err != nil {
		return c
	}
	if c.err = os.WriteFile(filepath.Join(dir, "switchml.p4"), src, 0o644); c.err != nil {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The command p4/README.md gives.
	out, cached, err := tools.RunCached(ctx, dir, []string{filepath.Join(dir, "switchml.p4")}, "p4c-bm2-ss", "--arch", "v1model", "--std", "p4-16",
		"-o", "switchml.json", "--p4runtime-files", "switchml.p4info.txtpb", "switchml.p4")
	c.output, c.cached = string(out), cached
	if err != nil {
		c.err = err
		return c
	}
	c.p4info, c.err = os.ReadFile(filepath.Join(dir, "switchml.p4info.txtpb"))
	return c
}

var (
	v1Once, tnaOnce, t2Once sync.Once
	v1Result                *compiled
	tnaResult               *compiled
	t2Result                *compiled
)

// compiledV1Model is the checked-in v1model program compiled by p4c.
func compiledV1Model(t *testing.T) *compiled {
	t.Helper()
	tools := p4tools.ForTest(t)
	v1Once.Do(func() { v1Result = p4cV1Model(tools, read(t, "v1model/switchml.p4"), "v1model") })
	return v1Result.get(t)
}

// compiledTNA is the checked-in TNA program compiled by bf-p4c for Tofino,
// with the command p4/README.md gives (about half a minute).
func compiledTNA(t *testing.T) *compiled {
	t.Helper()
	tools := p4tools.ForTest(t)
	tnaOnce.Do(func() { tnaResult = bfp4c(t, tools, "tna", "tofino", "tna") })
	return tnaResult.get(t)
}

// compiledTofino2 is the same source compiled for Tofino 2.
func compiledTofino2(t *testing.T) *compiled {
	t.Helper()
	tools := p4tools.ForTest(t)
	t2Once.Do(func() { t2Result = bfp4c(t, tools, "tofino2", "tofino2", "t2na") })
	return t2Result.get(t)
}

// bfp4c compiles tna/switchml.p4 with bf-p4c for a target and architecture
// into scratch/name (with -g, for the resource logs).
func bfp4c(t *testing.T, tools *p4tools.Tools, name, target, arch string) *compiled {
	dir := filepath.Join(scratch, name)
	c := &compiled{dir: dir}
	if c.err = os.MkdirAll(dir, 0o755); c.err != nil {
		return c
	}
	if c.err = os.WriteFile(filepath.Join(dir, "switchml.p4"), read(t, "tna/switchml.p4"), 0o644); c.err != nil {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, cached, err := tools.RunCached(ctx, dir, []string{filepath.Join(dir, "switchml.p4")}, "bf-p4c", "--target", target, "--arch", arch, "--std", "p4-16", "-g",
		"--p4runtime-force-std-externs", "-o", "out", "--p4runtime-files", "out/switchml.p4info.txtpb", "switchml.p4")
	c.output, c.cached = string(out), cached
	if err != nil {
		c.err = err
		return c
	}
	c.p4info, c.err = os.ReadFile(filepath.Join(dir, "out", "switchml.p4info.txtpb"))
	return c
}

// stages reads the number of ingress and egress stages bf-p4c allocated
// from its table summary (pipe/logs/table_summary.log, written with -g).
func stages(t *testing.T, c *compiled) (ingress, egress int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "out", "pipe", "logs", "table_summary.log"))
	if err != nil {
		t.Fatal(err)
	}
	in := regexp.MustCompile(`Number of stages for ingress table allocation: (\d+)`).FindSubmatch(b)
	eg := regexp.MustCompile(`Number of stages for egress table allocation: (\d+)`).FindSubmatch(b)
	if in == nil || eg == nil {
		t.Fatalf("no stage counts in bf-p4c's table summary:\n%.2000s", b)
	}
	fmt.Sscan(string(in[1]), &ingress)
	fmt.Sscan(string(eg[1]), &egress)
	return ingress, egress
}

// fitsStages logs the stages a compiled program uses and checks that
// they fit the chip's limit, in ingress and in egress.
func fitsStages(t *testing.T, c *compiled, chip string, limit int) {
	t.Helper()
	in, eg := stages(t, c)
	t.Logf("%s: %d ingress stages, %d egress stages (of %d)", chip, in, eg, limit)
	if in > limit || eg > limit {
		t.Errorf("%s: the program uses %d ingress, %d egress stages; the chip has %d", chip, in, eg, limit)
	}
}

// hasBinary checks that bf-p4c wrote the chip's binary (pipe/name).
func hasBinary(t *testing.T, c *compiled, name string) {
	t.Helper()
	if st, err := os.Stat(filepath.Join(c.dir, "out", "pipe", name)); err != nil || st.Size() == 0 {
		t.Errorf("no %s: %v", name, err)
	}
}

// warnings lists the compiler's warning lines, without those expected.
func warnings(output string, expected ...string) []string {
	var out []string
	for _, l := range strings.Split(output, "\n") {
		if !strings.Contains(l, "warning") || strings.Contains(l, "warnings generated") {
			continue
		}
		ok := false
		for _, e := range expected {
			ok = ok || strings.Contains(l, e)
		}
		if !ok {
			out = append(out, l)
		}
	}
	return out
}

// p4c compiles the v1model program without a warning, and writes the
// checked-in P4Info (NoAction's id aside; documentation, pkg_info other
// than the architecture, annotations, initial default actions and order
// are not part of the comparison).
func TestV1ModelCompiles(t *testing.T) {
	c := compiledV1Model(t)
	if w := warnings(c.output); len(w) > 0 {
		t.Errorf("p4c-bm2-ss warns:\n%s", strings.Join(w, "\n"))
	}
	if _, err := os.Stat(filepath.Join(c.dir, "switchml.json")); err != nil {
		t.Error(err)
	}
	diffs, err := CheckCompiled(c.p4info, read(t, "v1model/switchml.p4info.txtpb"), spec(t, "v1model"))
	if err != nil {
		t.Fatal(err)
	}
	logDiffs(t, diffs)
}

// A drifted source is caught by the same comparison: a copy with a renamed
// table and a widened action parameter, compiled, differs from the
// checked-in P4Info exactly there.
func TestV1ModelDriftIsCaught(t *testing.T) {
	tools := p4tools.ForTest(t)
	src := string(read(t, "v1model/switchml.p4"))
	for _, m := range []struct{ re, repl string }{
		{`\btable reply_address\b`, "table reply_addr"},
		{`\breply_address\.apply\(\)`, "reply_addr.apply()"},
		{`bit<8> lane, bit<32> pool_base`, "bit<16> lane, bit<32> pool_base"},
		{`meta\.lane = lane;`, "meta.lane = (bit<8>)lane;"},
	} {
		re := regexp.MustCompile(m.re)
		if n := len(re.FindAllStringIndex(src, -1)); n != 1 {
			t.Fatalf("pattern %q matches %d times, want 1", m.re, n)
		}
		src = re.ReplaceAllString(src, m.repl)
	}
	c := p4cV1Model(tools, []byte(src), "v1model-drift").get(t)
	diffs, err := CheckCompiled(c.p4info, read(t, "v1model/switchml.p4info.txtpb"), spec(t, "v1model"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ entity, msg string }{
		{"SwitchMLEgress.reply_addr", "missing in v1model/switchml.p4info.txtpb"},
		{"SwitchMLEgress.reply_address", "missing in the compiler's P4Info"},
		{"SwitchMLIngress.set_worker", "parameter lane is 16 bits in the compiler's P4Info, 8 in"},
	} {
		if !reported(diffs, want.entity, want.msg) {
			t.Errorf("no diff for %s containing %q; got %v", want.entity, want.msg, diffs)
		}
	}
}

// sortedExterns orders extern instances by id: bf-p4c's order depends on
// its options (-g moves the Snapshot instances).
func sortedExterns(info *p4configv1.P4Info) {
	sort.Slice(info.Externs, func(i, j int) bool { return info.Externs[i].GetExternTypeId() < info.Externs[j].GetExternTypeId() })
	for _, e := range info.Externs {
		sort.Slice(e.Instances, func(i, j int) bool {
			return e.Instances[i].GetPreamble().GetId() < e.Instances[j].GetPreamble().GetId()
		})
	}
}

// equalP4Info reports whether two P4Info texts are the same message,
// extern instance order aside.
func equalP4Info(t *testing.T, a, b []byte) bool {
	t.Helper()
	x, err := LoadP4Info(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := LoadP4Info(b)
	if err != nil {
		t.Fatal(err)
	}
	sortedExterns(x)
	sortedExterns(y)
	return proto.Equal(x, y)
}

// The expected warnings of bf-p4c on the TNA program (see p4/README.md).
var tnaWarnings = []string{
	"Unknown annotation: id",      // backend does not know @id; the P4Info honours it on tables and actions
	"may be uninitialized when",   // metadata the parsers leave to the control blocks
	"min_parse_depth_accept_loop", // from tna.p4's own parser
	// --p4runtime-force-std-externs: the pool index's identity Hash has
	// no standard P4Info form, and nothing for a controller to program.
	"No known conversion to standard P4Info for 'DynHash' extern type",
}

// bf-p4c compiles the TNA program for Tofino all the way to tofino.bin and
// writes exactly the checked-in P4Info.
func TestTNACompiles(t *testing.T) {
	c := compiledTNA(t)
	if w := warnings(c.output, tnaWarnings...); len(w) > 0 {
		t.Errorf("bf-p4c warns:\n%s", strings.Join(w, "\n"))
	}
	hasBinary(t, c, "tofino.bin")
	checkedIn := read(t, "tna/switchml.p4info.txtpb")
	diffs, err := CheckCompiled(c.p4info, checkedIn, spec(t, "tna"))
	if err != nil {
		t.Fatal(err)
	}
	logDiffs(t, diffs)
	if !equalP4Info(t, c.p4info, checkedIn) {
		t.Error("tna/switchml.p4info.txtpb is not what bf-p4c writes: copy the compiler's P4Info over it (keep the header comment)")
	}
}

// bf-p4c compiles the same source for Tofino 2 down to tofino2.bin, with
// the per-slot job tag, in at most Tofino 2's 20 stages, and writes
// exactly the checked-in Tofino 2 P4Info; the Tofino 1 program stays within
// its 12 stages without the tag.
func TestTofino2Compiles(t *testing.T) {
	c := compiledTofino2(t)
	if w := warnings(c.output, tnaWarnings...); len(w) > 0 {
		t.Errorf("bf-p4c warns:\n%s", strings.Join(w, "\n"))
	}
	hasBinary(t, c, "tofino2.bin")
	checkedIn := read(t, "tna/switchml.tofino2.p4info.txtpb")
	diffs, err := CheckCompiled(c.p4info, checkedIn, spec(t, "tofino2"))
	if err != nil {
		t.Fatal(err)
	}
	logDiffs(t, diffs)
	if !equalP4Info(t, c.p4info, checkedIn) {
		t.Error("tna/switchml.tofino2.p4info.txtpb is not what bf-p4c writes for Tofino 2: copy the compiler's P4Info over it (keep the header comment)")
	}
	fitsStages(t, c, "Tofino 2", 20)
	m, err := ModelFromText(c.p4info)
	if err != nil {
		t.Fatal(err)
	}
	if r := m.Registers[p4info.RegisterPoolTag]; r == nil || r.Size != p4info.PoolIndices || r.ElemType() != "bit<32>" {
		t.Errorf("pool_tag = %+v, want bit<32> x %d", r, p4info.PoolIndices)
	}
	fitsStages(t, compiledTNA(t), "Tofino 1", 12)
}

// The compiler's output directories pack into the BfPipelineConfig
// stratum_bfrt takes: the program's name, bfrt.json byte for byte, one
// profile whose context and binary are pipe/context.json and
// pipe/tofino.bin (tofino2.bin for Tofino 2).
func TestStratumPackCompiled(t *testing.T) {
	for _, c := range []struct {
		name string
		out  *compiled
		bin  string
	}{{"tofino", compiledTNA(t), "tofino.bin"}, {"tofino2", compiledTofino2(t), "tofino2.bin"}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(c.out.dir, "out")
			b, err := stratum.Pack(dir)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := stratum.Unpack(b)
			if err != nil {
				t.Fatal(err)
			}
			file := func(rel string) []byte {
				b, err := os.ReadFile(filepath.Join(dir, rel))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			if cfg.GetP4Name() != "switchml" || !bytes.Equal(cfg.GetBfruntimeInfo(), file("bfrt.json")) || len(cfg.GetProfiles()) != 1 {
				t.Fatalf("p4_name %q, bfrt.json equal %v, %d profiles", cfg.GetP4Name(), bytes.Equal(cfg.GetBfruntimeInfo(), file("bfrt.json")), len(cfg.GetProfiles()))
			}
			p := cfg.GetProfiles()[0]
			if p.GetProfileName() != "pipe" || !bytes.Equal(p.GetContext(), file("pipe/context.json")) ||
				!bytes.Equal(p.GetBinary(), file("pipe/"+c.bin)) || !slices.Equal(p.GetPipeScope(), []uint32{0, 1, 2, 3}) {
				t.Errorf("profile %q scope %v: context or binary differ from the compiler's files", p.GetProfileName(), p.GetPipeScope())
			}
		})
	}
}

// Every name the controller uses (the constants of package p4info) is in
// the P4Info bf-p4c writes, except the two registers Tofino replaces by
// pair registers, which are there by name; and the registers and the
// counter are standard P4Runtime ones, the only kind Stratum maps.
func TestTNACompiledHasControllerNames(t *testing.T) {
	m, err := ModelFromText(compiledTNA(t).p4info)
	if err != nil {
		t.Fatal(err)
	}
	names := m.Names()
	want := []string{
		shape.KindTable + " " + p4info.TableWorkers,
		shape.KindTable + " " + p4info.TableReplyAddress,
		shape.KindAction + " " + p4info.ActionNoAction,
		shape.KindAction + " " + p4info.ActionSetWorker,
		shape.KindAction + " " + p4info.ActionDrop,
		shape.KindAction + " " + p4info.ActionSetReply,
		shape.KindCounter + " " + p4info.CounterStats,
		shape.KindRegister + " " + p4info.RegisterPoolCount,
		shape.KindRegister + " " + p4info.RegisterPoolExponent,
		shape.KindRegister + " " + p4info.RegisterPoolBitmapPair,
		shape.KindTable + " " + p4info.TableDropSimulator,
		shape.KindAction + " " + p4info.ActionSetDropRates,
		shape.KindTable + " " + p4info.TableARPReply,
		shape.KindAction + " " + p4info.ActionSendARPReply,
	}
	for _, p := range Data().Pairs {
		want = append(want, shape.KindRegister+" SwitchMLIngress.pool_values_"+p.N)
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			t.Errorf("compiled TNA P4Info has no %s", w)
		}
	}
	for _, gone := range []string{p4info.RegisterPoolBitmap, p4info.RegisterPoolValues} {
		if slices.Contains(names, shape.KindRegister+" "+gone) {
			t.Errorf("compiled TNA P4Info has %s, which the pair registers replace", gone)
		}
	}
	if w := m.Tables[p4info.TableWorkers]; w == nil || w.ID != p4info.TableWorkersID {
		t.Errorf("workers = %+v, want id %#x", w, p4info.TableWorkersID)
	}
	info, err := LoadP4Info(compiledTNA(t).p4info)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.GetRegisters()) != 35 || len(info.GetCounters()) != 1 {
		t.Errorf("the P4Info lists %d standard registers and %d counters, want 35 and 1 (--p4runtime-force-std-externs)", len(info.GetRegisters()), len(info.GetCounters()))
	}
	for _, e := range info.GetExterns() {
		if n := e.GetExternTypeName(); n == "Register" || n == "Counter" {
			t.Errorf("the P4Info lists %s as Tofino externs, which Stratum does not map", n)
		}
	}
}

// A checked-in P4Info that drifts from the compiler's is caught: each
// mutation of its text is reported, through the model where it can see it
// and through the message comparison for the rest.
func TestCompiledComparisonReportsMutations(t *testing.T) {
	type mut struct {
		name, re, repl, entity, msg string
	}
	run := func(t *testing.T, target string, compiledInfo []byte, muts []mut) {
		s := spec(t, target)
		text := string(read(t, s.P4Info))
		for _, m := range muts {
			t.Run(target+" "+m.name, func(t *testing.T) {
				re := regexp.MustCompile(m.re)
				if n := len(re.FindAllStringIndex(text, -1)); n != 1 {
					t.Fatalf("pattern %q matches %d times, want 1", m.re, n)
				}
				mutated := []byte(re.ReplaceAllString(text, m.repl))
				if m.entity == "" {
					if equalP4Info(t, compiledInfo, mutated) {
						t.Error("message comparison sees no difference")
					}
					return
				}
				diffs, err := CheckCompiled(compiledInfo, mutated, s)
				if err != nil {
					t.Fatal(err)
				}
				if !reported(diffs, m.entity, m.msg) {
					t.Errorf("no diff for %s containing %q; got %v", m.entity, m.msg, diffs)
				}
			})
		}
	}
	t.Run("v1model", func(t *testing.T) {
		run(t, "v1model", compiledV1Model(t).p4info, []mut{
			{"rename table", `name: "SwitchMLIngress\.workers"`, `name: "SwitchMLIngress.worker"`, "SwitchMLIngress.workers", "missing in"},
			{"rename param", `name: "dst_port"`, `name: "dst_udp_port"`, "SwitchMLEgress.set_reply", `parameter 3 is "dst_port"`},
			{"narrow key", `(name: "hdr\.switchml\.slot"\n\s+)bitwidth: 14`, "${1}bitwidth: 13", "SwitchMLIngress.from_parent", "13"},
			{"match kind", `(name: "meta\.rank"\n\s+bitwidth: 16\n\s+)match_type: TERNARY`, "${1}match_type: EXACT", "SwitchMLIngress.drop_simulator", "is TERNARY"},
			{"scope", `(id: 16777218\n\s+)scope: TABLE_ONLY`, "${1}scope: TABLE_AND_DEFAULT", "SwitchMLIngress.workers", "scope TABLE_ONLY"},
			{"table size", `size: 16384\n\}\ntables \{\n  preamble \{\n    id: 33554434`, "size: 16383\n}\ntables {\n  preamble {\n    id: 33554434", "SwitchMLIngress.workers", "size 16384"},
			{"table id", `id: 33554434(\n\s+name: "SwitchMLEgress\.reply_address")`, "id: 33554435$1", "SwitchMLEgress.reply_address", "id 0x2000002"},
			{"register size", `size: 1048576`, "size: 1048575", "SwitchMLIngress.pool_values", "1048575"},
			{"register id", `id: 369098754\n`, "id: 369098760\n", "SwitchMLIngress.pool_count", "id 0x16000002"},
			{"register sign", `(name: "SwitchMLIngress\.pool_exponent"\n(?:.*\n){7}\s+)int \{`, "${1}bit {", "SwitchMLIngress.pool_exponent", "element type int<8>"},
			{"counter unit", `unit: PACKETS`, "unit: BYTES", "SwitchMLIngress.stats", "unit PACKETS"},
			{"counter size", `size: 32\n`, "size: 16\n", "SwitchMLIngress.stats", "size 32"},
		})
	})
	t.Run("tna", func(t *testing.T) {
		run(t, "tna", compiledTNA(t).p4info, []mut{
			{"prefixed table", `name: "SwitchMLIngress\.workers"`, `name: "pipe.SwitchMLIngress.workers"`, "SwitchMLIngress.workers", "missing in"},
			{"pair register renamed", `name: "SwitchMLIngress\.pool_values_07"`, `name: "SwitchMLIngress.pool_values_7"`, "SwitchMLIngress.pool_values_07", "missing in"},
			{"pair member", `name: "f2"`, `name: "f_2"`, "SwitchMLIngress.pool_bitmap_pair", "element type"},
			{"register size", `(name: "SwitchMLIngress\.pool_bitmap_pair"\n(?:.*\n){7}\s+)size: 8192`, "${1}size: 16384", "SwitchMLIngress.pool_bitmap_pair", "size 8192"},
			{"register id", `id: 377995297\n`, "id: 377995298\n", "SwitchMLIngress.pool_count", "id 0x1687c021"},
			{"counter unit", `unit: PACKETS`, "unit: BYTES", "SwitchMLIngress.stats", "unit PACKETS"},
			{"param width", `(name: "pool_size"\n\s+)bitwidth: 32`, "${1}bitwidth: 16", "SwitchMLIngress.set_worker", "parameter pool_size is 32 bits"},
			{"port metadata", `value: "ig_intr_md\.ingress_port"`, `value: "ig_md.ingress_port"`, "", ""},
		})
	})
}
