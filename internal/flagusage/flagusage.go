// Package flagusage prints a flag set's flags the way the commands'
// usage lines and docs write them: --name, where the flag package prints
// -name (it takes either).
package flagusage

import (
	"flag"
	"fmt"
	"reflect"
	"strings"
)

// Print lists fs's flags as flag.PrintDefaults does, but each as
// --name, the way the usage lines and the docs write them (the flag
// package takes either).
func Print(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if !isZeroValue(f) {
			if reflect.TypeOf(f.Value).String() == "*flag.stringValue" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, line)
	})
}

// isZeroValue reports whether f's default is its type's zero value (then
// Print names no default), as the flag package decides it.
func isZeroValue(f *flag.Flag) (zero bool) {
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	v, ok := z.Interface().(flag.Value)
	if !ok {
		return false
	}
	defer func() {
		if recover() != nil {
			zero = false // a Value whose zero cannot print itself
		}
	}()
	return f.DefValue == v.String()
}
