// Package programs keeps the P4 programs of the SwitchML switch (v1model for
// BMv2 in p4/v1model, TNA for Tofino in p4/tna) consistent with the P4Info
// the controller and the software switch are built against
// (p4/p4info/switchml.p4info.txtpb).
//
// The compilers are the judge of the programs: the tests compile each
// program (p4c-bm2-ss, bf-p4c) and compare the P4Info the compiler writes
// with the checked-in one (package shape reduces both to a Model and
// reports every difference in names, ids, widths, match kinds, scopes and
// sizes). What no compiler checks is checked here without one: each
// program's P4Info against the main P4Info, with the deviations listed in
// Programs (and the lists themselves exact).
//
// The per-element parts of the programs (64 values) are generated from
// templates by go generate (see Generate and ./gen).
package programs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/switchml/switchml-go/p4/p4info/shape"
	// The Tofino P4Info extension messages, for the TNA program's externs.
	_ "github.com/switchml/switchml-go/p4/tna"
)

// ProgramSpec describes one P4 program and how its P4Info may differ from
// the main P4Info. Paths are relative to the p4 directory.
type ProgramSpec struct {
	Name   string
	Arch   string
	Source string
	P4Info string
	// Absent are main P4Info entities ("kind name") the program replaces
	// by others; a controller must not address them on this target.
	Absent []string
	// Extra are entities ("kind name") only this program has.
	Extra []string
	// Prefix is the pipeline instance name the compiler puts in front of
	// table, register and counter names ("pipe." for TNA); the names
	// compare with the main P4Info's without it.
	Prefix string
	// GeneratedExternIDs: the compiler gives registers and counters ids of
	// its own (bf-p4c ignores @id on TNA externs), so theirs are not
	// compared with the main P4Info's; P4Runtime clients resolve them by
	// name (p4info.Resolve).
	GeneratedExternIDs bool
}

// MainP4Info is the P4Info the controller and software switch use.
const MainP4Info = "p4info/switchml.p4info.txtpb"

// sharedExtra are the entities both P4 programs add to the main P4Info: the
// drop simulator and the ARP responder, which the software switch does in
// its own way (transport fault injection; it answers ARP through the host).
var sharedExtra = []string{
	shape.KindTable + " SwitchMLIngress.drop_simulator",
	shape.KindAction + " SwitchMLIngress.set_drop_rates",
	shape.KindTable + " SwitchMLIngress.arp_reply",
	shape.KindAction + " SwitchMLIngress.send_arp_reply",
}

// leafExtra are the entities of the leaf role in a two-level tree (the
// v1model program): the software switch keeps a job's uplink outside its
// P4Info (switch --parent).
var leafExtra = []string{
	shape.KindTable + " SwitchMLIngress.uplink",
	shape.KindAction + " SwitchMLIngress.set_uplink",
	shape.KindTable + " SwitchMLIngress.from_parent",
	shape.KindAction + " SwitchMLIngress.set_parent_result",
	shape.KindRegister + " SwitchMLIngress.pool_waiting",
	shape.KindRegister + " SwitchMLIngress.pool_use",
}

// Programs lists the P4 programs and their deviations from the main P4Info.
var Programs = []ProgramSpec{
	{
		Name:   "v1model",
		Arch:   "v1model",
		Source: "v1model/switchml.p4",
		P4Info: "v1model/switchml.p4info.txtpb",
		Extra:  append(append([]string{}, sharedExtra...), leafExtra...),
	},
	{
		Name:   "tna",
		Arch:   "tna",
		Source: "tna/switchml.p4",
		P4Info: "tna/switchml.p4info.txtpb",
		// Tofino updates one register entry per stage and packet: the two
		// sets' bitmaps of a slot live in one entry (so one access clears
		// the rank's bit in the other set), and the 64 sums are spread
		// over 32 registers of element pairs.
		Absent: []string{
			shape.KindRegister + " SwitchMLIngress.pool_bitmap",
			shape.KindRegister + " SwitchMLIngress.pool_values",
		},
		Extra: append(append([]string{
			shape.KindRegister + " SwitchMLIngress.pool_bitmap_pair",
		}, pairRegisterNames()...), sharedExtra...),
		GeneratedExternIDs: true,
	},
	{
		// The same source compiled for Tofino 2, where it tags each
		// (set, slot) with its job (JOB_TAG in the source).
		Name:   "tofino2",
		Arch:   "t2na",
		Source: "tna/switchml.p4",
		P4Info: "tna/switchml.tofino2.p4info.txtpb",
		Absent: []string{
			shape.KindRegister + " SwitchMLIngress.pool_bitmap",
			shape.KindRegister + " SwitchMLIngress.pool_values",
		},
		Extra: append(append([]string{
			shape.KindRegister + " SwitchMLIngress.pool_bitmap_pair",
			shape.KindRegister + " SwitchMLIngress.pool_tag",
		}, pairRegisterNames()...), sharedExtra...),
		GeneratedExternIDs: true,
	},
}

func pairRegisterNames() []string {
	var out []string
	for _, p := range Data().Pairs {
		out = append(out, shape.KindRegister+" SwitchMLIngress.pool_values_"+p.N)
	}
	return out
}

// LoadP4Info parses a P4Info in protobuf text format.
func LoadP4Info(text []byte) (*p4configv1.P4Info, error) {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(text, info); err != nil {
		return nil, err
	}
	return info, nil
}

