package local_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/wire"
)

// linkProxy forwards TCP connections to a target until it is cut: then it
// closes every connection it forwards, and closes new ones at once until
// it is restored, as a link that went down would.
type linkProxy struct {
	lis    net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

// startLinkProxy forwards a loopback port to target until the test ends.
func startLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{lis: lis, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		lis.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *linkProxy) addr() string { return p.lis.Addr().String() }

func (p *linkProxy) serve() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if p.down || err != nil {
			p.mu.Unlock()
			c.Close()
			if up != nil {
				up.Close()
			}
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cut breaks every forwarded connection and refuses new ones.
func (p *linkProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore forwards new connections again.
func (p *linkProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// gaugeReaches waits until the gauge name in reg is at least want.
func gaugeReaches(ctx context.Context, reg *prometheus.Registry, name string, want float64) error {
	for {
		mfs, err := reg.Gather()
		if err != nil {
			return err
		}
		var got float64
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) == 1 {
				got = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		if got >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is %v, want %v: %w", name, got, want, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sprayAll sends one contribution of call seq to every slot of a pool of
// slots, in both sets, from conn to the switch at dp; it returns how many
// it sent.
func sprayAll(conn net.PacketConn, dp net.Addr, slots int, seq uint32) (int, error) {
	vals := make([]int32, 64)
	for i := range vals {
		vals[i] = 1 << 20
	}
	sent := 0
	var pkt []byte
	for slot := range slots {
		for set := range uint8(2) {
			h := wire.Header{Format: wire.FormatCompat, Seq: seq, PacketID: uint32(slot), Set: set, Slot: uint32(slot), Elements: len(vals)}
			var err error
			if pkt, err = h.Append(pkt[:0]); err != nil {
				return sent, err
			}
			pkt = wire.AppendPayload(pkt, vals)
			if _, err := conn.WriteTo(pkt, dp); err != nil {
				return sent, err
			}
			sent++
		}
	}
	return sent, nil
}

// TestSwitchLinkDropKeepsJobsApart: the controller's P4Runtime link to the
// switch breaks under a running job and a job whose rank, aborted with the
// link, goes on sending from its lane address; a job registers while the
// link is down. The switch kept its tables, but once the link is back the
// waiting job is placed only where nothing of the ended jobs is left: the
// switch holds none of their lane addresses, every job it holds is apart
// from the new job's slots and multicast group, the new job's install meets
// no entry already there, and its sums are exact while the ended rank's
// packets keep arriving, refused as from no worker.
func TestSwitchLinkDropKeepsJobsApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const slots, window, elements = 64, 16, 4096
	quiet := slog.New(slog.DiscardHandler)
	sw, err := softswitch.Listen(softswitch.Config{Logger: quiet, Pipeline: pipeline.Config{Slots: slots, MaxElements: 256, MaxWorkers: 8}})
	if err != nil {
		t.Fatal(err)
	}
	target, err := controller.TargetFor(controller.KindSoftswitch, 256)
	if err != nil {
		t.Fatal(err)
	}
	link := startLinkProxy(t, sw.P4RuntimeAddr())
	reg := prometheus.NewRegistry()
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ready := make(chan string, 1)
	ran := make(chan error, 1)
	wg.Go(func() { _ = sw.Serve(runCtx) })
	wg.Go(func() {
		ran <- controller.Run(runCtx, controller.Config{Target: link.addr(), ElectionID: 5, Listen: "127.0.0.1:0", Dataplane: sw.DataplaneAddr(), Slots: slots,
			Switch: target, Logger: quiet, Metrics: reg, JobLimits: controller.JobLimits{MaxSlotsPerClient: -1},
			Ready: func(a net.Addr) { ready <- a.String() }})
	})
	t.Cleanup(func() {
		stop()
		wg.Wait()
		if err := <-ran; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	var ctl string
	select {
	case ctl = <-ready:
	case err := <-ran:
		ran <- err
		t.Fatalf("controller: %v", err)
	}
	conn, err := grpc.NewClient(ctl, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := jobpb.NewJobServiceClient(conn)

	// The job whose rank goes on sending: one rank, on a lane socket of
	// the test's, placed first (at slot 0).
	lane, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lane.Close()
	ended, err := jobs.Register(ctx, &jobpb.RegisterRequest{Job: "ended", WorldSize: 1, Lanes: 1, Window: window, Elements: 64,
		LaneAddresses: []string{lane.LocalAddr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := jobs.Watch(ctx, &jobpb.WatchRequest{Job: "ended", SessionId: ended.GetSessionId(), RankSecret: ended.GetRankSecret()})
	if err == nil {
		_, err = lease.Recv()
	}
	if err != nil {
		t.Fatalf("lease of the ended job: %v", err)
	}
	// The running job.
	running := joinAll(t, ctx, jobConfigs(ctl, "running", 2, 1, window, ""))
	mustRound(t, ctx, running, 0, elements)
	var heldAddrs []string
	for _, j := range controllerStatus(t, ctx, ctl, false).GetJobs() {
		for _, r := range j.GetRanks() {
			heldAddrs = append(heldAddrs, r.GetLaneAddresses()...)
		}
	}
	if len(heldAddrs) != 3 {
		t.Fatalf("lane addresses before the cut %v, want the 3 of the two jobs", heldAddrs)
	}

	link.cut()
	if ev, err := lease.Recv(); err != nil || !ev.GetAborted() {
		t.Fatalf("the ended job's lease after the cut: %v, %v; want it aborted", ev, err)
	}
	// Its rank goes on sending, into what the switch still holds of it.
	dp := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(sw.DataplaneAddr()))
	sprayed := make(chan error, 1)
	spraying, stopSpray := context.WithCancel(ctx)
	defer stopSpray()
	go func() {
		for seq := uint32(0); spraying.Err() == nil; seq++ {
			if _, err := sprayAll(lane, dp, slots, seq); err != nil {
				sprayed <- err
				return
			}
			select {
			case <-spraying.Done():
			case <-time.After(time.Millisecond):
			}
		}
		sprayed <- nil
	}()

	// The next job registers while the link is down, and waits.
	type joinResult struct {
		sess []*switchml.Session
		errs []error
	}
	joined := make(chan joinResult, 1)
	go func() {
		sess, errs := joinEach(ctx, jobConfigs(ctl, "next", 2, 1, window, ""))
		joined <- joinResult{sess, errs}
	}()
	if err := gaugeReaches(ctx, reg, "switchml_controller_registrations_waiting_for_switch", 2); err != nil {
		t.Fatal(err)
	}
	link.restore()
	res := <-joined
	for _, s := range res.sess {
		if s != nil {
			defer s.Close()
		}
	}
	for r, err := range res.errs {
		if err != nil {
			t.Fatalf("rank %d of the job that waited for the link: %v", r, err)
		}
	}

	var next *jobpb.JobStatus
	for _, j := range controllerStatus(t, ctx, ctl, false).GetJobs() {
		if j.GetName() == "next" {
			next = j
		}
	}
	if next == nil || next.GetState() != "active" {
		t.Fatalf("the job that waited for the link: %v, want it active", next)
	}
	reader, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.P4RuntimeAddr(), ElectionID: 2, YieldPrimary: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	held, err := reader.ReadPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var nextGroup uint16
	for _, p := range held {
		if p.JobID == next.GetJobId() {
			nextGroup = p.Group
		}
	}
	if nextGroup == 0 {
		t.Fatalf("the switch holds no entries of the new job (switch job %d): %+v", next.GetJobId(), held)
	}
	lo, hi := next.GetPoolBase(), next.GetPoolBase()+next.GetPoolSize()
	for _, p := range held {
		for _, w := range p.Workers {
			if slices.Contains(heldAddrs, w.Addr.String()) {
				t.Errorf("the switch still takes %v, a lane of a job that ended with the link, as rank %d of switch job %d", w.Addr, w.Rank, p.JobID)
			}
		}
		if p.JobID == next.GetJobId() {
			continue
		}
		if p.PoolBase < hi && lo < p.PoolBase+p.PoolSize || p.Group == nextGroup {
			t.Errorf("switch job %d holds slots [%d, %d) and group %d; the new job got [%d, %d) and group %d",
				p.JobID, p.PoolBase, p.PoolBase+p.PoolSize, p.Group, lo, hi, nextGroup)
		}
	}

	// Its sums are exact while the ended rank keeps sending.
	for k := 1; k <= 4; k++ {
		mustRound(t, ctx, res.sess, k, elements)
	}
	stopSpray()
	if err := <-sprayed; err != nil {
		t.Fatalf("sending from the ended job's lane: %v", err)
	}
	// And its packets are refused, as from no worker.
	before := sw.Counters()[switchjob.StatDropNotWorker]
	n, err := sprayAll(lane, dp, slots, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitCounter(ctx, sw, switchjob.StatDropNotWorker, before+uint64(n)); err != nil {
		t.Fatalf("the ended job's %d packets after the new job ran: %v", n, err)
	}
	if errs := int32Round(t, ctx, running, 5, elements); !errors.Is(errs[0], switchml.ErrAborted) {
		t.Fatalf("the running job after the cut: %v, want it aborted", errs)
	}
}
