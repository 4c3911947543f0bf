// Package shape reduces a P4Info to what a P4Runtime controller can name and
// program (tables, actions, registers, counters, with their ids, keys,
// parameters, types and sizes), so that two P4Infos compare field by field
// whatever their order, documentation and annotations. The software switch
// uses it to check a pushed pipeline against the one it executes; the
// program checks use it to compare the compilers' P4Infos with the checked-in
// ones.
package shape

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Model is the control-plane view of a pipeline.
type Model struct {
	Arch      string
	Tables    map[string]*Table
	Actions   map[string]*Action
	Registers map[string]*Register
	Counters  map[string]*Counter
}

// Table is a match-action table.
type Table struct {
	ID           uint32 // 0: not compared
	Keys         []Key
	Actions      map[string]string // action name -> scope (TABLE_AND_DEFAULT, TABLE_ONLY, DEFAULT_ONLY)
	ConstDefault string            // action name of a const default_action, "" if none
	Size         int64
}

// Key is one match field.
type Key struct {
	ID    uint32
	Name  string
	Width int
	Match string // EXACT, TERNARY, LPM, RANGE, OPTIONAL
}

// Action is an action with its control-plane parameters.
type Action struct {
	ID     uint32
	Params []Param
}

// Param is an action parameter.
type Param struct {
	ID    uint32
	Name  string
	Width int
}

// Register is a register array. Elem has one unnamed field for a bit-string
// element and the members of a struct element (register of pairs).
type Register struct {
	ID     uint32
	Struct string
	Elem   []Field
	Size   int64
}

// Type is a bit string type: bit<Width> or int<Width>.
type Type struct {
	Width  int
	Signed bool
}

// Field is a member of a register's struct element (Name empty for a bit
// string element).
type Field struct {
	Name string
	Type Type
}

// Counter is an indirect counter array.
type Counter struct {
	ID   uint32
	Size int64
	Unit string // PACKETS, BYTES, BOTH (P4Info) / PACKETS_AND_BYTES
}

func newModel() *Model {
	return &Model{
		Tables:    map[string]*Table{},
		Actions:   map[string]*Action{},
		Registers: map[string]*Register{},
		Counters:  map[string]*Counter{},
	}
}

// FromP4Info reduces a P4Info to a Model. Ids that do not resolve are
// reported as errors rather than silently dropped. Tofino's Register and
// Counter externs are read too, for which the program must link the package
// that registers their info messages (p4/tna).
func FromP4Info(info *p4configv1.P4Info) (*Model, error) {
	r := &reader{m: newModel(), actionName: map[uint32]string{}, structs: info.GetTypeInfo().GetStructs()}
	r.m.Arch = info.GetPkgInfo().GetArch()
	for _, step := range []func(*p4configv1.P4Info) error{r.actions, r.tables, r.registersAndCounters, r.externs} {
		if err := step(info); err != nil {
			return nil, err
		}
	}
	return r.m, nil
}

// reader builds a Model from a P4Info, entity kind by entity kind.
type reader struct {
	m          *Model
	actionName map[uint32]string
	structs    map[string]*p4configv1.P4StructTypeSpec
}

func (r *reader) actions(info *p4configv1.P4Info) error {
	for _, a := range info.GetActions() {
		name := a.GetPreamble().GetName()
		if _, dup := r.m.Actions[name]; dup {
			return fmt.Errorf("action %s listed twice", name)
		}
		act := &Action{ID: a.GetPreamble().GetId()}
		for _, p := range a.GetParams() {
			act.Params = append(act.Params, Param{ID: p.GetId(), Name: p.GetName(), Width: int(p.GetBitwidth())})
		}
		r.m.Actions[name] = act
		r.actionName[act.ID] = name
	}
	return nil
}

