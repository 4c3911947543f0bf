package bmv2example

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/internal/testenv"
	"github.com/switchml/switchml-go/p4/p4tools"
)

// TestRunScript runs the example as a user would, small, and checks that
// every rank verified its result.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts BMv2 and processes; skipped in -short")
	}
	testenv.NeedNetns(t)
	testenv.NeedCommands(t, "ethtool")
	p4tools.ForTest(t)
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

// TestRunScriptStopsWithoutToolchain runs the example with no P4 toolchain
// where SWITCHML_P4_TOOLS points: it stops there, non-zero, with the
// reason, instead of running on into a missing p4c (exit 127).
func TestRunScriptStopsWithoutToolchain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the switchml command; skipped in -short")
	}
	testenv.NeedNetns(t) // the script checks for them before the toolchain
	testenv.NeedCommands(t, "ethtool")
	cmd := exec.Command("./run.sh", "2", "3000", "float32")
	cmd.Env = append(os.Environ(), p4tools.EnvDir+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 127 {
		t.Fatalf("run.sh without a toolchain: %v, want a non-zero exit other than 127 (command not found)\n%s", err, out)
	}
	for _, want := range []string{"holds no bin/p4c-bm2-ss", "run.sh: stopped: the P4 toolchain is missing"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("run.sh without a toolchain printed no %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "worker namespaces") {
		t.Errorf("run.sh went on past the toolchain check:\n%s", out)
	}
}
