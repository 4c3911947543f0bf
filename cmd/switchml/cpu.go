package main

import "github.com/switchml/switchml-go/benchmarks"

type cpuTimes struct{ user, sys float64 }

// cpuUsage is this process's CPU time so far.
func cpuUsage() (cpuTimes, bool) {
	u, s, ok := benchmarks.ProcessCPU()
	return cpuTimes{user: u, sys: s}, ok
}

// cpuMeter is benchmarks.CPUMeter under the names the worker commands use.
type cpuMeter struct{ m benchmarks.CPUMeter }

func (c *cpuMeter) begin()                              { c.m.Begin() }
func (c *cpuMeter) end()                                { c.m.End() }
func (c *cpuMeter) report(rep *benchmarks.WorkerReport) { c.m.Report(rep) }
