package main

import (
	"fmt"
	"runtime/debug"
)

// buildVersion is a version stamped at link time, for builds where Go
// records no version control information (GOFLAGS=-buildvcs=false, a git
// worktree, a source tree without .git):
//
//	go build -ldflags "-X main.buildVersion=$(git describe --always --dirty)" ./cmd/switchml
var buildVersion string

// develVersion is the module version Go records when it knows none.
const develVersion = "(devel)"

// version is what --version prints: the stamped or module version, the
// commit the binary was built from when the build recorded it, and the Go
// release.
func version() string {
	info, _ := debug.ReadBuildInfo() // nil when the binary holds none
	return versionOf(buildVersion, info)
}

// versionOf words the version of a binary stamped with stamped (empty:
// none) whose build recorded info (nil: nothing).
func versionOf(stamped string, info *debug.BuildInfo) string {
	if info == nil {
		if stamped != "" {
			return "switchml " + stamped
		}
		return "switchml unknown version (the binary holds no build information)"
	}
	var rev, modified, when string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", with uncommitted changes"
			}
		case "vcs.time":
			when = " of " + s.Value
		}
	}
	var out string
	switch v := info.Main.Version; {
	case stamped != "":
		out = "switchml " + stamped
	case v != "" && v != develVersion:
		out = "switchml " + v
	case rev != "":
		out = "switchml development build"
	default:
		return "switchml unknown version (built without version control information, as with GOFLAGS=-buildvcs=false or in a git worktree: " +
			`stamp one with go build -ldflags "-X main.buildVersion=VERSION"), ` + info.GoVersion
	}
	if rev != "" {
		out += fmt.Sprintf(" (commit %s%s%s)", rev, when, modified)
	}
	return out + ", " + info.GoVersion
}
