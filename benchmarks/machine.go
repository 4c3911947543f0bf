package benchmarks

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// procCPU reads a process's CPU time from /proc/<pid>/stat.
// procsCPU sums procCPU over pids (those that have ended count nothing).
func procsCPU(pids []int) cpuTime {
	var t cpuTime
	for _, pid := range pids {
		if c, ok := procCPU(pid); ok {
			t.User += c.User
			t.Sys += c.Sys
		}
	}
	return t
}

func procCPU(pid int) (cpuTime, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTime{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return cpuTime{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return cpuTime{}, false
	}
	// Fields 14 and 15 of stat; f starts at field 3.
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return cpuTime{}, false
	}
	const clkTck = 100 // USER_HZ, fixed at 100 on Linux
	return cpuTime{User: u / clkTck, Sys: st / clkTck}, true
}

type machineCPU struct{ total, idle, softirq float64 }

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	f := strings.Fields(firstLine(string(b)))
	var m machineCPU
	if len(f) == 0 {
		return m
	}
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		m.total += x
		switch i {
		case 3, 4: // idle, iowait
			m.idle += x
		case 6:
			m.softirq += x
		}
	}
	return m
}

// since returns the busy and softirq fractions of all CPUs between m0 and m.
func (m machineCPU) since(m0 machineCPU) (busy, softirq float64) {
	d := m.total - m0.total
	if d <= 0 {
		return 0, 0
	}
	return (d - (m.idle - m0.idle)) / d, (m.softirq - m0.softirq) / d
}

// Environment records what the numbers depend on: the machine, Go, the
// kernel, the load when it is called and the checkout's commit.
func Environment() map[string]any {
	env := map[string]any{
		"time":   time.Now().UTC().Format(time.RFC3339),
		"go":     runtime.Version(),
		"cpus":   runtime.NumCPU(),
		"goarch": runtime.GOARCH,
	}
	env["loadavg_start"] = loadAvg()
	if h, err := os.Hostname(); err == nil {
		env["hostname"] = h
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		env["kernel"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				env["cpu"] = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(firstLine(string(b))); len(f) > 1 {
			env["memory"] = strings.Join(f[1:], " ")
		}
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		env["commit"] = strings.TrimSpace(string(out))
	}
	return env
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
