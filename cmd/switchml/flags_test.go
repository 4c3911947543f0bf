package main

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/ring"
)

// goFieldNames lists the exported field names of a struct type, nested
// structs included: words a user of the command line must never read.
func goFieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		names = append(names, f.Name)
		if f.Type.Kind() == reflect.Struct {
			names = append(names, goFieldNames(f.Type)...)
		}
	}
	return names
}

// checkFlagError runs a command in-process with bad flags and checks that
// its error names every flag in want and no Go field of cfgType.
func checkFlagError(t *testing.T, run func(context.Context, []string) error, cfgType reflect.Type, args []string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, args)
	if err == nil {
		t.Fatalf("%v accepted", args)
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%v: error %q does not contain %q", args, msg, w)
		}
	}
	for _, name := range goFieldNames(cfgType) {
		if regexp.MustCompile(`\b` + name + `\b`).MatchString(msg) {
			t.Errorf("%v: error %q names the Go field %s", args, msg, name)
		}
	}
}

func TestAllReduceFlagErrors(t *testing.T) {
	cfg := reflect.TypeFor[switchml.Config]()
	base := []string{"--elements", "10", "--join-timeout", "5s"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--packet-elements", "3000"}, []string{"--packet-elements = 3000", "32, 64, 128 or 256", "set --extended for other sizes"}},
		{[]string{"--packet-elements", "-1"}, []string{"--packet-elements = -1", "want 0"}},
		{[]string{"--packet-elements", "4096", "--extended"}, []string{"--packet-elements = 4096", "1..2048"}},
		{[]string{"--workers", "40"}, []string{"--workers = 40", "set --extended for more"}},
		{[]string{"--workers", "0"}, []string{"--workers = 0", "at least 1"}},
		{[]string{"--workers", "2", "--rank", "2"}, []string{"--rank = 2", "rank < --workers (2)"}},
		{[]string{"--job", ""}, []string{"--job is empty", "name the job"}},
		{[]string{"--lanes", "65"}, []string{"--lanes = 65", "1..64"}},
		{[]string{"--window", "5000"}, []string{"--window = 5000", "1..4096"}},
		{[]string{"--timeout", "-1s", "--give-up", "-1s"}, []string{"--timeout = -1s", "--give-up = -1s", "must not be negative"}},
		{[]string{"--join-timeout", "-1s"}, []string{"--join-timeout = -1s"}},
		{[]string{"--drop", "2", "--duplicate", "-0.5", "--reorder", "1.5"}, []string{"--drop = 2", "--duplicate = -0.5", "--reorder = 1.5", "[0, 1]"}},
		{[]string{"--auth"}, []string{"--auth = true", "no room for a tag", "set --extended too"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			checkFlagError(t, runAllReduce, cfg, append(append([]string(nil), base...), tc.args...), tc.want...)
		})
	}
}

func TestRingFlagErrors(t *testing.T) {
	cfg := reflect.TypeFor[ring.Config]()
	base := []string{"--elements", "10"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--workers", "0"}, []string{"--workers = 0", "at least 1"}},
		{[]string{"--workers", "2", "--rank", "2", "--addrs", "127.0.0.1:1,127.0.0.1:2"}, []string{"--rank = 2", "rank < --workers (2)"}},
		{[]string{"--workers", "3", "--addrs", "127.0.0.1:1,127.0.0.1:2"}, []string{"--addrs has 2 addresses for --workers 3", "one listen address per rank"}},
		{[]string{"--chunk-bytes", "-1"}, []string{"--chunk-bytes = -1", "must not be negative"}},
		{[]string{"--dial-timeout", "-1s"}, []string{"--dial-timeout = -1s", "must not be negative"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			checkFlagError(t, runRing, cfg, append(append([]string(nil), base...), tc.args...), tc.want...)
		})
	}
}

// Every Config field a validation error can name has a flag in the table
// of the allreduce command.
func TestAllReduceFlagsCoverConfig(t *testing.T) {
	for _, name := range goFieldNames(reflect.TypeFor[switchml.Config]()) {
		switch name {
		case "TLS", "Faults", "Seed": // set from --tls-* and --seed, never named by validation
			continue
		case "Drop", "Duplicate", "Reorder":
			name = "Faults." + name
		}
		if _, ok := allreduceFlags[name]; !ok {
			t.Errorf("Config field %s has no flag in allreduceFlags", name)
		}
	}
}

