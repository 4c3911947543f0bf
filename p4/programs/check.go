// Package programs keeps the P4 programs of the SwitchML switch (v1model for
// BMv2 in p4/v1model, TNA for Tofino in p4/tna) consistent with the P4Info
// the controller and the software switch are built against
// (p4/p4info/switchml.p4info.txtpb).
//
// No P4 compiler is needed: a small reader (ParseProgram) extracts the
// control-plane objects from the P4 source, FromP4Info does the same for a
// P4Info, and Compare reports every difference in names, ids, widths, match
// kinds, scopes and sizes. Each program has its own P4Info; where it
// deviates from the main one the deviation is listed in Programs, and the
// list itself is checked to be exact.
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
}

// MainP4Info is the P4Info the controller and software switch use.
const MainP4Info = "p4info/switchml.p4info.txtpb"

// sharedExtra are the entities both P4 programs add to the main P4Info: the
// drop simulator and the ARP responder, which the software switch does in
// its own way (transport fault injection; it answers ARP through the host).
var sharedExtra = []string{
	KindTable + " SwitchMLIngress.drop_simulator",
	KindAction + " SwitchMLIngress.set_drop_rates",
	KindTable + " SwitchMLIngress.arp_reply",
	KindAction + " SwitchMLIngress.send_arp_reply",
}

// Programs lists the P4 programs and their deviations from the main P4Info.
var Programs = []ProgramSpec{
	{
		Name:   "v1model",
		Arch:   "v1model",
		Source: "v1model/switchml.p4",
		P4Info: "v1model/switchml.p4info.txtpb",
		Extra:  sharedExtra,
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
			KindRegister + " SwitchMLIngress.pool_bitmap",
			KindRegister + " SwitchMLIngress.pool_values",
		},
		Extra: append(append([]string{
			KindRegister + " SwitchMLIngress.pool_bitmap_pair",
		}, pairRegisterNames()...), sharedExtra...),
	},
}

func pairRegisterNames() []string {
	var out []string
	for _, p := range Data().Pairs {
		out = append(out, KindRegister+" SwitchMLIngress.pool_values_"+p.N)
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
func ModelFromText(text []byte) (*Model, error) {
	info, err := LoadP4Info(text)
	if err != nil {
		return nil, err
	}
	return FromP4Info(info)
}

// CheckProgram compares a program's source with its own P4Info: both
// directions, every field.
func CheckProgram(src, p4info []byte, spec ProgramSpec) ([]Diff, error) {
	prog, err := ParseProgram(string(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.Source, err)
	}
	info, err := ModelFromText(p4info)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.P4Info, err)
	}
	prog.Model.Arch = prog.Arch
	diffs := Compare(prog.Model, info, spec.Source, spec.P4Info, nil)
	if prog.Arch != spec.Arch {
		diffs = append(diffs, Diff{Entity: "pkg_info", Msg: fmt.Sprintf("%s includes the %s architecture, want %s", spec.Source, prog.Arch, spec.Arch)})
	}
	// Every control-plane object of the source carries an @id, so the
	// compiler's P4Info and the checked-in one agree on ids too. NoAction
	// comes from core.p4 and cannot be annotated.
	for _, n := range prog.Model.Names() {
		if id := modelID(prog.Model, n); id == 0 && n != KindAction+" NoAction" {
			diffs = append(diffs, Diff{Entity: n, Msg: spec.Source + ": no @id annotation"})
		}
	}
	return diffs, nil
}

// CheckAgainstMain compares a program's P4Info with the main P4Info: every
// entity of either must be in the other with the same shape and id, unless
// spec lists it as Absent or Extra; and those lists must be exact (an
// Absent entity really absent, an Extra one really present and new).
func CheckAgainstMain(mainInfo, progInfo []byte, spec ProgramSpec) ([]Diff, error) {
	mainModel, err := ModelFromText(mainInfo)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", MainP4Info, err)
	}
	prog, err := ModelFromText(progInfo)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.P4Info, err)
	}
	listed := func(kind, name string) bool {
		e := kind + " " + name
		return slices.Contains(spec.Absent, e) || slices.Contains(spec.Extra, e)
	}
	var diffs []Diff
	for _, d := range Compare(mainModel, prog, MainP4Info, spec.P4Info, listed) {
		if d.Entity != "pkg_info" { // the architecture is the program's own
			diffs = append(diffs, d)
		}
	}
	if prog.Arch != spec.Arch {
		diffs = append(diffs, Diff{Entity: "pkg_info", Msg: fmt.Sprintf("%s has arch %q, want %q", spec.P4Info, prog.Arch, spec.Arch)})
	}
	mainNames, progNames := mainModel.Names(), prog.Names()
	for _, e := range spec.Absent {
		if !slices.Contains(mainNames, e) {
			diffs = append(diffs, Diff{Entity: e, Msg: "listed as absent from " + spec.Name + " but not in " + MainP4Info})
		}
		if slices.Contains(progNames, e) {
			diffs = append(diffs, Diff{Entity: e, Msg: "listed as absent but present in " + spec.P4Info})
		}
	}
	for _, e := range spec.Extra {
		if !slices.Contains(progNames, e) {
			diffs = append(diffs, Diff{Entity: e, Msg: "listed as specific to " + spec.Name + " but not in " + spec.P4Info})
		}
		if slices.Contains(mainNames, e) {
			diffs = append(diffs, Diff{Entity: e, Msg: "listed as specific to " + spec.Name + " but also in " + MainP4Info})
		}
	}
	return diffs, nil
}

// CheckAll runs CheckProgram and CheckAgainstMain for every program, with
// files read from p4dir (the repository's p4 directory).
func CheckAll(p4dir string) ([]Diff, error) {
	read := func(rel string) ([]byte, error) { return os.ReadFile(filepath.Join(p4dir, rel)) }
	mainInfo, err := read(MainP4Info)
	if err != nil {
		return nil, err
	}
	var all []Diff
	for _, spec := range Programs {
		src, err := read(spec.Source)
		if err != nil {
			return nil, err
		}
		info, err := read(spec.P4Info)
		if err != nil {
			return nil, err
		}
		d, err := CheckProgram(src, info, spec)
		if err != nil {
			return nil, err
		}
		all = append(all, d...)
		d, err = CheckAgainstMain(mainInfo, info, spec)
		if err != nil {
			return nil, err
		}
		all = append(all, d...)
	}
	return all, nil
}

func modelID(m *Model, entry string) uint32 {
	var kind, name string
	if _, err := fmt.Sscanf(entry, "%s %s", &kind, &name); err != nil {
		return 0
	}
	switch kind {
	case KindTable:
		return m.Tables[name].ID
	case KindAction:
		return m.Actions[name].ID
	case KindRegister:
		return m.Registers[name].ID
	case KindCounter:
		return m.Counters[name].ID
	}
	return 0
}
