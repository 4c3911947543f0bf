package pipeline

import (
	"fmt"
	"net/netip"

	"github.com/switchml/switchml-go/p4/switchjob"
)

// Pipes is a switch with several pipes, as a Tofino has 2 or 4: the
// program runs in each, and each has its own registers. The control
// plane writes tables, multicast groups and registers to every pipe (as
// Stratum does, to all pipes of the program's scope); a packet is
// processed by the pipe of the port it entered by, and a recirculated
// packet stays in that pipe. So the slots of a job whose ranks enter by
// two pipes exist twice, and each copy sees only part of the
// contributions.
type Pipes struct {
	portsPerPipe int
	pipes        []*Pipeline
}

// NewPipes returns a switch of n pipes with the configuration cfg each,
// whose device port p belongs to pipe p / portsPerPipe.
func NewPipes(cfg Config, n, portsPerPipe int) (*Pipes, error) {
	if n < 1 || portsPerPipe < 1 {
		return nil, fmt.Errorf("pipeline: NewPipes(%d pipes, %d ports per pipe): want at least one of each", n, portsPerPipe)
	}
	m := &Pipes{portsPerPipe: portsPerPipe}
	for range n {
		p, err := New(cfg)
		if err != nil {
			return nil, err
		}
		m.pipes = append(m.pipes, p)
	}
	return m, nil
}

// Len is the number of pipes.
func (m *Pipes) Len() int { return len(m.pipes) }

// Pipe returns pipe i, for reading its registers and counters.
func (m *Pipes) Pipe(i int) *Pipeline { return m.pipes[i] }

// PipeOf is the pipe of a device port, and false for a port beyond the
// last pipe.
func (m *Pipes) PipeOf(port uint32) (int, bool) {
	i := int(port / uint32(m.portsPerPipe))
	return i, i < len(m.pipes)
}

// Each applies a control-plane write to every pipe, stopping at the first
// error.
func (m *Pipes) Each(write func(*Pipeline) error) error {
	for i, p := range m.pipes {
		if err := write(p); err != nil {
			return fmt.Errorf("pipe %d: %w", i, err)
		}
	}
	return nil
}

// Process runs a packet that entered by device port through that port's
// pipe. A port beyond the last pipe reaches no pipe: nothing goes out and
// out.Reason is StatDropNotWorker.
func (m *Pipes) Process(port uint32, src netip.AddrPort, pkt []byte, out *Output) {
	i, ok := m.PipeOf(port)
	if !ok {
		out.Packet, out.Dests, out.Reason = out.Packet[:0], out.Dests[:0], switchjob.StatDropNotWorker
		return
	}
	m.pipes[i].Process(src, pkt, out)
}
