package softswitch_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/wire"
)

// TestNoLoopBetweenSwitches joins two software switches, each with its
// own controller, the way a hostile user can: a one-rank job on A whose
// lane address is B's data plane, and one on B whose lane is A's. One
// packet forged with B's data-plane address as its source, sent to A,
// used to start an endless exchange: A's result is a contribution of B's
// job, B's result looks to A like a retransmission of its completed use,
// and each switch answered the other's answer for as long as the jobs
// lived. Now B refuses A's result (it is marked as one) and nothing more
// moves: neither switch answers a retransmission it was not sent, and a
// neighbour job on A sums exactly. Both header layouts.
func TestNoLoopBetweenSwitches(t *testing.T) {
	for _, format := range []jobpb.Format{jobpb.Format_FORMAT_COMPAT, jobpb.Format_FORMAT_EXTENDED} {
		t.Run(format.String(), func(t *testing.T) { testNoLoop(t, format) })
	}
}

func testNoLoop(t *testing.T, format jobpb.Format) {
	// The forged packet needs a raw socket: only the kernel's own UDP
	// sockets may send from a port another socket holds.
	raw, err := net.ListenPacket("ip4:udp", "127.0.0.1")
	if err != nil {
		t.Skipf("forging a UDP source port needs a raw socket (CAP_NET_RAW): %v", err)
	}
	defer raw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := local.Options{Slots: 512, MaxElements: 256, MaxWorkers: 8, MaxSlotsPerClient: -1}
	a, err := local.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := local.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dataA, dataB := netip.MustParseAddrPort(a.DataplaneAddr()), netip.MustParseAddrPort(b.DataplaneAddr())

	// The crossed jobs, each holding its lease for the whole test.
	jobA := crossedJob(t, ctx, a.ControllerAddr(), dataB, format)
	crossedJob(t, ctx, b.ControllerAddr(), dataA, format)

	// The forged contribution to A's crossed job, "from" B.
	h := wire.Header{Format: wire.FormatExtended, Seq: 1, PacketID: 1, Slot: jobA.GetPoolBase(), Elements: 64}
	if format == jobpb.Format_FORMAT_COMPAT {
		h.Format = wire.FormatCompat
	}
	pkt, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	pkt = wire.AppendPayload(pkt, make([]int32, h.Elements))
	udp := binary.BigEndian.AppendUint16(nil, dataB.Port())
	udp = binary.BigEndian.AppendUint16(udp, dataA.Port())
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(pkt)))
	udp = append(udp, 0, 0) // no checksum
	if _, err := raw.WriteTo(append(udp, pkt...), &net.IPAddr{IP: dataA.Addr().AsSlice()}); err != nil {
		t.Fatalf("sending the forged packet: %v", err)
	}

	// Wait for A's result to reach B (B counts a packet from A), then
	// run a whole neighbour job on A: a loop, had it started, would keep
	// both switches answering each other all along.
	waitFor(t, ctx, "B to receive A's result", func() bool {
		c := b.Counters()
		return c[switchjob.StatReceived] > 0
	})
	retransmits := neighbourJob(t, ctx, a.ControllerAddr(), format == jobpb.Format_FORMAT_EXTENDED)

	ca, cb := a.Counters(), b.Counters()
	t.Logf("A: %v; B: %v", counterSummary(ca), counterSummary(cb))
	if n := cb[switchjob.StatRetransmitReply]; n > 1 {
		t.Errorf("B answered %d retransmissions, want at most 1: the switches answer each other's results", n)
	}
	if n := ca[switchjob.StatRetransmitReply]; n > 1+retransmits {
		t.Errorf("A answered %d retransmissions, its neighbour job sent %d: the switches answer each other's results", n, retransmits)
	}
	if n := cb[switchjob.StatDropResult]; n != 1 {
		t.Errorf("B refused %d of A's results as contributions, want 1", n)
	}
}

// crossedJob registers a one-rank job on the controller at ctl whose one
// lane address is lane, another switch's data plane, and holds its lease
// until the test ends.
func crossedJob(t *testing.T, ctx context.Context, ctl string, lane netip.AddrPort, format jobpb.Format) *jobpb.RegisterResponse {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+ctl, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	jobs := jobpb.NewJobServiceClient(conn)
	resp, err := jobs.Register(ctx, &jobpb.RegisterRequest{Job: "crossed", Rank: 0, WorldSize: 1, Lanes: 1, Window: 4, Elements: 64,
		Format: format, LaneAddresses: []string{lane.String()}, Token: "crossed"}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("registering a job whose lane is another switch's data plane %v: %v", lane, err)
	}
	leaseCtx, end := context.WithCancel(ctx)
	t.Cleanup(end)
	watch, err := jobs.Watch(leaseCtx, &jobpb.WatchRequest{Job: "crossed", Rank: 0, SessionId: resp.GetSessionId(), JobId: resp.GetJobId(), Token: "crossed", RankSecret: resp.GetRankSecret()})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := watch.Recv(); err != nil || ev.GetAborted() {
		t.Fatalf("lease of the crossed job: %v %v", ev, err)
	}
	return resp
}

// neighbourJob runs a two-rank job of int32 allreduces on the controller
// at ctl, checks every sum exactly and returns the packets its ranks
// sent again after a timeout.
func neighbourJob(t *testing.T, ctx context.Context, ctl string, extended bool) uint64 {
	t.Helper()
	const n, size, ops = 2, 20000, 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	retransmits := make([]uint64, n)
	for r := range n {
		wg.Go(func() {
			sess, err := switchml.Join(ctx, switchml.Config{Controller: ctl, Job: "neighbour", Rank: r, Workers: n,
				PacketElements: 64, Extended: extended, JoinTimeout: 30 * time.Second})
			if err != nil {
				errs[r] = fmt.Errorf("rank %d join: %w", r, err)
				return
			}
			defer sess.Close()
			x := make([]int32, size)
			for op := range ops {
				for i := range x {
					x[i] = int32(i*(r+1) + op)
				}
				if err := sess.AllReduceInt32(ctx, x); err != nil {
					errs[r] = fmt.Errorf("rank %d op %d: %w", r, op, err)
					return
				}
				for i, v := range x {
					if want := int32(3*i + 2*op); v != want {
						errs[r] = fmt.Errorf("rank %d op %d: sum[%d] = %d, want %d", r, op, i, v, want)
						return
					}
				}
			}
			retransmits[r] = sess.Stats().Retransmits
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return retransmits[0] + retransmits[1]
}

// waitFor polls cond until it holds, failing the test when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

func counterSummary(c [switchjob.NumStats]uint64) string {
	s := ""
	for i, v := range c {
		if v != 0 {
			s += fmt.Sprintf(" %s=%d", switchjob.Stat(i), v)
		}
	}
	return s
}
