// Package rackrun runs the ranks of a training job on the emulated rack of
// package benchmarks/rack: it brings up the rack with the project's software
// switch and controller in the switch namespace, runs one process per
// worker namespace and stops the others when one rank fails, so that a
// broken point ends instead of leaving ranks blocked in an allreduce.
package rackrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
)

// Rack is a built rack whose switch namespace runs the software switch and
// the controller.
type Rack struct {
	*rack.Rack
	Fabric *harness.Fabric
	tmp    string
}

// Start builds the switchml command, the rack of rc and the switch side
// (fc completed by rack.Fabric). It needs root. Close undoes it all.
func Start(ctx context.Context, rc rack.Config, fc harness.Config) (*Rack, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the emulated rack needs root (network namespaces and tc)")
	}
	tmp, err := os.MkdirTemp("", "rackrun")
	if err != nil {
		return nil, err
	}
	swbin := filepath.Join(tmp, "switchml")
	if err := Build(ctx, swbin, "github.com/switchml/switchml-go/cmd/switchml"); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	r, err := rack.New(ctx, rc)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	fab, err := harness.Start(ctx, r.Fabric(ctx, swbin, fc))
	if err != nil {
		r.Close()
		os.RemoveAll(tmp)
		return nil, err
	}
	return &Rack{Rack: r, Fabric: fab, tmp: tmp}, nil
}

// Close stops the switch side and removes the rack.
func (r *Rack) Close() error {
	err := errors.Join(r.Fabric.Close(), r.Rack.Close())
	os.RemoveAll(r.tmp)
	return err
}

// Controller is the address the workers join the job service at.
func (r *Rack) Controller() string {
	return net.JoinHostPort(r.SwitchIP(), rack.ControllerPort)
}

// Build compiles a Go package into out with the environment of this
// process (the trainers' cgo settings included).
func Build(ctx context.Context, out, pkg string) error {
	c := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("building %s: %w", pkg, err)
	}
	return nil
}

// Run starts every command, one per rank, and waits for all of them. When
// one fails, the others are killed: they would wait for it forever. A
// command's stderr, unless set, is kept for the error message; rank 0's is
// also copied to echo when echo is not nil. The error names the first rank
// that failed and the last lines it wrote.
func Run(cmds []*exec.Cmd, echo io.Writer) error {
	errs := make([]bytes.Buffer, len(cmds))
	for i, c := range cmds {
		if c.Stderr == nil {
			c.Stderr = &errs[i]
			if i == 0 && echo != nil {
				c.Stderr = io.MultiWriter(echo, &errs[i])
			}
		}
		c.WaitDelay = 5 * time.Second
		if err := c.Start(); err != nil {
			for _, o := range cmds[:i] {
				o.Process.Kill()
				o.Wait()
			}
			return fmt.Errorf("rank %d: starting %s: %w", i, c.Path, err)
		}
	}
	var mu sync.Mutex
	first := -1
	werr := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			werr[i] = c.Wait()
			if werr[i] == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if first >= 0 {
				return
			}
			first = i
			for _, o := range cmds {
				if o != c {
					o.Process.Kill()
				}
			}
		}()
	}
	wg.Wait()
	if first < 0 {
		return nil
	}
	return fmt.Errorf("rank %d: %v: %s", first, werr[first], LastLines(errs[first].String(), 5))
}

// LastLines is the last n lines of s joined by " | ", for error messages.
func LastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// Commit is the commit the working tree is at (git rev-parse HEAD), so that
// a results file says what code produced it; "unknown (...)" when git cannot
// tell.
func Commit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return fmt.Sprintf("unknown (git rev-parse HEAD: %v)", err)
	}
	return strings.TrimSpace(string(out))
}

// heavy matches the command lines of the measurements and test runs that
// would take CPU from a measurement on this (small) machine.
var heavy = []string{"switchml bench", "replaybench", "rackbench", "go test", "train --rank", "train --worker-rank",
	"switchml allreduce", "torch_allreduce", "replay_gloo", ".test -test."}

