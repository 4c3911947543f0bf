package bmv2example

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/switchml/switchml-go/p4/p4tools"
)

// TestRunScript runs the example as a user would, small, and checks that
// every rank verified its result.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts BMv2 and processes; skipped in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (run the tests as root)")
	}
	for _, tool := range []string{"ip", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: apt-get install iproute2 ethtool", tool)
		}
	}
	if _, err := p4tools.Locate(); errors.Is(err, p4tools.ErrAbsent) {
		t.Skipf("skipped: %v", err)
	}
	cmd := exec.Command("./run.sh", "2", "3000", "float32")
	cmd.Env = append(os.Environ(), "ITERS=2", "LOSS=0.01")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	verified := regexp.MustCompile(`(?m)^rank [01]/2: 3000 x float32, 2 iterations, .*verified=true`)
	if n := len(verified.FindAll(out, -1)); n != 2 {
		t.Fatalf("%d of 2 ranks reported a verified result:\n%s", n, out)
	}
}
