package rackrun

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestShortNamesWhatRan(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/switchml allreduce --controller 10.0.0.1:50051 --job p1 --rank 3 --workers 8 --elements 16": "switchml allreduce --workers 8",
		"ip netns exec smltw0 /usr/bin/python3 torch_allreduce.py --rank 0":                               "python3 torch_allreduce.py",
		"/tmp/go-build1/b515/train.test -test.testlogfile=/tmp/x -test.paniconexit0":                      "train.test",
		"/tmp/switchml bench --name torch-switchml --sweeps workers --systems switchml,gloo":              "switchml bench --name torch-switchml --systems switchml,gloo",
	} {
		if got := short(in); got != want {
			t.Errorf("short(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHeavyDropsWrappers(t *testing.T) {
	got := Heavy([]string{"flock /tmp/switchml-heavy.lock --workers 4", "bash /tmp/wait.sh --workers 4", "go test", "switchml bench --name x"})
	if len(got) != 2 || got[0] != "go test" || got[1] != "switchml bench --name x" {
		t.Errorf("Heavy = %q, want the test run and the benchmark only", got)
	}
}

// A failing rank stops the others, and the error names it with its last
// words.
func TestRunStopsTheOthersWhenOneFails(t *testing.T) {
	cmds := []*exec.Cmd{
		exec.Command("sleep", "60"),
		exec.Command("sh", "-c", "echo 'cannot reach rank 0' >&2; exit 3"),
	}
	err := Run(cmds, nil)
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "cannot reach rank 0") {
		t.Fatalf("Run = %v, want rank 1's failure with its message", err)
	}
	if cmds[0].ProcessState == nil || cmds[0].ProcessState.Success() {
		t.Errorf("rank 0 was not stopped: %v", cmds[0].ProcessState)
	}
}

func TestRunSucceeds(t *testing.T) {
	if err := Run([]*exec.Cmd{exec.Command("true"), exec.Command("true")}, nil); err != nil {
		t.Fatal(err)
	}
}

// Benchmarks waiting for the machine do not count as heavy, and the one
// that waited longest goes first.
func TestWaitersTakeTurns(t *testing.T) {
	old := waitDir
	waitDir = t.TempDir()
	defer func() { waitDir = old }()
	self := os.Getpid()
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	other := sleeper.Process.Pid
	write := func(pid int, since int64) {
		if err := os.WriteFile(filepath.Join(waitDir, strconv.Itoa(pid)), []byte(strconv.FormatInt(since, 10)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(other, 100)
	write(1<<30, 50) // no such process: a waiter that died
	w := waiters()
	if len(w) != 1 || w[other] != 100 {
		t.Fatalf("waiters = %v, want only the live one", w)
	}
	if _, err := os.Stat(filepath.Join(waitDir, strconv.Itoa(1<<30))); err == nil {
		t.Error("the dead waiter's file was not removed")
	}
	if got := ahead(w, self, 200); len(got) != 1 || !strings.Contains(got[0], strconv.Itoa(other)) {
		t.Errorf("ahead of a later waiter = %q, want the earlier one", got)
	}
	if got := ahead(w, self, 50); len(got) != 0 {
		t.Errorf("ahead of an earlier waiter = %q, want none", got)
	}
	// Earlier waiters are waited for; the wait gives up at its limit.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	write(other, 1)
	var said []string
	WaitQuiet(ctx, time.Millisecond, func(s string) { said = append(said, s) })
	if len(said) == 0 || !strings.Contains(said[0], strconv.Itoa(other)) {
		t.Errorf("WaitQuiet said %q, want it to wait for process %d", said, other)
	}
	if _, err := os.Stat(filepath.Join(waitDir, strconv.Itoa(self))); err == nil {
		t.Error("WaitQuiet left its own file behind")
	}
}
