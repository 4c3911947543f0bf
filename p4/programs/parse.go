package programs

import (
	"fmt"
	"strconv"
	"strings"
)

// This file is a deliberately small P4_16 reader: enough of the language to
// find the control-plane objects of the SwitchML programs (tables with their
// keys and match kinds, actions with their parameters, registers, counters)
// and to resolve the bit widths of keys and parameters through typedefs,
// headers and structs. Statements inside action bodies, parsers and apply
// blocks are skipped by brace matching. It is not a P4 compiler: the
// programs are written so that this reader and p4c see the same objects
// (literal or const-expression sizes, no nested control instances).

// Type is a resolved P4 type: a bit string, or a struct/header with fields.
type Type struct {
	Name   string // struct or header name; "" for bit<N>, int<N>, bool
	Width  int    // bit width of a bit string; 0 for a struct
	Signed bool   // int<N>
	Fields []Field
}

// Field is a member of a struct or header.
type Field struct {
	Name string
	Type Type
}

// Program is what the reader found in one P4 source.
type Program struct {
	Arch     string // "v1model" or "tna", from the architecture include
	Controls []string
	Model    *Model // control-plane objects, fully qualified names

	typedefs map[string]Type
	consts   map[string]uint64
	structs  map[string]Type
	// local types of each control's parameters, for key resolution
	params map[string]map[string]Type
}

// builtinActions are actions declared by core.p4 that programs reference
// without declaring them.
var builtinActions = map[string]bool{"NoAction": true}

// ParseProgram reads a P4_16 source for v1model or TNA.
func ParseProgram(src string) (*Program, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &Program{
		Model:    newModel(),
		typedefs: map[string]Type{},
		consts:   map[string]uint64{},
		structs:  map[string]Type{},
		params:   map[string]map[string]Type{},
	}
	switch {
	case strings.Contains(src, "#include <v1model.p4>"):
		p.Arch = "v1model"
	case strings.Contains(src, "#include <tna.p4>"):
		p.Arch = "tna"
	default:
		return nil, fmt.Errorf("no #include <v1model.p4> or <tna.p4>: unknown architecture")
	}
	r := &reader{toks: toks}
	if err := p.top(r); err != nil {
		return nil, err
	}
	// Resolve table action references now that all actions are known.
	for tn, t := range p.Model.Tables {
		for an := range t.Actions {
			if _, ok := p.Model.Actions[an]; ok {
				continue
			}
			if builtinActions[an] {
				p.Model.Actions[an] = &Action{}
				continue
			}
			return nil, fmt.Errorf("table %s: action %s is not declared", tn, an)
		}
	}
	// Only actions a control-plane table can name are P4Runtime objects.
	for an, a := range p.Model.Actions {
		if !a.referenced {
			delete(p.Model.Actions, an)
		}
	}
	return p, nil
}

type reader struct {
	toks []token
	pos  int
}

func (r *reader) eof() bool { return r.pos >= len(r.toks) }

func (r *reader) peek() string {
	if r.eof() {
		return ""
	}
	return r.toks[r.pos].text
}

func (r *reader) peekAt(n int) string {
	if r.pos+n >= len(r.toks) {
		return ""
	}
	return r.toks[r.pos+n].text
}

func (r *reader) line() int {
	if r.eof() {
		if len(r.toks) == 0 {
			return 0
		}
		return r.toks[len(r.toks)-1].line
	}
	return r.toks[r.pos].line
}

func (r *reader) next() token {
	if r.eof() {
		return token{}
	}
	t := r.toks[r.pos]
	r.pos++
	return t
}

func (r *reader) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", r.line(), fmt.Sprintf(format, args...))
}

func (r *reader) expect(s string) error {
	if r.peek() != s {
		return r.errorf("expected %q, found %q", s, r.peek())
	}
	r.pos++
	return nil
}

func (r *reader) ident() (string, error) {
	if !isIdent(r.peek()) || r.toks[r.pos].str {
		return "", r.errorf("expected an identifier, found %q", r.peek())
	}
	return r.next().text, nil
}

