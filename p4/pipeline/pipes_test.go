package pipeline_test

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/targets"
	"github.com/switchml/switchml-go/wire"
)

// tofinoPipes is a four-pipe Tofino as the model sees it: the program's
// registers in each pipe, pipe = device port / 128.
func tofinoPipes(t *testing.T) (*pipeline.Pipes, targets.Capabilities) {
	t.Helper()
	kind, err := targets.Lookup(targets.Tofino)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := kind.Capabilities(0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pipeline.NewPipes(pipeline.Config{Slots: 16, MaxElements: 64, MaxWorkers: 32}, 4, caps.PortsPerPipe)
	if err != nil {
		t.Fatal(err)
	}
	return m, caps
}

func workerAddr(rank int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rank + 1)}), 40000)
}

// installJob writes a job's entries to every pipe, as the controller's
// writes reach every pipe through Stratum: ranks on ports, one lane, the
// pool [0, 4).
func installJob(t *testing.T, m *pipeline.Pipes, ports []uint32) {
	t.Helper()
	var reps []switchjob.Replica
	for r, port := range ports {
		reps = append(reps, switchjob.Replica{EgressPort: port, Instance: uint16(r)})
	}
	err := m.Each(func(p *pipeline.Pipeline) error {
		for r := range ports {
			w := switchjob.Worker{JobID: 1, Rank: uint16(r), NumWorkers: uint16(len(ports)), MulticastGroup: 1, PoolBase: 0, PoolSize: 4}
			if err := p.InsertWorker(pipeline.WorkerKey{Addr: workerAddr(r)}, w); err != nil {
				return err
			}
			if err := p.InsertReply(pipeline.ReplyKey{JobID: 1, Rank: uint16(r)}, pipeline.Reply{Addr: workerAddr(r)}); err != nil {
				return err
			}
		}
		return p.InsertMulticastGroup(1, reps)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// contribution is rank's packet for slot 2: 64 values rank+1.
func contribution(t *testing.T, rank int) []byte {
	t.Helper()
	h := wire.Header{Format: wire.FormatCompat, Seq: 1, PacketID: 7, Slot: 2, Elements: 64}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 64 {
		b = binary.BigEndian.AppendUint32(b, uint32(rank+1))
	}
	return b
}

// runJob sends every rank's contribution, then every rank's
// retransmission, each in by its rank's port, and returns the first
// result packet (nil if none came out).
func runJob(t *testing.T, m *pipeline.Pipes, ports []uint32) []byte {
	t.Helper()
	var out pipeline.Output
	for round := 0; round < 2; round++ {
		for r, port := range ports {
			m.Process(port, workerAddr(r), contribution(t, r), &out)
			if len(out.Dests) > 0 {
				return append([]byte(nil), out.Packet...)
			}
		}
	}
	return nil
}

// Without the controller's check, a job whose ranks enter by two pipes
// never completes: each pipe's copy of the slot counts only its own
// ranks, and retransmissions find the slot incomplete in both. The check
// (targets.Capabilities.OnePipe, which the controller runs before it
// places a job) refuses the job instead, naming the ranks, their ports and
// their pipes.
func TestCrossPipeJobNeverCompletesAndIsRefused(t *testing.T) {
	m, caps := tofinoPipes(t)
	ports := []uint32{8, 136, 16} // pipes 0, 1, 0
	installJob(t, m, ports)
	if res := runJob(t, m, ports); res != nil {
		t.Fatalf("a job across pipes 0 and 1 completed (a %d-byte result): the model does not keep registers per pipe", len(res))
	}
	for pipe, want := range map[int]uint64{0: 2, 1: 1} {
		if got := m.Pipe(pipe).Counters()[switchjob.StatAggregated]; got != want {
			t.Errorf("pipe %d aggregated %d contributions, want %d (its own ranks' only)", pipe, got, want)
		}
		if got := m.Pipe(pipe).Counters()[switchjob.StatDropIncompleteRetransmit]; got != want {
			t.Errorf("pipe %d dropped %d retransmissions as incomplete, want %d", pipe, got, want)
		}
	}

	err := caps.OnePipe(map[int]uint32{0: 8, 1: 136, 2: 16})
	if err == nil {
		t.Fatal("OnePipe took ranks on ports 8, 136 and 16")
	}
	for _, want := range []string{"2 pipes", "pipe 0: rank 0 on port 8, rank 2 on port 16", "pipe 1: rank 1 on port 136", "device port / 128"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}

// A job whose ranks all enter by one pipe (here pipe 1) is taken by the
// check and completes in that pipe with the right sum; the other pipes
// see nothing.
func TestCrossPipeJobInOnePipeCompletes(t *testing.T) {
	m, caps := tofinoPipes(t)
	ports := []uint32{136, 144, 255} // all pipe 1
	if err := caps.OnePipe(map[int]uint32{0: 136, 1: 144, 2: 255}); err != nil {
		t.Fatalf("OnePipe refused a job in one pipe: %v", err)
	}
	installJob(t, m, ports)
	res := runJob(t, m, ports)
	if res == nil {
		t.Fatal("a job in one pipe did not complete")
	}
	_, payload, err := wire.Parse(res)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if v := int32(binary.BigEndian.Uint32(payload[4*i:])); v != 1+2+3 {
			t.Fatalf("sum[%d] = %d, want 6", i, v)
		}
	}
	for pipe := 0; pipe < m.Len(); pipe++ {
		if got, want := m.Pipe(pipe).Counters()[switchjob.StatMulticast], map[bool]uint64{true: 1}[pipe == 1]; got != want {
			t.Errorf("pipe %d multicast %d results, want %d", pipe, got, want)
		}
	}
	// A switch with one pipe takes any ports.
	if err := (targets.Capabilities{}).OnePipe(map[int]uint32{0: 8, 1: 136}); err != nil {
		t.Errorf("a switch without pipes refused ports 8 and 136: %v", err)
	}
}
