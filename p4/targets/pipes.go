package targets

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrPipes is a job whose ranks enter the switch by more than one pipe,
// whose contributions would never meet.
var ErrPipes = errors.New("the job's ranks span pipes")

// PipeOf is the pipe of a device port: 0 on a switch with one pipe.
func (c Capabilities) PipeOf(port uint32) int {
	if c.PortsPerPipe <= 0 {
		return 0
	}
	return int(port) / c.PortsPerPipe
}

// maxRanksNamed bounds the ranks OnePipe names per pipe, so that the
// message of a large job stays readable.
const maxRanksNamed = 4

// OnePipe refuses a job whose ranks sit on ports of more than one pipe,
// naming each pipe with its ranks and their ports. ports maps each rank
// to the device port that reaches it. A switch with one pipe takes every
// job.
func (c Capabilities) OnePipe(ports map[int]uint32) error {
	if c.PortsPerPipe <= 0 {
		return nil
	}
	byPipe := map[int][]int{}
	for rank, port := range ports {
		byPipe[c.PipeOf(port)] = append(byPipe[c.PipeOf(port)], rank)
	}
	if len(byPipe) < 2 {
		return nil
	}
	pipes := make([]int, 0, len(byPipe))
	for p := range byPipe {
		pipes = append(pipes, p)
	}
	slices.Sort(pipes)
	parts := make([]string, len(pipes))
	for i, p := range pipes {
		ranks := byPipe[p]
		slices.Sort(ranks)
		var named []string
		for _, r := range ranks[:min(len(ranks), maxRanksNamed)] {
			named = append(named, fmt.Sprintf("rank %d on port %d", r, ports[r]))
		}
		if more := len(ranks) - maxRanksNamed; more > 0 {
			named = append(named, fmt.Sprintf("%d more", more))
		}
		parts[i] = fmt.Sprintf("pipe %d: %s", p, strings.Join(named, ", "))
	}
	return fmt.Errorf("%w: %d pipes (%s): each has its own registers (pipe = device port / %d): cable the job to one pipe (docs/tofino.md)",
		ErrPipes, len(pipes), strings.Join(parts, "; "), c.PortsPerPipe)
}
