package bmv2

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// program is the part of a BMv2 JSON program that a P4Info names.
type jsonProgram struct {
	HeaderTypes []json.RawMessage `json:"header_types"`
	Pipelines   []struct {
		Name   string `json:"name"`
		Tables []struct {
			Name string `json:"name"`
		} `json:"tables"`
	} `json:"pipelines"`
	Actions []struct {
		Name string `json:"name"`
	} `json:"actions"`
	Registers []struct {
		Name     string `json:"name"`
		Size     int64  `json:"size"`
		Bitwidth int32  `json:"bitwidth"`
	} `json:"register_arrays"`
	Counters []struct {
		Name string `json:"name"`
		Size int64  `json:"size"`
	} `json:"counter_arrays"`
}

// CheckProgram tells whether a BMv2 JSON program and a P4Info describe the
// same pipeline: the JSON parses as a BMv2 program, and every table, action,
// register and counter the P4Info names is in it (registers and counters with
// the same size), and every control-plane table of the program is in the
// P4Info. BMv2 itself aborts on some malformed programs instead of refusing
// them, so a controller checks before it pushes.
func CheckProgram(programJSON []byte, info *p4configv1.P4Info) error {
	var p jsonProgram
	if err := json.Unmarshal(programJSON, &p); err != nil {
		return fmt.Errorf("%w: %v", ErrNotProgram, err)
	}
	if len(p.Pipelines) == 0 || len(p.HeaderTypes) == 0 || len(p.Actions) == 0 {
		return fmt.Errorf("%w: no pipelines, header types or actions (compile the v1model program with p4c-bm2-ss)", ErrNotProgram)
	}
	var errs []error
	tables := map[string]bool{}
	for _, pl := range p.Pipelines {
		for _, t := range pl.Tables {
			tables[t.Name] = true
		}
	}
	actions := map[string]bool{}
	for _, a := range p.Actions {
		actions[a.Name] = true
	}
	infoTables := map[string]bool{}
	for _, t := range info.GetTables() {
		n := t.GetPreamble().GetName()
		infoTables[n] = true
		if !tables[n] {
			errs = append(errs, fmt.Errorf("the P4Info's table %s is not in the program", n))
		}
	}
	for _, a := range info.GetActions() {
		if n := a.GetPreamble().GetName(); !actions[n] {
			errs = append(errs, fmt.Errorf("the P4Info's action %s is not in the program", n))
		}
	}
	for _, r := range info.GetRegisters() {
		n := r.GetPreamble().GetName()
		i := slices.IndexFunc(p.Registers, func(x struct {
			Name     string `json:"name"`
			Size     int64  `json:"size"`
			Bitwidth int32  `json:"bitwidth"`
		}) bool {
			return x.Name == n
		})
		switch {
		case i < 0:
			errs = append(errs, fmt.Errorf("the P4Info's register %s is not in the program", n))
		case p.Registers[i].Size != int64(r.GetSize()):
			errs = append(errs, fmt.Errorf("register %s has %d cells in the program, %d in the P4Info", n, p.Registers[i].Size, r.GetSize()))
		}
	}
	for _, c := range info.GetCounters() {
		n := c.GetPreamble().GetName()
		found := false
		for _, x := range p.Counters {
			if x.Name == n {
				found = true
				if x.Size != c.GetSize() {
					errs = append(errs, fmt.Errorf("counter %s has %d cells in the program, %d in the P4Info", n, x.Size, c.GetSize()))
				}
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("the P4Info's counter %s is not in the program", n))
		}
	}
	// Tables p4c made for the control plane carry their control's name;
	// those it made for statements are tbl_*.
	for n := range tables {
		if strings.Contains(n, ".") && !infoTables[n] {
			errs = append(errs, fmt.Errorf("the program's table %s is not in the P4Info", n))
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return fmt.Errorf("%w: %w", ErrP4InfoMismatch, errors.Join(errs...))
	}
	return nil
}
