package softswitch

import (
	"fmt"
	"sort"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/p4/p4info"
)

// schema is the part of the P4Info the service validates requests against.
type schema struct {
	info      *p4configv1.P4Info
	tables    map[uint32]*tableSchema
	actions   map[uint32]*p4configv1.Action
	registers map[uint32]*registerSchema
	counters  map[uint32]*p4configv1.Counter
}

type tableSchema struct {
	t      *p4configv1.Table
	fields map[uint32]*p4configv1.MatchField
	refs   map[uint32]p4configv1.ActionRef_Scope
}

type registerSchema struct {
	name   string
	id     uint32
	width  int
	signed bool
}

func newSchema(info *p4configv1.P4Info) (*schema, error) {
	s := &schema{
		info:      info,
		tables:    map[uint32]*tableSchema{},
		actions:   map[uint32]*p4configv1.Action{},
		registers: map[uint32]*registerSchema{},
		counters:  map[uint32]*p4configv1.Counter{},
	}
	for _, t := range info.GetTables() {
		ts := &tableSchema{t: t, fields: map[uint32]*p4configv1.MatchField{}, refs: map[uint32]p4configv1.ActionRef_Scope{}}
		for _, mf := range t.GetMatchFields() {
			ts.fields[mf.GetId()] = mf
		}
		for _, r := range t.GetActionRefs() {
			ts.refs[r.GetId()] = r.GetScope()
		}
		s.tables[t.GetPreamble().GetId()] = ts
	}
	for _, a := range info.GetActions() {
		s.actions[a.GetPreamble().GetId()] = a
	}
	for _, r := range info.GetRegisters() {
		bs := r.GetTypeSpec().GetBitstring()
		rs := &registerSchema{name: r.GetPreamble().GetName(), id: r.GetPreamble().GetId()}
		switch {
		case bs.GetBit() != nil:
			rs.width = int(bs.GetBit().GetBitwidth())
		case bs.GetInt() != nil:
			rs.width, rs.signed = int(bs.GetInt().GetBitwidth()), true
		default:
			return nil, fmt.Errorf("softswitch: register %s is not a bit<W> or int<W> array", rs.name)
		}
		s.registers[rs.id] = rs
	}
	for _, c := range info.GetCounters() {
		s.counters[c.GetPreamble().GetId()] = c
	}
	for _, id := range []uint32{p4info.TableWorkersID, p4info.TableReplyAddressID} {
		if s.tables[id] == nil {
			return nil, fmt.Errorf("softswitch: embedded P4Info lacks table %#x", id)
		}
	}
	if s.counters[p4info.CounterStatsID] == nil {
		return nil, fmt.Errorf("softswitch: embedded P4Info lacks the stats counter")
	}
	return s, nil
}

