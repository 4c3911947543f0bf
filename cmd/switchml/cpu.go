package main

import (
	"syscall"

	"github.com/switchml/switchml-go/benchmarks"
)

type cpuTimes struct{ user, sys float64 }

// cpuUsage is this process's CPU time so far.
func cpuUsage() (cpuTimes, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}, false
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return cpuTimes{user: tv(ru.Utime), sys: tv(ru.Stime)}, true
}

// cpuMeter adds up this process's CPU time over timed regions (the
// allreduce calls), leaving out input generation and verification.
type cpuMeter struct {
	start     cpuTimes
	ok        bool
	user, sys float64
}

func (m *cpuMeter) begin() { m.start, m.ok = cpuUsage() }

func (m *cpuMeter) end() {
	if !m.ok {
		return
	}
	if t, ok := cpuUsage(); ok {
		m.user += t.user - m.start.user
		m.sys += t.sys - m.start.sys
	}
	m.ok = false
}

// report stores the sums in rep.
func (m *cpuMeter) report(rep *benchmarks.WorkerReport) {
	u, s := m.user, m.sys
	rep.CPULoopUserS, rep.CPULoopSysS = &u, &s
}