// skipBalanced skips from an opening bracket to just past its match.
func (r *reader) skipBalanced() error {
	pairs := map[string]string{"{": "}", "(": ")", "[": "]"}
	open := r.peek()
	if _, ok := pairs[open]; !ok {
		return r.errorf("expected an opening bracket, found %q", open)
	}
	var stack []string
	start := r.line()
	for !r.eof() {
		t := r.next()
		if t.str {
			continue
		}
		if c, ok := pairs[t.text]; ok {
			stack = append(stack, c)
			continue
		}
		if len(stack) > 0 && t.text == stack[len(stack)-1] {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("line %d: unbalanced %q", start, open)
}

// skipStatement skips to just past the next ';' at bracket depth 0.
func (r *reader) skipStatement() error {
	for !r.eof() {
		switch r.peek() {
		case ";":
			r.pos++
			return nil
		case "{", "(", "[":
			if err := r.skipBalanced(); err != nil {
				return err
			}
		default:
			r.pos++
		}
	}
	return r.errorf("missing ';'")
}

// annotations are the @-annotations in front of a declaration.
type annotations struct {
	id          uint32
	name        string
	hidden      bool
	defaultOnly bool
	tableOnly   bool
}

func (p *Program) annotations(r *reader) (annotations, error) {
	var a annotations
	for r.peek() == "@" {
		r.pos++
		name, err := r.ident()
		if err != nil {
			return a, err
		}
		var body []token
		if r.peek() == "(" {
			start := r.pos
			if err := r.skipBalanced(); err != nil {
				return a, err
			}
			body = r.toks[start+1 : r.pos-1]
		}
		switch name {
		case "id":
			if len(body) != 1 {
				return a, r.errorf("@id needs one number")
			}
			v, err := parseNumber(body[0].text)
			if err != nil || v > 0xFFFFFFFF {
				return a, r.errorf("@id(%s): not a 32-bit number", body[0].text)
			}
			a.id = uint32(v)
		case "name":
			if len(body) != 1 || !body[0].str {
				return a, r.errorf("@name needs one string")
			}
			a.name = body[0].text
		case "hidden":
			a.hidden = true
		case "defaultonly":
			a.defaultOnly = true
		case "tableonly":
			a.tableOnly = true
		}
	}
	return a, nil
}

// qualify forms the fully qualified P4Runtime name of a declaration.
func qualify(control, local string, a annotations) string {
	if a.name != "" {
		if strings.HasPrefix(a.name, ".") {
			return a.name[1:]
		}
		local = a.name
	}
	if control == "" {
		return local
	}
	return control + "." + local
}

func (p *Program) top(r *reader) error {
	for !r.eof() {
		ann, err := p.annotations(r)
		if err != nil {
			return err
		}
		switch kw := r.peek(); kw {
		case "typedef":
			r.pos++
			t, err := p.parseType(r)
			if err != nil {
				return err
			}
			name, err := r.ident()
			if err != nil {
				return err
			}
			p.typedefs[name] = t
			if err := r.expect(";"); err != nil {
				return err
			}
		case "const":
			if err := p.parseConst(r); err != nil {
				return err
			}
		case "header", "struct":
			if err := p.parseStruct(r); err != nil {
				return err
			}
		case "control":
			if err := p.parseControl(r); err != nil {
				return err
			}
		case "action":
			if err := p.parseAction(r, "", ann); err != nil {
				return err
			}
		case "parser", "enum", "error", "header_union", "extern", "match_kind":
			// Skip to the body (or ';' for a declaration without one).
			for !r.eof() && r.peek() != "{" && r.peek() != ";" {
				if r.peek() == "(" {
					if err := r.skipBalanced(); err != nil {
						return err
					}
					continue
				}
				r.pos++
			}
			if r.peek() == "{" {
				if err := r.skipBalanced(); err != nil {
					return err
				}
			} else {
				r.pos++
			}
		default:
			// Package instantiation (V1Switch(...) main; Switch(pipe) main;).
			if err := r.skipStatement(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Program) parseConst(r *reader) error {
	if err := r.expect("const"); err != nil {
		return err
	}
	if _, err := p.parseType(r); err != nil {
		return err
	}
	name, err := r.ident()
	if err != nil {
		return err
	}
	if err := r.expect("="); err != nil {
		return err
	}
	start := r.pos
	v, err := p.expr(r)
	if err != nil {
		// Not a number (a struct initializer, an enum member): keep
		// reading, but the constant cannot size anything.
		r.pos = start
		return r.skipStatement()
	}
	p.consts[name] = v
	return r.expect(";")
}

func (p *Program) parseStruct(r *reader) error {
	r.pos++ // header or struct
	name, err := r.ident()
	if err != nil {
		return err
	}
	if err := r.expect("{"); err != nil {
		return err
	}
	st := Type{Name: name}
	for r.peek() != "}" {
		if r.eof() {
			return r.errorf("unterminated %s", name)
		}
		if _, err := p.annotations(r); err != nil {
			return err
		}
		ft, err := p.parseType(r)
		if err != nil {
			return err
		}
		fn, err := r.ident()
		if err != nil {
			return err
		}
		if err := r.expect(";"); err != nil {
			return err
		}
		st.Fields = append(st.Fields, Field{Name: fn, Type: ft})
	}
	r.pos++
	p.structs[name] = st
	return nil
}

// parseType reads bit<N>, int<N>, bool, a typedef or a struct/header name.
func (p *Program) parseType(r *reader) (Type, error) {
	name, err := r.ident()
	if err != nil {
		return Type{}, err
	}
	switch name {
	case "bit", "int":
		if err := r.expect("<"); err != nil {
			return Type{}, err
		}
		w, err := p.primary(r)
		if err != nil {
			return Type{}, err
		}
		if err := r.expect(">"); err != nil {
			return Type{}, err
		}
		if w == 0 || w > 4096 {
			return Type{}, r.errorf("%s<%d>: unsupported width", name, w)
		}
		return Type{Width: int(w), Signed: name == "int"}, nil
	case "bool":
		return Type{Width: 1}, nil
	}
	if t, ok := p.typedefs[name]; ok {
		return t, nil
	}
	if t, ok := p.structs[name]; ok {
		return t, nil
	}
	// An architecture type (standard_metadata_t, PortId_t, ...): opaque.
	// Generic arguments of extern types are skipped by the caller.
	return Type{Name: name}, nil
}

// expr evaluates a constant expression: numbers, constants, + - * and <<,
// parentheses. Enough for sizes such as 8 + 8 + 2 + 256 or SLOTS * 2.
func (p *Program) expr(r *reader) (uint64, error) {
	v, err := p.sum(r)
	if err != nil {
		return 0, err
	}
	for r.peek() == "<" && r.peekAt(1) == "<" {
		r.pos += 2
		s, err := p.sum(r)
		if err != nil {
			return 0, err
		}
		if s >= 64 {
			return 0, r.errorf("shift by %d", s)
		}
		v <<= s
	}
	return v, nil
}

func (p *Program) sum(r *reader) (uint64, error) {
	v, err := p.product(r)
	if err != nil {
		return 0, err
	}
	for r.peek() == "+" || r.peek() == "-" {
		op := r.next().text
		w, err := p.product(r)
		if err != nil {
			return 0, err
		}
		if op == "+" {
			v += w
		} else {
			v -= w
		}
	}
	return v, nil
}

func (p *Program) product(r *reader) (uint64, error) {
	v, err := p.primary(r)
	if err != nil {
		return 0, err
	}
	for r.peek() == "*" {
		r.pos++
		w, err := p.primary(r)
		if err != nil {
			return 0, err
		}
		v *= w
	}
	return v, nil
}

func (p *Program) primary(r *reader) (uint64, error) {
	t := r.peek()
	switch {
	case t == "(":
		r.pos++
		v, err := p.expr(r)
		if err != nil {
			return 0, err
		}
		return v, r.expect(")")
	case t != "" && isDigit(t[0]):
		r.pos++
		v, err := parseNumber(t)
		if err != nil {
			return 0, r.errorf("%v", err)
		}
		return v, nil
	case isIdent(t):
		if v, ok := p.consts[t]; ok {
			r.pos++
			return v, nil
		}
		return 0, r.errorf("%q is not a known numeric constant", t)
	}
	return 0, r.errorf("expected a constant expression, found %q", t)
}

// parseNumber reads a P4 integer literal: 42, 0x2A, 0b101, 32w42, 8s5, 16w0xFFFF.
func parseNumber(s string) (uint64, error) {
	lit := s
	if i := strings.IndexAny(s, "ws"); i > 0 && !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
		if _, err := strconv.ParseUint(s[:i], 10, 32); err == nil {
			lit = s[i+1:]
		}
	}
	lit = strings.ReplaceAll(lit, "_", "")
	v, err := strconv.ParseUint(lit, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("bad integer literal %q", s)
	}
	return v, nil
}

// parseParams reads a parameter list "(dir type name, ...)". Directionless
// parameters of actions are the control-plane parameters.
func (p *Program) parseParams(r *reader) ([]Param, map[string]Type, error) {
	if err := r.expect("("); err != nil {
		return nil, nil, err
	}
	var out []Param
	types := map[string]Type{}
	for r.peek() != ")" {
		if r.eof() {
			return nil, nil, r.errorf("unterminated parameter list")
		}
		if _, err := p.annotations(r); err != nil {
			return nil, nil, err
		}
		dir := ""
		if s := r.peek(); s == "in" || s == "out" || s == "inout" {
			dir = s
			r.pos++
		}
		t, err := p.parseType(r)
		if err != nil {
			return nil, nil, err
		}
		if r.peek() == "<" { // generic argument of an opaque type
			if err := p.skipTypeArgs(r); err != nil {
				return nil, nil, err
			}
		}
		name, err := r.ident()
		if err != nil {
			return nil, nil, err
		}
		types[name] = t
		if dir == "" {
			out = append(out, Param{Name: name, Width: t.Width, ID: uint32(len(out) + 1)})
		}
		if r.peek() == "," {
			r.pos++
		}
	}
	r.pos++
	return out, types, nil
}

func (p *Program) skipTypeArgs(r *reader) error {
	if err := r.expect("<"); err != nil {
		return err
	}
	depth := 1
	for depth > 0 {
		if r.eof() {
			return r.errorf("unterminated type arguments")
		}
		switch r.next().text {
		case "<":
			depth++
		case ">":
			depth--
		}
	}
	return nil
}

// typeArgs reads "<T1, T2, ...>" as resolved types.
func (p *Program) typeArgs(r *reader) ([]Type, error) {
	if err := r.expect("<"); err != nil {
		return nil, err
	}
	var out []Type
	for {
		t, err := p.parseType(r)
		if err != nil {
			return nil, err
		}
		if r.peek() == "<" {
			if err := p.skipTypeArgs(r); err != nil {
				return nil, err
			}
		}
		out = append(out, t)
		switch r.next().text {
		case ",":
			continue
		case ">":
			return out, nil
		default:
			return nil, r.errorf("bad type argument list")
		}
	}
}

// args reads a constructor argument list, returning each argument's tokens.
func (r *reader) args() ([][]token, error) {
	if err := r.expect("("); err != nil {
		return nil, err
	}
	var out [][]token
	start := r.pos
	depth := 0
	for !r.eof() {
		t := r.next()
		switch t.text {
		case "(", "{", "[":
			depth++
		case "]", "}":
			depth--
		case ")":
			if depth == 0 {
				if r.pos-1 > start {
					out = append(out, r.toks[start:r.pos-1])
				}
				return out, nil
			}
			depth--
		case ",":
			if depth == 0 {
				out = append(out, r.toks[start:r.pos-1])
				start = r.pos
			}
		}
	}
	return nil, r.errorf("unterminated argument list")
}

// evalTokens evaluates a constant expression given as tokens.
func (p *Program) evalTokens(toks []token) (uint64, error) {
	sub := &reader{toks: toks}
	v, err := p.expr(sub)
	if err != nil {
		return 0, err
	}
	if !sub.eof() {
		return 0, sub.errorf("unexpected %q in constant expression", sub.peek())
	}
	return v, nil
}

func (p *Program) parseControl(r *reader) error {
	r.pos++ // control
	name, err := r.ident()
	if err != nil {
		return err
	}
	if r.peek() == "<" {
		if err := p.skipTypeArgs(r); err != nil {
			return err
		}
	}
	_, types, err := p.parseParams(r)
	if err != nil {
		return err
	}
	if r.peek() == ";" { // declaration only
		r.pos++
		return nil
	}
	p.Controls = append(p.Controls, name)
	p.params[name] = types
	if err := r.expect("{"); err != nil {
		return err
	}
	for {
		if r.eof() {
			return r.errorf("control %s: missing apply block", name)
		}
		ann, err := p.annotations(r)
		if err != nil {
			return err
		}
		switch r.peek() {
		case "apply":
			r.pos++
			if err := r.skipBalanced(); err != nil {
				return err
			}
			return r.expect("}")
		case "action":
			err = p.parseAction(r, name, ann)
		case "table":
			err = p.parseTable(r, name, ann)
		case "const":
			err = r.skipStatement()
		default:
			err = p.parseInstance(r, name, ann)
		}
		if err != nil {
			return fmt.Errorf("control %s: %w", name, err)
		}
	}
}

func (p *Program) parseAction(r *reader, control string, ann annotations) error {
	r.pos++ // action
	local, err := r.ident()
	if err != nil {
		return err
	}
	params, _, err := p.parseParams(r)
	if err != nil {
		return err
	}
	if err := r.skipBalanced(); err != nil {
		return err
	}
	name := qualify(control, local, ann)
	if _, dup := p.Model.Actions[name]; dup {
		return r.errorf("action %s declared twice", name)
	}
	for _, prm := range params {
		if prm.Width == 0 {
			return r.errorf("action %s: parameter %s has no bit width", name, prm.Name)
		}
	}
	p.Model.Actions[name] = &Action{ID: ann.id, Params: params, hidden: ann.hidden, local: local, control: control}
	return nil
}

// resolveAction finds the action a table names by its local name: first in
// the table's control, then at top level.
func (p *Program) resolveAction(control, local string) string {
	for n, a := range p.Model.Actions {
		if a.control == control && a.local == local {
			return n
		}
	}
	for n, a := range p.Model.Actions {
		if a.control == "" && a.local == local {
			return n
		}
	}
	return local
}

var matchKinds = map[string]string{
	"exact": "EXACT", "ternary": "TERNARY", "lpm": "LPM", "range": "RANGE", "optional": "OPTIONAL",
}

func (p *Program) parseTable(r *reader, control string, ann annotations) error {
	r.pos++ // table
	local, err := r.ident()
	if err != nil {
		return err
	}
	name := qualify(control, local, ann)
	t := &Table{ID: ann.id, Actions: map[string]string{}}
	if err := r.expect("{"); err != nil {
		return err
	}
	type ref struct {
		local string
		scope string
	}
	var refs []ref
	constDefault := ""
	for r.peek() != "}" {
		if r.eof() {
			return r.errorf("table %s: unterminated", name)
		}
		if _, err := p.annotations(r); err != nil {
			return err
		}
		isConst := false
		if r.peek() == "const" {
			isConst = true
			r.pos++
		}
		prop, err := r.ident()
		if err != nil {
			return err
		}
		if err := r.expect("="); err != nil {
			return err
		}
		switch prop {
		case "key":
			if err := r.expect("{"); err != nil {
				return err
			}
			for r.peek() != "}" {
				k, err := p.parseKey(r, control, len(t.Keys)+1)
				if err != nil {
					return fmt.Errorf("table %s: %w", name, err)
				}
				t.Keys = append(t.Keys, k)
			}
			r.pos++
		case "actions":
			if err := r.expect("{"); err != nil {
				return err
			}
			for r.peek() != "}" {
				if r.eof() {
					return r.errorf("table %s: unterminated actions", name)
				}
				aa, err := p.annotations(r)
				if err != nil {
					return err
				}
				an, err := r.ident()
				if err != nil {
					return err
				}
				if r.peek() == "(" {
					if err := r.skipBalanced(); err != nil {
						return err
					}
				}
				if err := r.expect(";"); err != nil {
					return err
				}
				scope := "TABLE_AND_DEFAULT"
				switch {
				case aa.defaultOnly:
					scope = "DEFAULT_ONLY"
				case aa.tableOnly:
					scope = "TABLE_ONLY"
				}
				refs = append(refs, ref{an, scope})
			}
			r.pos++
		case "default_action":
			an, err := r.ident()
			if err != nil {
				return err
			}
			if isConst {
				constDefault = an
			}
			if err := r.skipStatement(); err != nil {
				return err
			}
		case "size":
			start := r.pos
			if err := r.skipStatement(); err != nil {
				return err
			}
			v, err := p.evalTokens(r.toks[start : r.pos-1])
			if err != nil {
				return fmt.Errorf("table %s: size: %w", name, err)
			}
			t.Size = int64(v)
		case "entries":
			if err := r.skipBalanced(); err != nil {
				return err
			}
			if r.peek() == ";" {
				r.pos++
			}
		default:
			if err := r.skipStatement(); err != nil {
				return err
			}
		}
	}
	r.pos++
	if ann.hidden {
		return nil
	}
	if _, dup := p.Model.Tables[name]; dup {
		return r.errorf("table %s declared twice", name)
	}
	for _, rf := range refs {
		an := p.resolveAction(control, rf.local)
		t.Actions[an] = rf.scope
		if a, ok := p.Model.Actions[an]; ok {
			a.referenced = true
		}
	}
	if constDefault != "" {
		t.ConstDefault = p.resolveAction(control, constDefault)
	}
	// Builtins referenced by tables are control-plane objects too.
	for an := range t.Actions {
		if builtinActions[an] {
			if _, ok := p.Model.Actions[an]; !ok {
				p.Model.Actions[an] = &Action{local: an}
			}
			p.Model.Actions[an].referenced = true
		}
	}
	p.Model.Tables[name] = t
	return nil
}

func (p *Program) parseKey(r *reader, control string, pos int) (Key, error) {
	start := r.pos
	depth := 0
	for !(depth == 0 && r.peek() == ":") {
		if r.eof() || r.peek() == ";" || r.peek() == "}" {
			return Key{}, r.errorf("key element without a match kind")
		}
		switch r.peek() {
		case "[", "(":
			depth++
		case "]", ")":
			depth--
		}
		r.pos++
	}
	exprToks := r.toks[start:r.pos]
	r.pos++ // :
	kind, err := r.ident()
	if err != nil {
		return Key{}, err
	}
	ann, err := p.annotations(r)
	if err != nil {
		return Key{}, err
	}
	if err := r.expect(";"); err != nil {
		return Key{}, err
	}
	var sb strings.Builder
	for _, t := range exprToks {
		sb.WriteString(t.text)
	}
	k := Key{ID: uint32(pos), Name: sb.String(), Match: matchKinds[kind]}
	if k.Match == "" {
		k.Match = strings.ToUpper(kind)
	}
	if ann.id != 0 {
		k.ID = ann.id
	}
	w, err := p.keyWidth(control, exprToks)
	if err != nil {
		return Key{}, fmt.Errorf("key %s: %w", k.Name, err)
	}
	k.Width = w
	if ann.name != "" {
		k.Name = ann.name
	}
	return k, nil
}

// keyWidth resolves a key expression such as hdr.ipv4.src_addr or
// meta.x[7:0] through the control's parameter types.
func (p *Program) keyWidth(control string, toks []token) (int, error) {
	var path []string
	i := 0
	for i < len(toks) {
		if !isIdent(toks[i].text) {
			return 0, fmt.Errorf("unsupported key expression")
		}
		path = append(path, toks[i].text)
		i++
		if i < len(toks) && toks[i].text == "." {
			i++
			continue
		}
		break
	}
	t, ok := p.params[control][path[0]]
	if !ok {
		return 0, fmt.Errorf("%s is not a parameter of %s", path[0], control)
	}
	for _, f := range path[1:] {
		found := false
		for _, sf := range t.Fields {
			if sf.Name == f {
				t, found = sf.Type, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("type %s has no field %s", t.Name, f)
		}
	}
	if i < len(toks) {
		// A slice [hi:lo].
		rest := toks[i:]
		if len(rest) != 5 || rest[0].text != "[" || rest[2].text != ":" || rest[4].text != "]" {
			return 0, fmt.Errorf("unsupported key expression suffix")
		}
		hi, err1 := parseNumber(rest[1].text)
		lo, err2 := parseNumber(rest[3].text)
		if err1 != nil || err2 != nil || lo > hi {
			return 0, fmt.Errorf("bad slice")
		}
		return int(hi - lo + 1), nil
	}
	if t.Width == 0 {
		return 0, fmt.Errorf("not a bit string")
	}
	return t.Width, nil
}

// parseInstance reads a control-local declaration that is not an action or
// table: an extern instance (register, counter, Register, Counter,
// RegisterAction, Random, ...) or a variable.
func (p *Program) parseInstance(r *reader, control string, ann annotations) error {
	start := r.pos
	typ, err := r.ident()
	if err != nil {
		return err
	}
	switch typ {
	case "bit", "int", "bool", "varbit":
		// A local variable, not an extern instance.
		r.pos = start
		return r.skipStatement()
	}
	var targs []Type
	if r.peek() == "<" {
		if targs, err = p.typeArgs(r); err != nil {
			return err
		}
	}
	if r.peek() != "(" {
		// A variable declaration: skip it.
		r.pos = start
		return r.skipStatement()
	}
	args, err := r.args()
	if err != nil {
		return err
	}
	local, err := r.ident()
	if err != nil {
		return err
	}
	if r.peek() == "=" { // RegisterAction<...>(reg) name = { ... };
		r.pos++
		if err := r.skipBalanced(); err != nil {
			return err
		}
	}
	if err := r.expect(";"); err != nil {
		return err
	}
	name := qualify(control, local, ann)
	size := func() (int64, error) {
		if len(args) == 0 {
			return 0, r.errorf("%s %s: no size", typ, name)
		}
		v, err := p.evalTokens(args[0])
		if err != nil {
			return 0, fmt.Errorf("%s %s: size: %w", typ, name, err)
		}
		return int64(v), nil
	}
	switch typ {
	case "register", "Register":
		if len(targs) == 0 {
			return r.errorf("%s %s: no element type", typ, name)
		}
		n, err := size()
		if err != nil {
			return err
		}
		reg := &Register{ID: ann.id, Size: n}
		el := targs[0]
		if len(el.Fields) > 0 {
			for _, f := range el.Fields {
				reg.Elem = append(reg.Elem, Field{Name: f.Name, Type: Type{Width: f.Type.Width, Signed: f.Type.Signed}})
			}
			reg.Struct = el.Name
		} else {
			if el.Width == 0 {
				return r.errorf("register %s: element type %s is not a bit string or struct", name, el.Name)
			}
			reg.Elem = []Field{{Type: Type{Width: el.Width, Signed: el.Signed}}}
		}
		if _, dup := p.Model.Registers[name]; dup {
			return r.errorf("register %s declared twice", name)
		}
		p.Model.Registers[name] = reg
	case "counter", "Counter":
		n, err := size()
		if err != nil {
			return err
		}
		unit := ""
		if len(args) > 1 && len(args[1]) > 0 {
			unit = strings.ToUpper(args[1][len(args[1])-1].text)
		}
		if _, dup := p.Model.Counters[name]; dup {
			return r.errorf("counter %s declared twice", name)
		}
		p.Model.Counters[name] = &Counter{ID: ann.id, Size: n, Unit: unit}
	}
	return nil
}
