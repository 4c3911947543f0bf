package main

import (
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// helpFlags reads the "Flags:" section of a command's --help: the help text
// of each flag, by name.
func helpFlags(help string) map[string]string {
	flags := map[string]string{}
	name := ""
	for _, line := range strings.Split(help, "\n") {
		if m := regexp.MustCompile(`^  --(\S+)`).FindStringSubmatch(line); m != nil {
			name = m[1]
			flags[name] = line
		} else if name != "" && strings.HasPrefix(line, "    \t") {
			flags[name] += "\n" + line
		}
	}
	return flags
}

// TestHelpUsageLines: in every command's --help, a flag shown outside
// brackets on the usage line (as if required) has no default, and no flag's
// help names its default twice.
func TestHelpUsageLines(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	bracketed := regexp.MustCompile(`\[[^\]]*\]`)
	required := regexp.MustCompile(`--([a-z0-9-]+)`)
	for _, name := range names {
		if name == "controller" { // its usage line is the controller command's own
			continue
		}
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(binary, name, "--help").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", name, err, out)
			}
			help := string(out)
			usage, _, _ := strings.Cut(help, "\n")
			if !strings.HasPrefix(usage, "Usage: switchml "+name) {
				t.Fatalf("%s --help starts with %q, want its usage line", name, usage)
			}
			if m := regexp.MustCompile(`(?m)^  -[^-]\S*`).FindString(help); m != "" {
				t.Errorf("%s --help lists %q: want every flag as --name, as the usage lines write them", name, strings.TrimSpace(m))
			}
			flags := helpFlags(help)
			if len(flags) == 0 && name != "p4tools" {
				t.Fatalf("%s --help lists no flags:\n%s", name, help)
			}
			for _, m := range required.FindAllStringSubmatch(bracketed.ReplaceAllString(usage, ""), -1) {
				text, ok := flags[m[1]]
				if !ok {
					t.Errorf("%s: the usage line names --%s, which the command does not have", name, m[1])
				} else if strings.Contains(text, "(default ") {
					t.Errorf("%s: the usage line shows --%s as required, but it has a default:\n%s\n%s", name, m[1], usage, text)
				}
			}
			for f, text := range flags {
				if n := strings.Count(text, "default"); n > 1 {
					t.Errorf("%s --%s: its help names a default %d times:\n%s", name, f, n, text)
				}
			}
		})
	}
}

// TestHelpAndVersionExitZero: asking for help, of the command or of a
// subcommand, and for the version, succeeds; --version names the build.
func TestHelpAndVersionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"p4", "--help"}, {"p4", "pack", "--help"}, {"demo", "-h"}, {"--version"}, {"version"}} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil {
			t.Errorf("switchml %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "--version" && !regexp.MustCompile(`^switchml \S+.*, go1\.`).Match(out) {
			t.Errorf("switchml --version printed %q, want the module version and the Go release", out)
		}
	}
}
