package programs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4info/shape"
	"github.com/switchml/switchml-go/p4/p4tools"
)

// leafSource is the TNA template expanded with the leaf role (behind
// #ifdef SWITCHML_LEAF), as `go run ./gen -leaf` writes it.
func leafSource(t *testing.T) []byte {
	t.Helper()
	src, err := GenerateLeaf("switchml.p4.tmpl", read(t, "tna/switchml.p4.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// bfp4cLeaf compiles the leaf source with -DSWITCHML_LEAF for a target
// into scratch/name, as bfp4c does the checked-in program.
func bfp4cLeaf(tools *p4tools.Tools, src []byte, name, target, arch string) *compiled {
	dir := filepath.Join(scratch, name)
	c := &compiled{dir: dir}
	if c.err = os.MkdirAll(dir, 0o755); c.err != nil {
		return c
	}
	if c.err = os.WriteFile(filepath.Join(dir, "switchml.p4"), src, 0o644); c.err != nil {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out, cached, err := tools.RunCached(ctx, dir, []string{filepath.Join(dir, "switchml.p4")}, "bf-p4c", "--target", target, "--arch", arch, "--std", "p4-16", "-g",
		"-DSWITCHML_LEAF", "--p4runtime-force-std-externs", "-o", "out", "--p4runtime-files", "out/switchml.p4info.txtpb", "switchml.p4")
	c.output, c.cached = string(out), cached
	if err != nil {
		c.err = err
		return c
	}
	c.p4info, c.err = os.ReadFile(filepath.Join(dir, "out", "switchml.p4info.txtpb"))
	return c
}

// The leaf role is an addition: without it the template expands to the
// checked-in program, and the leaf expansion only adds lines, all of them
// behind SWITCHML_LEAF (checked by removing those blocks again).
func TestLeafSourceIsBehindSwitch(t *testing.T) {
	shipped, err := Generate("switchml.p4.tmpl", read(t, "tna/switchml.p4.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shipped, read(t, "tna/switchml.p4")) {
		t.Fatal("tna/switchml.p4 is not the template's expansion without the leaf role: run go generate in p4/programs")
	}
	leaf := leafSource(t)
	if bytes.Equal(leaf, shipped) || !bytes.Contains(leaf, []byte("#ifdef SWITCHML_LEAF")) {
		t.Fatal("the leaf expansion has no SWITCHML_LEAF block")
	}
	if got := withoutLeafBlocks(t, string(leaf)); got != string(shipped) {
		t.Errorf("the leaf expansion without its SWITCHML_LEAF blocks differs from tna/switchml.p4 (%d and %d bytes)", len(got), len(shipped))
	}
}

// withoutLeafBlocks removes the `#ifdef SWITCHML_LEAF` blocks of a source,
// as the preprocessor does without -DSWITCHML_LEAF: each block's lines up
// to its #else (whose lines stay) or #endif.
func withoutLeafBlocks(t *testing.T, src string) string {
	t.Helper()
	var out []string
	depth := 0 // conditional nesting inside a leaf block; 0 outside one
	inElse := false
	for _, l := range strings.SplitAfter(src, "\n") {
		d := strings.TrimSpace(l)
		switch {
		case depth == 0 && !inElse && d == "#ifdef SWITCHML_LEAF":
			depth = 1
			continue
		case depth > 0 && strings.HasPrefix(d, "#if"):
			depth++
		case depth > 1 && d == "#endif":
			depth--
		case depth == 1 && d == "#else":
			depth, inElse = 0, true
			continue
		case depth == 1 && d == "#endif":
			depth = 0
			continue
		case inElse && d == "#endif":
			inElse = false
			continue
		}
		if depth == 0 {
			out = append(out, l)
		}
	}
	if depth != 0 || inElse {
		t.Fatal("unterminated SWITCHML_LEAF block")
	}
	return strings.Join(out, "")
}

// The leaf role refuses Tofino 1, where it has no room: the preprocessor
// stops with the reason.
func TestTofinoLeafRefused(t *testing.T) {
	tools := p4tools.ForTest(t)
	c := bfp4cLeaf(tools, leafSource(t), "tofino-leaf", "tofino", "tna")
	c.logCached(t)
	if c.err == nil {
		t.Fatal("bf-p4c compiled the leaf role for Tofino 1")
	}
	if !strings.Contains(c.output, `error: #error "SWITCHML_LEAF needs Tofino 2`) {
		t.Errorf("bf-p4c failed without the leaf role's reason:\n%.2000s", c.output)
	}
}

// The leaf role compiles for Tofino 2 down to tofino2.bin within its 20
// stages, writing exactly the checked-in tna/switchml.tofino2-leaf.p4info.txtpb;
// that P4Info is the Tofino 2 program's (every table, action, register and
// counter, with the same ids) plus the leaf's tables, actions and
// registers, the two actions taking the 16-bit slot offset.
func TestTofino2LeafCompiles(t *testing.T) {
	tools := p4tools.ForTest(t)
	c := bfp4cLeaf(tools, leafSource(t), "tofino2-leaf", "tofino2", "t2na")
	c.logCached(t)
	if c.err != nil {
		t.Fatalf("bf-p4c did not compile the leaf role for Tofino 2: %v\n%s", c.err, lastLines(c.output, 60))
	}
	if w := warnings(c.output, tnaWarnings...); len(w) > 0 {
		t.Errorf("bf-p4c warns:\n%s", strings.Join(w, "\n"))
	}
	hasBinary(t, c, "tofino2.bin")
	// The P4Info the controller resolves the leaf's slot_delta actions from.
	if !equalP4Info(t, c.p4info, read(t, "tna/switchml.tofino2-leaf.p4info.txtpb")) {
		t.Error("tna/switchml.tofino2-leaf.p4info.txtpb is not what bf-p4c writes for the leaf role on Tofino 2: copy the compiler's P4Info over it (keep the header comment)")
	}
	fitsStages(t, c, "Tofino 2 leaf", 20)

	leaf, err := ModelFromText(c.p4info)
	if err != nil {
		t.Fatal(err)
	}
	switchOnly, err := ModelFromText(read(t, "tna/switchml.tofino2.p4info.txtpb"))
	if err != nil {
		t.Fatal(err)
	}
	for n, tb := range switchOnly.Tables {
		if got := leaf.Tables[n]; got == nil || got.ID != tb.ID {
			t.Errorf("table %s (id %#x) is not in the leaf's P4Info with its id: %+v", n, tb.ID, got)
		}
	}
	for n, a := range switchOnly.Actions {
		if got := leaf.Actions[n]; got == nil || (n != "NoAction" && got.ID != a.ID) {
			t.Errorf("action %s (id %#x) is not in the leaf's P4Info with its id: %+v", n, a.ID, got)
		}
	}
	for n := range switchOnly.Registers {
		if leaf.Registers[n] == nil {
			t.Errorf("register %s is not in the leaf's P4Info", n)
		}
	}
	for n := range switchOnly.Counters {
		if leaf.Counters[n] == nil {
			t.Errorf("counter %s is not in the leaf's P4Info", n)
		}
	}

	for _, n := range []string{p4info.TableUplink, p4info.TableFromParent} {
		if leaf.Tables[n] == nil {
			t.Errorf("the leaf's P4Info has no table %s", n)
		}
	}
	for _, n := range []string{p4info.RegisterPoolWaiting, p4info.RegisterPoolUse} {
		if leaf.Registers[n] == nil {
			t.Errorf("the leaf's P4Info has no register %s", n)
		}
	}
	wantParams := map[string][]shape.Param{
		p4info.ActionSetUplink: {{ID: 1, Name: "port", Width: 9}, {ID: 2, Name: "parent_mac", Width: 48},
			{ID: 3, Name: "parent_ipv4", Width: 32}, {ID: 4, Name: "parent_port", Width: 16}, {ID: 5, Name: "slot_delta", Width: 16}},
		p4info.ActionSetParentResult: {{ID: 1, Name: "job_id", Width: 32}, {ID: 2, Name: "mgid", Width: 16}, {ID: 3, Name: "slot_delta", Width: 16}},
	}
	for n, want := range wantParams {
		a := leaf.Actions[n]
		if a == nil {
			t.Errorf("the leaf's P4Info has no action %s", n)
			continue
		}
		if !slices.Equal(a.Params, want) {
			t.Errorf("action %s has parameters %+v, want %+v", n, a.Params, want)
		}
	}
}

// lastLines is the end of a compiler's output, where its errors are.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
