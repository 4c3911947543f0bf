package softswitch

import (
	"fmt"
	"sort"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4info/shape"
)

// schema is the part of the P4Info the service validates requests against.
type schema struct {
	model     *shape.Model // what pushed P4Infos are compared with
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
	model, err := shape.FromP4Info(info)
	if err != nil {
		return nil, fmt.Errorf("softswitch: embedded P4Info: %w", err)
	}
	s := &schema{
		model:     model,
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
// fixing the P4 program or the controller can act on. Sizes and the
// architecture name are not compared: the switch sizes its registers from its
// own configuration, and executes the pipeline whatever a compiler called it.
func (s *schema) diff(got *p4configv1.P4Info) []string {
	var d []string
	for _, t := range got.GetTables() {
		if t.GetImplementationId() != 0 || len(t.GetDirectResourceIds()) != 0 {
			d = append(d, fmt.Sprintf("table %s: action profiles and direct resources are not implemented", t.GetPreamble().GetName()))
		}
	}
	if len(got.GetMeters())+len(got.GetDirectMeters())+len(got.GetDirectCounters())+len(got.GetActionProfiles())+
		len(got.GetDigests())+len(got.GetValueSets())+len(got.GetExterns())+len(got.GetControllerPacketMetadata()) > 0 {
		d = append(d, "meters, direct counters, action profiles, digests, value sets, externs and packet I/O metadata are not implemented")
	}
	gm, err := shape.FromP4Info(got)
	switch {
	case err != nil && len(got.GetExterns()) > 0:
		// The model reads externs only with their architecture's types
		// linked in, and this switch refuses externs already.
		return d
	case err != nil:
		return append(d, err.Error())
	}
	for _, x := range shape.Compare(s.model, gm, shape.Options{AName: "this switch", BName: "the pushed P4Info", IgnoreArch: true, IgnoreSizes: true}) {
		d = append(d, x.String())
	}
	return d
}

func joinDiffs(d []string) string {
	const max = 8
	if len(d) > max {
		return strings.Join(d[:max], "; ") + fmt.Sprintf("; and %d more", len(d)-max)
	}
	return strings.Join(d, "; ")
}
