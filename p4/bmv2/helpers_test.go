package bmv2

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/switchml/switchml-go/internal/testenv"
	"github.com/switchml/switchml-go/p4/p4tools"
)

// program is the v1model SwitchML program, relative to this package.
// $SWITCHML_BMV2_PROGRAM runs the tests on another copy (for example one
// with a candidate fix).
var program = func() string {
	if p := os.Getenv("SWITCHML_BMV2_PROGRAM"); p != "" {
		return p
	}
	return "../v1model/switchml.p4"
}()

var (
	compileOnce sync.Once
	compileDir  string
	compiledJS  string
	compiledP4I string
	compileErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if compileDir != "" {
		os.RemoveAll(compileDir)
	}
	os.Exit(code)
}

// compiled compiles the program once per test binary and returns the paths
// of its BMv2 JSON and P4Info.
func compiled(t *testing.T, tools *p4tools.Tools) (jsonPath, p4infoPath string) {
	t.Helper()
	compileOnce.Do(func() {
		compileDir, compileErr = os.MkdirTemp("", "bmv2-compile-")
		if compileErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		compiledJS, compiledP4I, compileErr = Compile(ctx, tools, program, compileDir)
	})
	if compileErr != nil {
		t.Fatalf("compile %s: %v", program, compileErr)
	}
	return compiledJS, compiledP4I
}

// needSwitch returns the toolchain, skipping (with the reason) when it is
// absent or when the test cannot create network interfaces.
func needSwitch(t *testing.T) *p4tools.Tools {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped in -short mode: starts BMv2")
	}
	testenv.NeedRoot(t, "to create veth interfaces for BMv2's ports")
	testenv.NeedCommands(t, "ip")
	return p4tools.ForTest(t)
}

// ifName returns an interface name unique to this process (at most 15 bytes,
// the kernel's limit): parallel runs of the tests do not collide.
func ifName(tag string, i int) string {
	n := fmt.Sprintf("b%d%s%d", os.Getpid(), tag, i)
	if len(n) > 15 {
		panic("interface name too long: " + n)
	}
	return n
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// vethPair creates the pair a <-> b, up, without IPv6 (so the kernel sends
// no router or listener traffic into the switch), and deletes it when the
// test ends, whatever its outcome.
func vethPair(t *testing.T, a, b string) {
	t.Helper()
	_ = ipCmd("link", "del", a) // left over from a killed run with the same pid
	if err := ipCmd("link", "add", a, "type", "veth", "peer", "name", b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Deleting one end removes both.
		if err := ipCmd("link", "del", a); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	for _, n := range []string{a, b} {
		_ = os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", n, "disable_ipv6"), []byte("1"), 0o644)
		if err := ipCmd("link", "set", n, "up"); err != nil {
			t.Fatal(err)
		}
	}
}

// freeAddr returns 127.0.0.1:port with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startSwitch starts BMv2 on the given ports with a log file in the test's
// temporary directory, and stops it when the test ends; a failed test
// shows the tail of its log.
func startSwitch(t *testing.T, tools *p4tools.Tools, ports map[uint32]string, logLevel string) *Switch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if l := os.Getenv("SWITCHML_BMV2_LOG_LEVEL"); l != "" {
		logLevel = l // trace shows every table, register and condition
	}
	logFile := filepath.Join(t.TempDir(), "bmv2.log")
	if d := os.Getenv("SWITCHML_BMV2_LOG_DIR"); d != "" {
		logFile = filepath.Join(d, t.Name()+".log") // kept after the test
	}
	sw, err := Start(ctx, tools, Options{Ports: ports, GRPCAddr: freeAddr(t), LogFile: logFile, LogLevel: logLevel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sw.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(logFile); err == nil {
				t.Logf("BMv2 output:\n%s\nBMv2 log (tail):\n%s", sw.Output(), tail(string(b), 8000))
			}
		}
	})
	return sw
}

func loadP4Info(t *testing.T, text []byte) *p4configv1.P4Info {
	t.Helper()
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(text, info); err != nil {
		t.Fatalf("parse P4Info: %v", err)
	}
	return info
}