func (s *schema) registerIDs() []uint32 {
	ids := make([]uint32, 0, len(s.registers))
	for id := range s.registers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// diff lists how got differs from the implemented P4Info, in terms a person
// fixing the P4 program or the controller can act on.
func (s *schema) diff(got *p4configv1.P4Info) []string {
	var d []string
	want := s.info
	type entity struct {
		kind string
		p    *p4configv1.Preamble
	}
	index := func(info *p4configv1.P4Info) map[string]entity {
		m := map[string]entity{}
		for _, t := range info.GetTables() {
			m[t.GetPreamble().GetName()] = entity{"table", t.GetPreamble()}
		}
		for _, a := range info.GetActions() {
			m[a.GetPreamble().GetName()] = entity{"action", a.GetPreamble()}
		}
		for _, c := range info.GetCounters() {
			m[c.GetPreamble().GetName()] = entity{"counter", c.GetPreamble()}
		}
		for _, r := range info.GetRegisters() {
			m[r.GetPreamble().GetName()] = entity{"register", r.GetPreamble()}
		}
		return m
	}
	wm, gm := index(want), index(got)
	names := make([]string, 0, len(wm)+len(gm))
	for n := range wm {
		names = append(names, n)
	}
	for n := range gm {
		if _, ok := wm[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		w, inW := wm[n]
		g, inG := gm[n]
		switch {
		case !inG:
			d = append(d, fmt.Sprintf("%s %s (id %#x) is missing", w.kind, n, w.p.GetId()))
		case !inW:
			d = append(d, fmt.Sprintf("%s %s is not implemented by this switch", g.kind, n))
		case w.kind != g.kind:
			d = append(d, fmt.Sprintf("%s is a %s here, not a %s", n, w.kind, g.kind))
		case w.p.GetId() != g.p.GetId():
			d = append(d, fmt.Sprintf("%s %s has id %#x, this switch uses %#x", w.kind, n, g.p.GetId(), w.p.GetId()))
		}
	}
	for _, a := range want.GetActions() {
		ga := findAction(got, a.GetPreamble().GetName())
		if ga == nil {
			continue
		}
		if len(ga.GetParams()) != len(a.GetParams()) {
			d = append(d, fmt.Sprintf("action %s has %d parameters, want %d", a.GetPreamble().GetName(), len(ga.GetParams()), len(a.GetParams())))
			continue
		}
		for i, p := range a.GetParams() {
			gp := ga.GetParams()[i]
			if gp.GetId() != p.GetId() || gp.GetName() != p.GetName() || gp.GetBitwidth() != p.GetBitwidth() {
				d = append(d, fmt.Sprintf("action %s parameter %d is %s (id %d, %d bits), want %s (id %d, %d bits)",
					a.GetPreamble().GetName(), i, gp.GetName(), gp.GetId(), gp.GetBitwidth(), p.GetName(), p.GetId(), p.GetBitwidth()))
			}
		}
	}
	for _, t := range want.GetTables() {
		gt := findTable(got, t.GetPreamble().GetName())
		if gt == nil {
			continue
		}
		name := t.GetPreamble().GetName()
		if len(gt.GetMatchFields()) != len(t.GetMatchFields()) {
			d = append(d, fmt.Sprintf("table %s has %d match fields, want %d", name, len(gt.GetMatchFields()), len(t.GetMatchFields())))
		} else {
			for i, mf := range t.GetMatchFields() {
				g := gt.GetMatchFields()[i]
				if g.GetId() != mf.GetId() || g.GetName() != mf.GetName() || g.GetBitwidth() != mf.GetBitwidth() || g.GetMatchType() != mf.GetMatchType() {
					d = append(d, fmt.Sprintf("table %s match field %d is %s (id %d, %d bits, %v), want %s (id %d, %d bits, %v)",
						name, i, g.GetName(), g.GetId(), g.GetBitwidth(), g.GetMatchType(), mf.GetName(), mf.GetId(), mf.GetBitwidth(), mf.GetMatchType()))
				}
			}
		}
		wantRefs := map[uint32]p4configv1.ActionRef_Scope{}
		for _, r := range t.GetActionRefs() {
			wantRefs[r.GetId()] = r.GetScope()
		}
		gotRefs := map[uint32]p4configv1.ActionRef_Scope{}
		for _, r := range gt.GetActionRefs() {
			gotRefs[r.GetId()] = r.GetScope()
		}
		for id, sc := range wantRefs {
			if gs, ok := gotRefs[id]; !ok || gs != sc {
				d = append(d, fmt.Sprintf("table %s: action %#x must be referenced with scope %v", name, id, sc))
			}
		}
		for id := range gotRefs {
			if _, ok := wantRefs[id]; !ok {
				d = append(d, fmt.Sprintf("table %s: action %#x is not an action of this table here", name, id))
			}
		}
		if gt.GetConstDefaultActionId() != t.GetConstDefaultActionId() {
			d = append(d, fmt.Sprintf("table %s: const default action %#x, want %#x", name, gt.GetConstDefaultActionId(), t.GetConstDefaultActionId()))
		}
		if gt.GetImplementationId() != 0 || len(gt.GetDirectResourceIds()) != 0 {
			d = append(d, fmt.Sprintf("table %s: action profiles and direct resources are not implemented", name))
		}
	}
	for _, r := range want.GetRegisters() {
		gr := findRegister(got, r.GetPreamble().GetName())
		if gr == nil {
			continue
		}
		if !proto2Equal(gr.GetTypeSpec().GetBitstring(), r.GetTypeSpec().GetBitstring()) {
			d = append(d, fmt.Sprintf("register %s has type %v, want %v", r.GetPreamble().GetName(), gr.GetTypeSpec(), r.GetTypeSpec()))
		}
	}
	for _, c := range want.GetCounters() {
		for _, gc := range got.GetCounters() {
			if gc.GetPreamble().GetName() == c.GetPreamble().GetName() && gc.GetSpec().GetUnit() != c.GetSpec().GetUnit() {
				d = append(d, fmt.Sprintf("counter %s counts %v, this switch counts %v", c.GetPreamble().GetName(), gc.GetSpec().GetUnit(), c.GetSpec().GetUnit()))
			}
		}
	}
	if len(got.GetMeters())+len(got.GetDirectMeters())+len(got.GetDirectCounters())+len(got.GetActionProfiles())+
		len(got.GetDigests())+len(got.GetValueSets())+len(got.GetExterns())+len(got.GetControllerPacketMetadata()) > 0 {
		d = append(d, "meters, direct counters, action profiles, digests, value sets, externs and packet I/O metadata are not implemented")
	}
	return d
}

func proto2Equal(a, b *p4configv1.P4BitstringLikeTypeSpec) bool {
	return a.GetBit().GetBitwidth() == b.GetBit().GetBitwidth() && (a.GetBit() == nil) == (b.GetBit() == nil) &&
		a.GetInt().GetBitwidth() == b.GetInt().GetBitwidth() && (a.GetInt() == nil) == (b.GetInt() == nil) &&
		(a.GetVarbit() == nil) == (b.GetVarbit() == nil)
}

func findAction(info *p4configv1.P4Info, name string) *p4configv1.Action {
	for _, a := range info.GetActions() {
		if a.GetPreamble().GetName() == name {
			return a
		}
	}
	return nil
}

func findTable(info *p4configv1.P4Info, name string) *p4configv1.Table {
	for _, t := range info.GetTables() {
		if t.GetPreamble().GetName() == name {
			return t
		}
	}
	return nil
}

func findRegister(info *p4configv1.P4Info, name string) *p4configv1.Register {
	for _, r := range info.GetRegisters() {
		if r.GetPreamble().GetName() == name {
			return r
		}
	}
	return nil
}

func joinDiffs(d []string) string {
	const max = 8
	if len(d) > max {
		return strings.Join(d[:max], "; ") + fmt.Sprintf("; and %d more", len(d)-max)
	}
	return strings.Join(d, "; ")
}
