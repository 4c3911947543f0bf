package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJobTokenFlags: where the job's token comes from, by flag.
func TestJobTokenFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "job-secret")
	if err := os.WriteFile(file, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tokenEnv, "from-env")
	parse := func(args ...string) (string, string, error) {
		fs := flag.NewFlagSet("switchml allreduce", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("token", "", "")
		tf := fs.String("token-file", "", "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		var warn strings.Builder
		tok, err := jobToken(fs, *tf, &warn)
		return tok, warn.String(), err
	}
	for _, c := range []struct {
		args        []string
		token, warn string
	}{
		{nil, "from-env", ""},
		{[]string{"--token-file", file}, "from-file", ""},
		{[]string{"--token", "from-line"}, "from-line", "--token on the command line"},
	} {
		tok, warn, err := parse(c.args...)
		if err != nil || tok != c.token || (c.warn == "") != (warn == "") || !strings.Contains(warn, c.warn) || strings.Contains(warn, tok) {
			t.Errorf("%v: token %q, warning %q, %v; want %q and a warning saying %q", c.args, tok, warn, err, c.token, c.warn)
		}
	}
	if _, _, err := parse("--token", "x", "--token-file", file); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("--token and --token-file together: %v, want an error", err)
	}
	if err := os.WriteFile(file, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := parse("--token-file", file); err == nil || !strings.Contains(err.Error(), file+" is empty") {
		t.Errorf("--token-file holding a newline: %v, want it refused as empty", err)
	}
}
