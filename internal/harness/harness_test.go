package harness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBadConfig(t *testing.T) {
	ctx := context.Background()
	cmd := func(args ...string) *exec.Cmd { return exec.Command("false", args...) }
	if _, err := Start(ctx, Config{}); err == nil || !strings.Contains(err.Error(), "Command") {
		t.Errorf("no Command: %v", err)
	}
	if _, err := Start(ctx, Config{Command: cmd, Slots: -1}); err == nil || !strings.Contains(err.Error(), "Slots") {
		t.Errorf("negative Slots: %v", err)
	}
	if _, err := Start(ctx, Config{Command: cmd, Transport: "tcp"}); err == nil || !strings.Contains(err.Error(), `"tcp"`) {
		t.Errorf("transport tcp: %v", err)
	}
}

// switchmlBinary builds the switchml command once per test run.
func switchmlBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the switchml command; skipped with -short")
	}
	exe := filepath.Join(t.TempDir(), "switchml")
	out, err := exec.Command("go", "build", "-o", exe, "github.com/switchml/switchml-go/cmd/switchml").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/switchml: %v\n%s", err, out)
	}
	return exe
}

func TestSubprocesses(t *testing.T) {
	exe := switchmlBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := func(args ...string) *exec.Cmd { return exec.Command(exe, args...) }
	f, err := Start(ctx, Config{Command: cmd, Slots: 128, MaxElements: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitReady(ctx, f.ControllerAddr(), nil, nil); err != nil {
		t.Fatal(err)
	}
	sw, ctl := f.Procs()
	if sw == nil || ctl == nil || f.Exited() {
		t.Fatal("processes missing or exited")
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	logs := f.Logs()
	// The switch logs its counters as it stops, after an interrupt.
	if !strings.Contains(logs["switch"], "software switch stopped") {
		t.Errorf("switch log lacks its stop line:\n%s", logs["switch"])
	}
	if !strings.Contains(logs["controller"], "max_elements") && !strings.Contains(logs["controller"], "serving") {
		t.Errorf("controller log:\n%s", logs["controller"])
	}

	// A controller that cannot start fails Start at once, with its log.
	start := time.Now()
	_, err = Start(ctx, Config{Command: cmd, ControllerArgs: []string{"--no-such-flag"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("bad controller flag: %v", err)
	}
	if time.Since(start) > DefaultReadyTimeout {
		t.Errorf("a dead controller was noticed only at the ready timeout")
	}
}

func TestProc(t *testing.T) {
	p, err := StartProc("sh", false, exec.Command("sh", "-c", `echo out; echo err1 >&2; printf err2 >&2; trap 'echo bye >&2; exit 3' INT; while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Logs(), "err2") {
		if time.Now().After(deadline) {
			t.Fatalf("logs: %q", p.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.Exited() {
		t.Fatal("exited early")
	}
	p.Stop(5 * time.Second)
	if !p.Exited() {
		t.Fatal("Stop returned before the process exited")
	}
	if got := string(p.Stdout()); got != "out\n" {
		t.Errorf("stdout %q", got)
	}
	if got := p.Logs(); got != "err1\nerr2bye\n" {
		t.Errorf("stderr %q", got)
	}
	var ee *exec.ExitError
	if err := p.Wait(); err == nil || !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Wait: %v", err)
	}
	if _, err := StartProc("x", false, &exec.Cmd{Path: "/nonexistent", Stdout: os.Stdout}); err == nil {
		t.Error("a command with Stdout set was taken")
	}
	if _, err := StartProc("x", false, exec.Command("/nonexistent/binary")); err == nil || !strings.Contains(err.Error(), "start x") {
		t.Errorf("missing binary: %v", err)
	}
}

func TestFreePort(t *testing.T) {
	for _, n := range []string{"tcp", "udp"} {
		if p, err := FreePort(n); err != nil || p <= 0 {
			t.Errorf("FreePort(%s) = %d, %v", n, p, err)
		}
	}
	if _, err := FreePort("sctp"); err == nil {
		t.Error("FreePort(sctp) succeeded")
	}
}

func TestShardProcDataplanes(t *testing.T) {
	n := 0
	free := func() (string, error) { n++; return "127.0.0.1:" + strconv.Itoa(40000+n), nil }
	for _, c := range []struct {
		dp       string
		explicit bool
		shards   int
		want     string
	}{
		{"10.0.0.1:48864", true, 1, "10.0.0.1:48864"},
		{"10.0.0.1:48864", true, 2, "10.0.0.1:48864,10.0.0.1:48865"},
		{"127.0.0.1:7,127.0.0.1:9", true, 2, "127.0.0.1:7,127.0.0.1:9"},
		{"127.0.0.1:39999", false, 3, "127.0.0.1:39999,127.0.0.1:40001,127.0.0.1:40002"},
	} {
		got, err := procDataplanes(c.dp, c.explicit, c.shards, free)
		if err != nil || got != c.want {
			t.Errorf("procDataplanes(%q, %v, %d) = %q, %v; want %q", c.dp, c.explicit, c.shards, got, err, c.want)
		}
	}
	if _, err := procDataplanes("127.0.0.1:0", true, 2, free); err == nil {
		t.Error("an explicit port 0 with 2 shards was accepted: the controller could not be told the ports")
	}
}
