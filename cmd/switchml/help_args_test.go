package main

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHelpArgumentNames: every flag's --help line shows one argument name
// at most. The flag package takes a usage string's first back-quoted text
// for the argument's name, so quoting a command there garbles the line.
func TestHelpArgumentNames(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, _ := exec.CommandContext(ctx, binary, name, "--help").CombinedOutput() // --help exits non-zero
		cancel()
		if !strings.Contains(string(out), "Flags:") {
			t.Errorf("switchml %s --help printed no flags:\n%s", name, out)
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			head, _, _ := strings.Cut(line, "\t") // one-letter flags keep their usage on the line
			if f := strings.Fields(head); len(f) > 2 {
				t.Errorf("switchml %s --help: %q shows %q as the argument of %s: reword the usage's back-quoted text", name, strings.TrimSpace(head), strings.Join(f[1:], " "), f[0])
			}
		}
	}
}