// Others lists the heavy processes (benchmarks, test runs, training) that
// run on this machine outside this process and its children: a figure
// measured meanwhile shared the CPUs with them.
func Others() []string {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	cmdline := map[int]string{}
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces: fields start
		// after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid int
		if _, err := fmt.Sscan(string(stat[i+1:]), &state, &ppid); err != nil {
			continue
		}
		parent[pid] = ppid
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmdline[pid] = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	}
	// This process's children are the measurement; its ancestors wait
	// for it (a lock, a queue script).
	ancestors := map[int]bool{}
	for pid, n := parent[self], 0; pid > 1 && n < 64; pid, n = parent[pid], n+1 {
		ancestors[pid] = true
	}
	mine := func(pid int) bool {
		if ancestors[pid] {
			return true
		}
		for n := 0; pid > 1 && n < 64; n++ {
			if pid == self {
				return true
			}
			pid = parent[pid]
		}
		return false
	}
	idle := waiters()
	count := map[string]int{}
	for pid, c := range cmdline {
		if _, waiting := idle[pid]; c == "" || waiting || mine(pid) {
			continue
		}
		for _, h := range heavy {
			if strings.Contains(c, h) {
				count[short(c)]++
				break
			}
		}
	}
	var out []string
	for c, n := range count {
		if n > 1 {
			c = fmt.Sprintf("%s (%d processes)", c, n)
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return Heavy(out)
}

// wrappers start or wait for other programs and use no CPU themselves;
// what they run is listed on its own when it is heavy.
var wrappers = []string{"flock", "bash", "sh", "timeout", "nice", "env", "sudo", "sleep", "nohup"}

// Heavy drops the wrappers from a list that Others made: a lock or a
// queue script waiting to run a benchmark does not share the CPUs.
func Heavy(others []string) []string {
	var out []string
	for _, o := range others {
		if !slices.Contains(wrappers, strings.Fields(o + " ")[0]) {
			out = append(out, o)
		}
	}
	return out
}

// short names a command line by its program and first argument, with
// --name, --model or --workers when given: enough to tell what ran.
func short(cmdline string) string {
	f := strings.Fields(cmdline)
	if len(f) > 3 && f[0] == "ip" && f[1] == "netns" && f[2] == "exec" {
		f = f[4:]
	}
	if len(f) == 0 {
		return cmdline
	}
	out := []string{filepath.Base(f[0])}
	if len(f) > 1 && !strings.HasPrefix(f[1], "-") {
		out = append(out, f[1])
	}
	for i := 1; i+1 < len(f); i++ {
		switch f[i] {
		case "--name", "--model", "--workers", "--systems":
			out = append(out, f[i], f[i+1])
		}
	}
	return strings.Join(out, " ")
}

// waitDir holds one file per process waiting in WaitQuiet, named by its
// process id and holding the time it began to wait: a benchmark that waits
// for the machine uses no CPU, so the others do not wait for it, and the
// one that waited longest goes first.
var waitDir = filepath.Join(os.TempDir(), "switchml-waiting")

// waiters are the live processes waiting in WaitQuiet, with the time each
// began to wait (Unix nanoseconds).
func waiters() map[int]int64 {
	ents, err := os.ReadDir(waitDir)
	if err != nil {
		return nil
	}
	out := map[int]int64{}
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(waitDir, e.Name()))
		if err != nil {
			continue
		}
		var since int64
		if _, err := fmt.Sscan(string(b), &since); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", e.Name())); err != nil {
			os.Remove(filepath.Join(waitDir, e.Name())) // a waiter that died
			continue
		}
		out[pid] = since
	}
	return out
}

// ahead lists the waiters that began to wait before this one (or at the
// same time with a lower process id).
func ahead(all map[int]int64, self int, since int64) []string {
	var out []string
	for pid, t := range all {
		if pid != self && (t < since || t == since && pid < self) {
			out = append(out, fmt.Sprintf("process %d (waiting since %s)", pid, time.Unix(0, t).Format(time.TimeOnly)))
		}
	}
	slices.Sort(out)
	return out
}

// WaitQuiet waits, up to max, until no other heavy process runs (Others
// is empty) and no benchmark that began to wait earlier is still waiting,
// checking every few seconds, and returns the heavy processes still
// running when it gives up (nil once the machine is quiet). A measurement
// taken beside another benchmark on a small machine measures both badly;
// say is told what it waits for. While it waits, other benchmarks do not
// count this process as heavy. A max of 0 does not wait.
func WaitQuiet(ctx context.Context, max time.Duration, say func(string)) []string {
	if max <= 0 {
		return Others()
	}
	self, since := os.Getpid(), time.Now().UnixNano()
	mark := filepath.Join(waitDir, fmt.Sprint(self))
	if os.MkdirAll(waitDir, 0o777) == nil && os.WriteFile(mark, []byte(fmt.Sprint(since)), 0o644) == nil {
		defer os.Remove(mark)
	}
	deadline := time.Now().Add(max)
	for {
		others := Others()
		first := ahead(waiters(), self, since)
		if len(others) == 0 && len(first) == 0 {
			return nil
		}
		if say != nil {
			say(fmt.Sprintf("waiting for other heavy processes to end: %s", strings.Join(append(others, first...), "; ")))
		}
		if !time.Now().Before(deadline) {
			return others
		}
		select {
		case <-ctx.Done():
			return others
		case <-time.After(10 * time.Second):
		}
	}
}

// Floats parses a comma-separated list of positive numbers (--rates).
func Floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad value %q: want positive numbers separated by commas", f)
		}
		out = append(out, v)
	}
	return out, nil
}
