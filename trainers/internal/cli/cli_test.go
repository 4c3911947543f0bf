package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	newFS := func() (*flag.FlagSet, *bytes.Buffer) {
		fs := NewFlagSet("cmd sub", "[flags]", "Does a thing.")
		var out bytes.Buffer
		fs.SetOutput(&out)
		fs.Int("count", 3, "how many")
		fs.String("name", "", "what to call it")
		return fs, &out
	}

	fs, out := newFS()
	if err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, want := range []string{"Usage: cmd sub [flags]\n\nDoes a thing.\n\nFlags:\n", "  --count int\n", "(default 3)", "  --name string\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "  -count") || strings.Count(help, "default") != 1 {
		t.Errorf("help lists a flag as -name or names a zero default:\n%s", help)
	}

	var ue *UsageError
	for _, args := range [][]string{{"--nope"}, {"--count", "x"}, {"stray"}} {
		fs, out := newFS()
		err := Parse(fs, args)
		if !errors.As(err, &ue) || ue.Command != "cmd sub" {
			t.Errorf("Parse(%q) = %v, want a *UsageError of cmd sub", args, err)
		}
		if out.Len() != 0 {
			t.Errorf("Parse(%q) printed %q: a usage error prints no help", args, out)
		}
	}

	fs, _ = newFS()
	if err := ParseArgs(fs, []string{"--count", "4", "a", "b"}); err != nil || fs.NArg() != 2 {
		t.Errorf("ParseArgs with arguments: %v, %d arguments", err, fs.NArg())
	}
}

func TestStatus(t *testing.T) {
	base := errors.New("disk full")
	for _, tc := range []struct {
		err    error
		status int
		out    string
	}{
		{nil, ExitOK, ""},
		{flag.ErrHelp, ExitOK, ""},
		{fmt.Errorf("parsing: %w", flag.ErrHelp), ExitOK, ""},
		{base, ExitFail, "cmd: disk full\n"},
		{errors.New("cmd: already named"), ExitFail, "cmd: already named\n"},
		{Usagef("cmd sub", "--count %d: want 1..9", 0), ExitUsage, "cmd: --count 0: want 1..9\nRun 'cmd sub --help' for usage.\n"},
		{Usage("", base), ExitUsage, "cmd: disk full\nRun 'cmd --help' for usage.\n"},
	} {
		var out bytes.Buffer
		if got := Status("cmd", tc.err, &out); got != tc.status || out.String() != tc.out {
			t.Errorf("Status(%v) = %d, %q; want %d, %q", tc.err, got, out.String(), tc.status, tc.out)
		}
	}
	if err := Usage("cmd", base); !errors.Is(err, base) {
		t.Errorf("Usage(cmd, err) = %v: want it to wrap err", err)
	}
	if Usage("cmd", nil) != nil || Usage("cmd", flag.ErrHelp) != flag.ErrHelp {
		t.Error("Usage changed nil or flag.ErrHelp")
	}
}

func TestPerModel(t *testing.T) {
	got, err := PerModel("density", "steps-for", "lstm=5, bert=2", "steps", 1)
	if err != nil || len(got) != 2 || got["lstm"] != 5 || got["bert"] != 2 {
		t.Errorf("PerModel: %v, %v", got, err)
	}
	if got, err := PerModel("density", "steps-for", "", "steps", 1); err != nil || len(got) != 0 {
		t.Errorf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"lstm", "lstm=0", "=3", "lstm=x"} {
		if _, err := PerModel("density", "steps-for", bad, "steps", 1); err == nil || !strings.Contains(err.Error(), "--steps-for") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
