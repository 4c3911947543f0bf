package cli_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCommandsHelp builds every command of the module and asks each for
// --help (and each subcommand): it exits 0 and lists the flags as --name.
func TestCommandsHelp(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the commands with")
	}
	bin := t.TempDir()
	build := exec.Command(goBin, "build", "-o", bin+string(filepath.Separator), "./cmd/...")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	singleDash := regexp.MustCompile(`(?m)^  -[^-]`)
	for _, args := range [][]string{
		{"train", "--help"},
		{"density", "--help"},
		{"plotcurves", "--help"},
		{"wireprecision", "--help"},
		{"scalesim", "--help"},
		{"rackbench", "--help"},
		{"rackbench", "accuracy", "--help"},
		{"rackbench", "steps", "--help"},
		{"rackbench", "report", "--help"},
		{"replaybench", "--help"},
		{"replaybench", "worker", "--help"},
		{"replaybench", "report", "--help"},
		{"replaybench", "merge", "--help"},
		{"replaybench", "derive", "--help"},
		{"replaybench", "profiles", "--help"},
	} {
		name := strings.Join(args[:len(args)-1], " ")
		out, err := exec.Command(filepath.Join(bin, args[0]), args[1:]...).CombinedOutput()
		if err != nil {
			t.Errorf("%s --help: %v\n%s", name, err, out)
			continue
		}
		help := string(out)
		if !strings.HasPrefix(help, "Usage: "+name) {
			t.Errorf("%s --help starts %q, want its usage line", name, strings.SplitN(help, "\n", 2)[0])
		}
		if m := singleDash.FindString(help); m != "" {
			t.Errorf("%s --help lists a flag as -name:\n%s", name, help)
		}
		// Every command but rackbench's and report's lists flags.
		if name != "rackbench" && !strings.HasSuffix(name, "report") && !strings.Contains(help, "\n  --") {
			t.Errorf("%s --help lists no --flag:\n%s", name, help)
		}
	}

	// A usage error: exit status 2 and a short message, not the help.
	for _, args := range [][]string{{"train", "--no-such-flag"}, {"density", "stray"}, {"rackbench"}, {"replaybench", "merge"}, {"plotcurves"}} {
		out, err := exec.Command(filepath.Join(bin, args[0]), args[1:]...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%q: %v, want exit status 2\n%s", args, err, out)
		}
		if n := strings.Count(string(out), "\n"); n > 2 || !strings.Contains(string(out), "--help") {
			t.Errorf("%q printed %d lines, want a short message pointing at --help:\n%s", args, n, out)
		}
	}
}