func TestSwitchFlagErrors(t *testing.T) {
	cfg := reflect.TypeFor[softswitch.Config]()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--slots", "0"}, []string{"--slots 0", "want 1.."}},
		{[]string{"--max-elements", "5000"}, []string{"--max-elements 5000", "want 1..2048"}},
		{[]string{"--max-workers", "-3"}, []string{"--max-workers -3"}},
		{[]string{"--drop", "2", "--reorder", "-0.5"}, []string{"--drop 2", "--reorder -0.5", "[0, 1]"}},
		{[]string{"--auth", "--parent", "127.0.0.1:9"}, []string{"--auth with --parent", "carry no tag"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"--dataplane", "127.0.0.1:0", "--p4rt", "127.0.0.1:0"}, tc.args...)
			checkFlagError(t, runSwitch, cfg, args, tc.want...)
		})
	}
}

func TestControllerFlagErrors(t *testing.T) {
	cfg := reflect.TypeFor[controller.Config]()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--slots", "-5"}, []string{"--slots -5", "want 1.."}},
		{[]string{"--max-elements", "0"}, []string{"--max-elements 0", "want 1..2048"}},
		{[]string{"--simulate-loss-in", "3", "--simulate-loss-out", "1"}, []string{"--simulate-loss-in 3", "--simulate-loss-out 1", "[0, 1)"}},
		{[]string{"--auth", "--target-kind", "bmv2"}, []string{"--auth with --target-kind bmv2", "cannot check a MAC"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// No switch answers at the target: a flag error must come first.
			args := append([]string{"--target", "127.0.0.1:1", "--connect-timeout", "1s"}, tc.args...)
			checkFlagError(t, runController, cfg, args, tc.want...)
		})
	}
}

// TestControllerFlagsNameFields: each flag the controller's refusals are
// written with sets the controller.Options field it stands for, and no two
// fields share a flag.
func TestControllerFlagsNameFields(t *testing.T) {
	opts := reflect.TypeFor[controller.Options]()
	seen := map[string]string{}
	for field, flag := range controllerFlags {
		if _, ok := opts.FieldByName(field); !ok {
			t.Errorf("--%s stands for %s, which controller.Options lacks", flag, field)
		}
		if other, ok := seen[flag]; ok {
			t.Errorf("--%s stands for both %s and %s", flag, field, other)
		}
		seen[flag] = field
	}
}

// placeholders are the settings named as {Field} in the string literals
// of the non-test Go files of dir: what its field.Errors can name.
func placeholders(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\{([A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*)\}`)
	out := map[string]bool{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				for _, m := range name.FindAllStringSubmatch(lit.Value, -1) {
					out[m[1]] = true
				}
			}
			return true
		})
	}
	return out
}

// TestEveryNamedFieldHasAFlag: each setting a library's field.Error can
// name (a {Field} of its messages, or a field of the struct it refuses)
// has a flag in the command that sets it, so that the command's users
// read a flag and never a Go field.
func TestEveryNamedFieldHasAFlag(t *testing.T) {
	for _, tc := range []struct {
		dir    string
		flags  map[string]string
		fields reflect.Type
	}{
		{"../../switchml", allreduceFlags, reflect.TypeFor[switchml.Config]()},
		{"../../p4/controller", controllerFlags, reflect.TypeFor[controller.Options]()},
		{"../../p4/controller/jobcore", controllerFlags, reflect.TypeFor[controller.Options]()}, // the core's refusals name the controller's settings
		{"../../p4/softswitch", switchFlags, reflect.TypeFor[softswitch.Config]()},
	} {
		named := placeholders(t, tc.dir)
		if len(named) == 0 {
			t.Errorf("%s: no {Field} in its messages: the scan found nothing", tc.dir)
		}
		for f := range named {
			if _, ok := tc.flags[f]; !ok {
				t.Errorf("%s names {%s} in a refusal, which has no flag in the command's map", tc.dir, f)
			}
			if _, ok := tc.fields.FieldByName(strings.Split(f, ".")[0]); !ok {
				t.Errorf("%s names {%s} in a refusal, which %v lacks", tc.dir, f, tc.fields)
			}
		}
	}
	// Options' own fields (the embedded Config's aside, which the
	// controller fills from them) each have a flag.
	opts := reflect.TypeFor[controller.Options]()
	for i := range opts.NumField() {
		if f := opts.Field(i); !f.Anonymous && f.IsExported() {
			if _, ok := controllerFlags[f.Name]; !ok {
				t.Errorf("controller.Options.%s has no flag in controllerFlags", f.Name)
			}
		}
	}
}