func (r *reader) tables(info *p4configv1.P4Info) error {
	for _, t := range info.GetTables() {
		name := t.GetPreamble().GetName()
		if _, dup := r.m.Tables[name]; dup {
			return fmt.Errorf("table %s listed twice", name)
		}
		tab := &Table{ID: t.GetPreamble().GetId(), Size: t.GetSize(), Actions: map[string]string{}}
		for _, mf := range t.GetMatchFields() {
			tab.Keys = append(tab.Keys, Key{ID: mf.GetId(), Name: mf.GetName(), Width: int(mf.GetBitwidth()), Match: mf.GetMatchType().String()})
		}
		for _, ref := range t.GetActionRefs() {
			an, ok := r.actionName[ref.GetId()]
			if !ok {
				return fmt.Errorf("table %s: action id %#x is not in the P4Info", name, ref.GetId())
			}
			tab.Actions[an] = ref.GetScope().String()
		}
		if id := t.GetConstDefaultActionId(); id != 0 {
			an, ok := r.actionName[id]
			if !ok {
				return fmt.Errorf("table %s: const default action id %#x is not in the P4Info", name, id)
			}
			tab.ConstDefault = an
		}
		r.m.Tables[name] = tab
	}
	return nil
}

func (r *reader) registersAndCounters(info *p4configv1.P4Info) error {
	for _, g := range info.GetRegisters() {
		if err := r.addRegister(g.GetPreamble().GetName(), g.GetPreamble().GetId(), int64(g.GetSize()), g.GetTypeSpec()); err != nil {
			return err
		}
	}
	for _, c := range info.GetCounters() {
		if err := r.addCounter(c.GetPreamble().GetName(), c.GetPreamble().GetId(), c.GetSize(), c.GetSpec().GetUnit().String()); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) addRegister(name string, id uint32, size int64, ts *p4configv1.P4DataTypeSpec) error {
	reg := &Register{ID: id, Size: size}
	switch {
	case ts.GetBitstring() != nil:
		reg.Elem = []Field{{Type: bitstring(ts.GetBitstring())}}
	case ts.GetStruct() != nil:
		reg.Struct = ts.GetStruct().GetName()
		st, ok := r.structs[reg.Struct]
		if !ok {
			return fmt.Errorf("register %s: struct %s is not in type_info", name, reg.Struct)
		}
		for _, mem := range st.GetMembers() {
			bs := mem.GetTypeSpec().GetBitstring()
			if bs == nil {
				return fmt.Errorf("register %s: member %s is not a bit string", name, mem.GetName())
			}
			reg.Elem = append(reg.Elem, Field{Name: mem.GetName(), Type: bitstring(bs)})
		}
	default:
		return fmt.Errorf("register %s: unsupported type %v", name, ts)
	}
	if _, dup := r.m.Registers[name]; dup {
		return fmt.Errorf("register %s listed twice", name)
	}
	r.m.Registers[name] = reg
	return nil
}

func (r *reader) addCounter(name string, id uint32, size int64, unit string) error {
	if _, dup := r.m.Counters[name]; dup {
		return fmt.Errorf("counter %s listed twice", name)
	}
	r.m.Counters[name] = &Counter{ID: id, Size: size, Unit: unit}
	return nil
}

// externs reads Tofino's Register and Counter externs (package barefoot,
// registered by p4/tna); other externs (port metadata, snapshots) have no
// counterpart in the model.
func (r *reader) externs(info *p4configv1.P4Info) error {
	for _, e := range info.GetExterns() {
		kind := e.GetExternTypeName()
		if kind != "Register" && kind != "Counter" {
			continue
		}
		for _, in := range e.GetInstances() {
			if err := r.extern(kind, in); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *reader) extern(kind string, in *p4configv1.ExternInstance) error {
	name, id := in.GetPreamble().GetName(), in.GetPreamble().GetId()
	x, err := in.GetInfo().UnmarshalNew()
	if err != nil {
		return fmt.Errorf("%s %s: %w", kind, name, err)
	}
	fields := x.ProtoReflect()
	get := func(f string) protoreflect.Value {
		fd := fields.Descriptor().Fields().ByName(protoreflect.Name(f))
		if fd == nil {
			return protoreflect.Value{}
		}
		return fields.Get(fd)
	}
	size := get("size").Int()
	if kind == "Counter" {
		spec := get("spec").Message()
		ufd := spec.Descriptor().Fields().ByName("unit")
		unit := string(ufd.Enum().Values().ByNumber(spec.Get(ufd).Enum()).Name())
		return r.addCounter(name, id, size, unit)
	}
	ts := &p4configv1.P4DataTypeSpec{}
	b, err := proto.Marshal(get("type_spec").Message().Interface())
	if err == nil {
		err = proto.Unmarshal(b, ts)
	}
	if err != nil {
		return fmt.Errorf("register %s: type: %w", name, err)
	}
	return r.addRegister(name, id, size, ts)
}

// WithoutPrefix returns the model with a leading prefix (the Tofino
// compiler's pipeline instance name, "pipe.") removed from every entity
// name that has it. Action names are renamed too, though bf-p4c leaves them
// unprefixed; references from tables follow.
func (m *Model) WithoutPrefix(prefix string) *Model {
	strip := func(n string) string { return strings.TrimPrefix(n, prefix) }
	out := newModel()
	out.Arch = m.Arch
	for n, t := range m.Tables {
		c := *t
		c.Actions = map[string]string{}
		for a, sc := range t.Actions {
			c.Actions[strip(a)] = sc
		}
		c.ConstDefault = strip(t.ConstDefault)
		out.Tables[strip(n)] = &c
	}
	for n, a := range m.Actions {
		out.Actions[strip(n)] = a
	}
	for n, r := range m.Registers {
		out.Registers[strip(n)] = r
	}
	for n, c := range m.Counters {
		out.Counters[strip(n)] = c
	}
	return out
}

// ForgetIDs sets the id of the named entities ("kind name") to 0, so that
// Compare does not compare it (a compiler's own choice, such as core.p4's
// NoAction); the rest of each entity still is.
func (m *Model) ForgetIDs(entries ...string) {
	for _, e := range entries {
		kind, name, _ := strings.Cut(e, " ")
		switch kind {
		case KindTable:
			if t := m.Tables[name]; t != nil {
				t.ID = 0
			}
		case KindAction:
			if a := m.Actions[name]; a != nil {
				a.ID = 0
			}
		case KindRegister:
			if r := m.Registers[name]; r != nil {
				r.ID = 0
			}
		case KindCounter:
			if c := m.Counters[name]; c != nil {
				c.ID = 0
			}
		}
	}
}

// ID is the id of an entity named as ForgetIDs names it ("kind name"); 0
// for an entity the model does not have or whose id it forgot.
func (m *Model) ID(entity string) uint32 {
	kind, name, _ := strings.Cut(entity, " ")
	switch kind {
	case KindTable:
		if t := m.Tables[name]; t != nil {
			return t.ID
		}
	case KindAction:
		if a := m.Actions[name]; a != nil {
			return a.ID
		}
	case KindRegister:
		if r := m.Registers[name]; r != nil {
			return r.ID
		}
	case KindCounter:
		if c := m.Counters[name]; c != nil {
			return c.ID
		}
	}
	return 0
}

func bitstring(bs *p4configv1.P4BitstringLikeTypeSpec) Type {
	switch {
	case bs.GetBit() != nil:
		return Type{Width: int(bs.GetBit().GetBitwidth())}
	case bs.GetInt() != nil:
		return Type{Width: int(bs.GetInt().GetBitwidth()), Signed: true}
	case bs.GetVarbit() != nil:
		return Type{Width: int(bs.GetVarbit().GetMaxBitwidth())}
	}
	return Type{}
}

// Diff is one disagreement between two models.
type Diff struct {
	Entity string // fully qualified name of the table, action, register or counter
	Msg    string
}

func (d Diff) String() string { return d.Entity + ": " + d.Msg }

// Entity kinds, as used in Deviations and diffs.
const (
	KindTable    = "table"
	KindAction   = "action"
	KindRegister = "register"
	KindCounter  = "counter"
)

// Names lists the entities of a model as "kind name", sorted.
func (m *Model) Names() []string {
	var out []string
	for n := range m.Tables {
		out = append(out, KindTable+" "+n)
	}
	for n := range m.Actions {
		out = append(out, KindAction+" "+n)
	}
	for n := range m.Registers {
		out = append(out, KindRegister+" "+n)
	}
	for n := range m.Counters {
		out = append(out, KindCounter+" "+n)
	}
	sort.Strings(out)
	return out
}

// Options are the tolerances of Compare; the zero value compares everything.
type Options struct {
	// AName and BName label the two sides in messages ("the compiler's
	// P4Info"); empty, they are "a" and "b".
	AName, BName string
	// Skip, if not nil, exempts entities from the presence check (a
	// program's documented deviations, checked on their own).
	Skip func(kind, name string) bool
	// IgnoreArch leaves pkg_info's architecture out.
	IgnoreArch bool
	// IgnoreSizes leaves table, register and counter sizes out (a software
	// switch sizes its registers from its own configuration).
	IgnoreSizes bool
}

// Compare reports every difference between a and b: entities present on
// one side only, and for entities on both sides their ids (when both are
// known: see ForgetIDs), keys (name, width, match kind, id), action sets and
// scopes, const default action, size, action parameters (name, width, id),
// register element types and sizes, counter sizes and units.
func Compare(a, b *Model, opts Options) []Diff {
	c := &comparer{opts: opts, aName: opts.AName, bName: opts.BName}
	if c.aName == "" {
		c.aName = "a"
	}
	if c.bName == "" {
		c.bName = "b"
	}
	if !opts.IgnoreArch && a.Arch != b.Arch {
		c.add("pkg_info", "architecture %q in %s, %q in %s", a.Arch, c.aName, b.Arch, c.bName)
	}
	for _, n := range c.presence(KindTable, keys(a.Tables), keys(b.Tables)) {
		c.table(n, a.Tables[n], b.Tables[n])
	}
	for _, n := range c.presence(KindAction, keys(a.Actions), keys(b.Actions)) {
		c.action(n, a.Actions[n], b.Actions[n])
	}
	for _, n := range c.presence(KindRegister, keys(a.Registers), keys(b.Registers)) {
		x, y := a.Registers[n], b.Registers[n]
		c.ids(n, x.ID, y.ID)
		if ex, ey := x.ElemType(), y.ElemType(); ex != ey {
			c.add(n, "element type %s in %s, %s in %s", ex, c.aName, ey, c.bName)
		}
		c.size(n, x.Size, y.Size)
	}
	for _, n := range c.presence(KindCounter, keys(a.Counters), keys(b.Counters)) {
		x, y := a.Counters[n], b.Counters[n]
		c.ids(n, x.ID, y.ID)
		c.size(n, x.Size, y.Size)
		if normUnit(x.Unit) != normUnit(y.Unit) {
			c.add(n, "unit %s in %s, %s in %s", x.Unit, c.aName, y.Unit, c.bName)
		}
	}
	return c.diffs
}

// comparer gathers the differences Compare finds, naming the two sides.
type comparer struct {
	opts         Options
	aName, bName string
	diffs        []Diff
}

func (c *comparer) add(entity, format string, args ...any) {
	c.diffs = append(c.diffs, Diff{Entity: entity, Msg: fmt.Sprintf(format, args...)})
}

// presence reports the entities of a kind found on one side only (unless
// skipped) and returns those on both.
func (c *comparer) presence(kind string, an, bn []string) []string {
	skipped := func(n string) bool { return c.opts.Skip != nil && c.opts.Skip(kind, n) }
	var both []string
	for _, n := range an {
		if slices.Contains(bn, n) {
			both = append(both, n)
		} else if !skipped(n) {
			c.add(n, "%s in %s, missing in %s", kind, c.aName, c.bName)
		}
	}
	for _, n := range bn {
		if !slices.Contains(an, n) && !skipped(n) {
			c.add(n, "%s in %s, missing in %s", kind, c.bName, c.aName)
		}
	}
	return both
}

// ids reports two known ids that differ.
func (c *comparer) ids(entity string, x, y uint32) {
	if x != 0 && y != 0 && x != y {
		c.add(entity, "id %#x in %s, %#x in %s", x, c.aName, y, c.bName)
	}
}

// size reports two sizes that differ, unless sizes are ignored.
func (c *comparer) size(entity string, x, y int64) {
	if !c.opts.IgnoreSizes && x != y {
		c.add(entity, "size %d in %s, %d in %s", x, c.aName, y, c.bName)
	}
}

func (c *comparer) table(n string, x, y *Table) {
	c.ids(n, x.ID, y.ID)
	if len(x.Keys) != len(y.Keys) {
		c.add(n, "%d match fields in %s, %d in %s", len(x.Keys), c.aName, len(y.Keys), c.bName)
	}
	for i := 0; i < min(len(x.Keys), len(y.Keys)); i++ {
		c.key(n, i, x.Keys[i], y.Keys[i])
	}
	for _, an := range keys(x.Actions) {
		sy, ok := y.Actions[an]
		switch {
		case !ok:
			c.add(n, "action %s allowed in %s, not in %s", an, c.aName, c.bName)
		case sy != x.Actions[an]:
			c.add(n, "action %s has scope %s in %s, %s in %s", an, x.Actions[an], c.aName, sy, c.bName)
		}
	}
	for _, an := range keys(y.Actions) {
		if _, ok := x.Actions[an]; !ok {
			c.add(n, "action %s allowed in %s, not in %s", an, c.bName, c.aName)
		}
	}
	if x.ConstDefault != y.ConstDefault {
		c.add(n, "const default action %q in %s, %q in %s", x.ConstDefault, c.aName, y.ConstDefault, c.bName)
	}
	c.size(n, x.Size, y.Size)
}

func (c *comparer) key(n string, i int, kx, ky Key) {
	if kx.Name != ky.Name {
		c.add(n, "match field %d is %q in %s, %q in %s", i+1, kx.Name, c.aName, ky.Name, c.bName)
		return
	}
	if kx.Width != ky.Width {
		c.add(n, "match field %s is %d bits in %s, %d in %s", kx.Name, kx.Width, c.aName, ky.Width, c.bName)
	}
	if kx.Match != ky.Match {
		c.add(n, "match field %s is %s in %s, %s in %s", kx.Name, kx.Match, c.aName, ky.Match, c.bName)
	}
	if kx.ID != ky.ID {
		c.add(n, "match field %s has id %d in %s, %d in %s", kx.Name, kx.ID, c.aName, ky.ID, c.bName)
	}
}

func (c *comparer) action(n string, x, y *Action) {
	c.ids(n, x.ID, y.ID)
	if len(x.Params) != len(y.Params) {
		c.add(n, "%d parameters in %s, %d in %s", len(x.Params), c.aName, len(y.Params), c.bName)
	}
	for i := 0; i < min(len(x.Params), len(y.Params)); i++ {
		px, py := x.Params[i], y.Params[i]
		if px.Name != py.Name {
			c.add(n, "parameter %d is %q in %s, %q in %s", i+1, px.Name, c.aName, py.Name, c.bName)
			continue
		}
		if px.Width != py.Width {
			c.add(n, "parameter %s is %d bits in %s, %d in %s", px.Name, px.Width, c.aName, py.Width, c.bName)
		}
		if px.ID != py.ID {
			c.add(n, "parameter %s has id %d in %s, %d in %s", px.Name, px.ID, c.aName, py.ID, c.bName)
		}
	}
}

// ElemType renders a register element type: bit<32>, int<8> or
// {first:bit<32>,second:bit<32>}. Struct type names are left out (a P4Info
// may name them after a typedef), so that Compare looks at member names and
// widths only.
func (r *Register) ElemType() string {
	one := func(t Type) string {
		if t.Signed {
			return fmt.Sprintf("int<%d>", t.Width)
		}
		return fmt.Sprintf("bit<%d>", t.Width)
	}
	if r.Struct == "" && len(r.Elem) == 1 {
		return one(r.Elem[0].Type)
	}
	var parts []string
	for _, f := range r.Elem {
		parts = append(parts, f.Name+":"+one(f.Type))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// normUnit maps the Tofino extension's counter unit names to P4Info's.
func normUnit(u string) string {
	switch u {
	case "PACKETS_AND_BYTES":
		return "BOTH"
	}
	return u
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
