// Package field is the refusal of a setting: an error that names the
// settings at fault by their Go field names ("Slots -5: want 1..1048576"),
// so that a library speaks in its own terms, and that a program which sets
// those fields from settings of its own (a command's flags) writes in
// those names instead (Named).
//
// A message is a fmt format in which {Field} stands for a setting's name:
// "{Auth} with {TargetKind} %s: ...". Only the format is read for names,
// never the arguments, so a value that holds braces is written as it is.
// A name may be dotted for a nested field ("{Faults.Drop}").
package field

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Error is a setting refused. Its text names each setting by its Go
// field name (prefixed by its struct's where the error comes from
// Owner.Errorf, as in "Config.GiveUp"); Text and Named write them as a
// caller names them.
type Error struct {
	// Fields are the settings the refusal names, in the order it names
	// them: the first is the one refused.
	Fields []string
	// Value is the refused setting's value, where the refusal states it
	// (Invalid); nil otherwise.
	Value  any
	owner  Owner
	format string // fmt's, with {Field} placeholders
	args   []any
}

// Owner is the struct whose fields an error names: its errors write a
// field unnamed by the caller as "Owner.Field", for errors read far from
// the struct (a session's failure naming Config.FallbackPeers).
type Owner string

// placeholder is a setting named in a format.
var placeholder = regexp.MustCompile(`\{([A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*)\}`)

// Errorf is a refusal whose format names settings as {Field}; a %w among
// args is its cause (Unwrap).
func Errorf(format string, args ...any) *Error { return Owner("").Errorf(format, args...) }

// Errorf is a refusal of o's settings; see the package's Errorf.
func (o Owner) Errorf(format string, args ...any) *Error {
	e := &Error{owner: o, format: format, args: args}
	if !strings.Contains(format, "{") {
		return e // most refusals name no setting: no need to scan them
	}
	for _, m := range placeholder.FindAllStringSubmatch(format, -1) {
		e.Fields = append(e.Fields, m[1])
	}
	return e
}

// Invalid is the refusal of field's value: "Field = value: advice", or
// "Field is empty: advice" for an empty string. advice is a format that
// may name other settings as {Field}.
func Invalid(field string, value any, advice string, args ...any) *Error {
	head := "{" + field + "} = %v: "
	if s, ok := value.(string); ok && s == "" {
		head = "{" + field + "} is empty: %.0v"
	}
	e := Errorf(head+advice, append([]any{value}, args...)...)
	e.Value = value
	return e
}

// Field is the setting refused: the first the message names ("" for
// none).
func (e *Error) Field() string {
	if len(e.Fields) == 0 {
		return ""
	}
	return e.Fields[0]
}

func (e *Error) Error() string { return e.Text(nil) }

// Text is the refusal with each setting written as name gives it (nil, or
// "" from name: its Go name).
func (e *Error) Text(name func(field string) string) string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf(strings.ReplaceAll(e.format, "%w", "%v"), e.args...)
	}
	format := placeholder.ReplaceAllStringFunc(e.format, func(m string) string {
		field := m[1 : len(m)-1]
		s := ""
		if name != nil {
			s = name(field)
		}
		if s == "" {
			s = field
			if e.owner != "" {
				s = string(e.owner) + "." + field
			}
		}
		return strings.ReplaceAll(s, "%", "%%")
	})
	return fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), e.args...)
}

// Unwrap is the error the refusal gives as its cause (its first error
// argument), if any.
func (e *Error) Unwrap() error {
	for _, a := range e.args {
		if err, ok := a.(error); ok {
			return err
		}
	}
	return nil
}

// Named is err with the settings of every Error in it (itself, joined,
// or wrapped with context) written as name gives them; errors.Is and
// errors.As see err through it. An err that holds no Error comes back as
// it is.
func Named(err error, name func(field string) string) error {
	var fe *Error
	if !errors.As(err, &fe) {
		return err
	}
	return &named{err: err, name: name}
}

type named struct {
	err  error
	name func(string) string
}

func (n *named) Error() string { return render(n.err, n.name) }
func (n *named) Unwrap() error { return n.err }

// render is err's text with each Error in it written through name: an
// Error is its Text, and any other error keeps its own words, with the
// text of each error it wraps that holds an Error replaced by that
// error's rendering (the context "leaf0: %w" stays; so do the lines of a
// join).
func render(err error, name func(string) string) string {
	if e, ok := err.(*Error); ok {
		return e.Text(name)
	}
	var inner []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		inner = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		inner = u.Unwrap()
	}
	text := err.Error()
	for _, in := range inner {
		var fe *Error
		if in == nil || !errors.As(in, &fe) {
			continue
		}
		plain := in.Error()
		if i := strings.LastIndex(text, plain); i >= 0 {
			text = text[:i] + render(in, name) + text[i+len(plain):]
		}
	}
	return text
}

// Flags is a name function for Text and Named that writes a field as the
// command-line flag setting it: flags maps a field ("PacketElements",
// "Faults.Drop") to its flag without dashes ("packet-elements"). A field
// it lacks keeps its Go name.
func Flags(flags map[string]string) func(field string) string {
	return func(field string) string {
		if f, ok := flags[field]; ok {
			return "--" + f
		}
		return ""
	}
}
