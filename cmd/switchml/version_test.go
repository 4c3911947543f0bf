package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionOf: the version names what the build knows, and says so when
// it knows nothing, never Go's "(devel)".
func TestVersionOf(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}
	build := func(v string, s []debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/switchml/switchml-go", Version: v}, Settings: s}
	}
	for _, c := range []struct {
		name, stamped string
		info          *debug.BuildInfo
		want          string
	}{
		{"stamped, no VCS", "v1.2.0", build("(devel)", nil), "switchml v1.2.0, go1.26.8"},
		{"stamped over the module's", "v1.2.0", build("v0.0.0-20260102030405-abc123+dirty", vcs),
			"switchml v1.2.0 (commit abc123 of 2026-01-02T03:04:05Z, with uncommitted changes), go1.26.8"},
		{"module version", "", build("v0.0.0-20260102030405-abc123+dirty", vcs),
			"switchml v0.0.0-20260102030405-abc123+dirty (commit abc123 of 2026-01-02T03:04:05Z, with uncommitted changes), go1.26.8"},
		{"VCS without a version", "", build("(devel)", vcs[:2]), "switchml development build (commit abc123), go1.26.8"},
		{"nothing known", "", build("(devel)", nil), "switchml unknown version (built without version control information"},
		{"no build information", "", nil, "switchml unknown version (the binary holds no build information)"},
		{"stamped, no build information", "v1.2.0", nil, "switchml v1.2.0"},
	} {
		got := versionOf(c.stamped, c.info)
		if !strings.HasPrefix(got, c.want) || strings.Contains(got, "(devel)") {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestVersionWithoutVCS builds the command as GOFLAGS=-buildvcs=false
// does, bare and stamped through -ldflags as the docs say: --version says
// it knows no version, or prints the stamped one.
func TestVersionWithoutVCS(t *testing.T) {
	needProcesses(t)
	dir := t.TempDir()
	for _, c := range []struct {
		ldflags, want string
	}{
		{"", "switchml unknown version (built without version control information"},
		{"-X main.buildVersion=v9.8.7-test", "switchml v9.8.7-test, go1."},
	} {
		bin := filepath.Join(dir, "switchml")
		build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", c.ldflags, "-o", bin, ".")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build -ldflags %q: %v\n%s", c.ldflags, err, out)
		}
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), c.want) {
			t.Errorf("built with -buildvcs=false -ldflags %q, --version printed %q (%v), want it to start %q", c.ldflags, out, err, c.want)
		}
	}
}
