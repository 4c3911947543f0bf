package controller

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// FieldError is a setting of Options or Config refused before anything is
// dialled. Its text names the settings at fault by their field names
// ("Slots -5: want 1..1048576"); a program that gives them other names (a
// command's flags) renders it with those (Named).
type FieldError struct {
	// Fields are the settings the refusal names, in order.
	Fields []string
	format string // a fmt format whose {Field} placeholders name settings
	args   []any
}

// placeholder is a setting named in a FieldError's format.
var placeholder = regexp.MustCompile(`\{([A-Za-z]+)\}`)

// refuseField makes a FieldError: format is fmt's, with {Field} for each
// setting it names (never inside args: values are not read for names).
func refuseField(format string, args ...any) *FieldError {
	e := &FieldError{format: format, args: args}
	for _, m := range placeholder.FindAllStringSubmatch(format, -1) {
		e.Fields = append(e.Fields, m[1])
	}
	return e
}

func (e *FieldError) Error() string { return e.Text(nil) }

// Text is the refusal with each setting written as name gives it (nil, or
// "" from name: the field's name).
func (e *FieldError) Text(name func(field string) string) string {
	format := placeholder.ReplaceAllStringFunc(e.format, func(m string) string {
		field := m[1 : len(m)-1]
		if name != nil {
			if s := name(field); s != "" {
				field = s
			}
		}
		return strings.ReplaceAll(field, "%", "%%")
	})
	return fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), e.args...)
}

// Unwrap is the error the refusal gives as its cause, if any.
func (e *FieldError) Unwrap() error {
	for _, a := range e.args {
		if err, ok := a.(error); ok {
			return err
		}
	}
	return nil
}

// Named renders the FieldErrors in err (itself, or joined with
// errors.Join) with the settings written as name gives them; errors.Is and
// errors.As see err through it.
func Named(err error, name func(field string) string) error {
	if err == nil {
		return nil
	}
	return &named{err: err, name: name}
}

type named struct {
	err  error
	name func(string) string
}

func (n *named) Error() string { return render(n.err, n.name) }
func (n *named) Unwrap() error { return n.err }

func render(err error, name func(string) string) string {
	switch e := err.(type) {
	case *FieldError:
		return e.Text(name)
	case interface{ Unwrap() []error }:
		var parts []string
		for _, e := range e.Unwrap() {
			parts = append(parts, render(e, name))
		}
		return strings.Join(parts, "\n")
	}
	// A refusal wrapped with context ("leaf0: %w") keeps the context.
	var fe *FieldError
	text := err.Error()
	if errors.As(err, &fe) && strings.HasSuffix(text, fe.Error()) {
		return strings.TrimSuffix(text, fe.Error()) + fe.Text(name)
	}
	return text
}
