// Package testenv skips the tests that need what a machine may lack: root,
// or a command of the system (ip, tc, ethtool). It is the one place tests
// skip for those, with the same words and the package to install; a test
// skips for nothing else its code under test returns (the P4 toolchain
// has its own check, p4tools.ForTest).
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// installs says how to get each command the tests use.
var installs = map[string]string{
	"ip":      "apt-get install iproute2",
	"tc":      "apt-get install iproute2",
	"ethtool": "apt-get install ethtool",
	"go":      "install Go from go.dev",
}

// NeedRoot skips tb unless the test runs as root; why says what root is
// for ("to create network namespaces").
func NeedRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("skipped: needs root %s (run the tests as root)", why)
	}
}

// NeedCommands skips tb unless every command named is on PATH.
func NeedCommands(tb testing.TB, names ...string) {
	tb.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			how, ok := installs[name]
			if !ok {
				how = "install it"
			}
			tb.Skipf("skipped: needs the %s command: %s", name, how)
		}
	}
}

// NeedNetns skips tb unless it can build network namespaces and veth
// pairs: root and iproute2's ip.
func NeedNetns(tb testing.TB) {
	tb.Helper()
	NeedRoot(tb, "to create network namespaces")
	NeedCommands(tb, "ip")
}