// ModelFromText parses P4Info text into a Model.
func ModelFromText(text []byte) (*shape.Model, error) {
	info, err := LoadP4Info(text)
	if err != nil {
		return nil, err
	}
	return shape.FromP4Info(info)
}

// NoAction is core.p4's action. Its id is the compiler's own (p4c and
// bf-p4c do not honour an @id on it, and the main P4Info pins another), so
// no comparison looks at it; its presence, parameters and uses still count.
const NoAction = shape.KindAction + " NoAction"

// ProgramModel reduces a program's P4Info to a Model named as the main
// P4Info names things: without spec.Prefix, and without the ids that the
// compiler chooses on its own (NoAction's, and with GeneratedExternIDs
// those of registers and counters).
func ProgramModel(info []byte, spec ProgramSpec) (*shape.Model, error) {
	m, err := ModelFromText(info)
	if err != nil {
		return nil, err
	}
	if spec.Prefix != "" {
		m = m.WithoutPrefix(spec.Prefix)
	}
	m.ForgetIDs(NoAction)
	if spec.GeneratedExternIDs {
		for n := range m.Registers {
			m.ForgetIDs(shape.KindRegister + " " + n)
		}
		for n := range m.Counters {
			m.ForgetIDs(shape.KindCounter + " " + n)
		}
	}
	return m, nil
}

// CheckCompiled compares the P4Info a compiler wrote for a program with
// the checked-in one, in both directions, every field of the Model: names
// (prefix included), ids, match fields, action references and scopes, const
// default actions, table sizes, parameters, register element types and
// sizes, counter sizes and units. NoAction's id is not compared.
func CheckCompiled(compiled, checkedIn []byte, spec ProgramSpec) ([]shape.Diff, error) {
	c, err := ModelFromText(compiled)
	if err != nil {
		return nil, fmt.Errorf("compiled P4Info of %s: %w", spec.Source, err)
	}
	k, err := ModelFromText(checkedIn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.P4Info, err)
	}
	c.ForgetIDs(NoAction)
	k.ForgetIDs(NoAction)
	diffs := shape.Compare(c, k, shape.Options{AName: "the compiler's P4Info", BName: spec.P4Info})
	if c.Arch != spec.Arch {
		diffs = append(diffs, shape.Diff{Entity: "pkg_info", Msg: fmt.Sprintf("the compiler's P4Info has arch %q, want %q", c.Arch, spec.Arch)})
	}
	return diffs, nil
}

// CheckAgainstMain compares a program's P4Info with the main P4Info: every
// entity of either must be in the other with the same shape and id, unless
// spec lists it as Absent or Extra; and those lists must be exact (an
// Absent entity really absent, an Extra one really present and new).
func CheckAgainstMain(mainInfo, progInfo []byte, spec ProgramSpec) ([]shape.Diff, error) {
	mainModel, err := ModelFromText(mainInfo)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", MainP4Info, err)
	}
	mainModel.ForgetIDs(NoAction)
	prog, err := ProgramModel(progInfo, spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.P4Info, err)
	}
	listed := func(kind, name string) bool {
		e := kind + " " + name
		return slices.Contains(spec.Absent, e) || slices.Contains(spec.Extra, e)
	}
	// The architecture is the program's own, and checked against spec.
	diffs := shape.Compare(mainModel, prog, shape.Options{AName: MainP4Info, BName: spec.P4Info, Skip: listed, IgnoreArch: true})
	if prog.Arch != spec.Arch {
		diffs = append(diffs, shape.Diff{Entity: "pkg_info", Msg: fmt.Sprintf("%s has arch %q, want %q", spec.P4Info, prog.Arch, spec.Arch)})
	}
	mainNames, progNames := mainModel.Names(), prog.Names()
	for _, e := range spec.Absent {
		if !slices.Contains(mainNames, e) {
			diffs = append(diffs, shape.Diff{Entity: e, Msg: "listed as absent from " + spec.Name + " but not in " + MainP4Info})
		}
		if slices.Contains(progNames, e) {
			diffs = append(diffs, shape.Diff{Entity: e, Msg: "listed as absent but present in " + spec.P4Info})
		}
	}
	for _, e := range spec.Extra {
		if !slices.Contains(progNames, e) {
			diffs = append(diffs, shape.Diff{Entity: e, Msg: "listed as specific to " + spec.Name + " but not in " + spec.P4Info})
		}
		if slices.Contains(mainNames, e) {
			diffs = append(diffs, shape.Diff{Entity: e, Msg: "listed as specific to " + spec.Name + " but also in " + MainP4Info})
		}
	}
	return diffs, nil
}

// CheckAll runs CheckAgainstMain for every program, with files read from
// p4dir (the repository's p4 directory).
func CheckAll(p4dir string) ([]shape.Diff, error) {
	read := func(rel string) ([]byte, error) { return os.ReadFile(filepath.Join(p4dir, rel)) }
	mainInfo, err := read(MainP4Info)
	if err != nil {
		return nil, err
	}
	var all []shape.Diff
	for _, spec := range Programs {
		info, err := read(spec.P4Info)
		if err != nil {
			return nil, err
		}
		d, err := CheckAgainstMain(mainInfo, info, spec)
		if err != nil {
			return nil, err
		}
		all = append(all, d...)
	}
	return all, nil
}
