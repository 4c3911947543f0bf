package switchml

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/wire"
)

// executor runs a session's calls, one at a time, on the goroutine of
// Session.run: the switch's lanes (switchLanes), the ring (ringSum), or
// the switch's lanes ready to move to the ring (lossGuard).
type executor interface {
	execute(h *Handle) error
}

// switchLanes is the executor that sums on the switch: a laneDriver per
// lane, each with its share of the call.
type switchLanes struct {
	cfg   Config
	st    *state
	job   *jobClient
	lanes []*laneDriver
	// seq numbers the calls, from the controller's first.
	seq uint32
	// sparse is the sparse mode's record of tensor sizes (Config.Sparse).
	sparse sparseBook

	trace     *tracer
	durations prometheus.Histogram
}

// openLanes opens a socket per lane on bind, each with its own fault
// injector, and returns their addresses.
func openLanes(cfg Config, bind string) (*switchLanes, []string, error) {
	sw := &switchLanes{cfg: cfg}
	addrs := make([]string, cfg.Lanes)
	var xdpWarned bool
	xdpWarn := func(format string, args ...any) { // once, not once per lane
		if !xdpWarned {
			xdpWarned = true
			slog.Warn("switchml: "+fmt.Sprintf(format, args...), "job", cfg.Job, "rank", cfg.Rank, "bind", bind)
		}
	}
	for i := 0; i < cfg.Lanes; i++ {
		c, err := listenLane(cfg.Transport, bind, cfg.Window, xdpWarn)
		if err != nil {
			sw.close()
			return nil, nil, fmt.Errorf("switchml: lane %d socket on Config.Bind %s: %w", i, bind, err)
		}
		faults := cfg.Faults
		faults.Seed += uint64(i) * 7919 // lanes draw different faults
		inj, err := transport.NewInjector(faults)
		if err != nil {
			c.Close()
			sw.close()
			return nil, nil, err
		}
		sw.lanes = append(sw.lanes, &laneDriver{conn: c, faults: inj})
		addrs[i] = c.LocalAddr().String()
	}
	return sw, addrs, nil
}

// listenLane opens a lane's socket on a free port of the bind address,
// over the transport of that name (one that cannot be used falls back to
// UDP, telling logf why).
func listenLane(kind, bind string, window int, logf func(format string, args ...any)) (transport.PacketConn, error) {
	t, err := transport.Lookup(kind)
	if err != nil {
		return nil, err
	}
	return t.Lane(transport.LaneSpec{Bind: bind, Window: window, Logf: logf})
}

// start gives each lane its protocol engine on the slots the controller
// granted (resp) and the switch's address for it (peers, from grant); cfg
// has the packet size settled.
func (sw *switchLanes) start(cfg Config, resp *jobpb.RegisterResponse, peers []netip.AddrPort, st *state, job *jobClient, trace *tracer, durations prometheus.Histogram) error {
	sw.cfg, sw.st, sw.job, sw.trace, sw.durations = cfg, st, job, trace, durations
	sw.seq = resp.FirstSeq
	wf := wire.FormatCompat
	if cfg.Extended {
		wf = wire.FormatExtended
	}
	for i, l := range sw.lanes {
		eng, err := engine.NewLane(engine.Config{
			Rank: cfg.Rank, NumWorkers: cfg.Workers, Format: wf, Elements: cfg.PacketElements,
			Window: cfg.Window, SlotBase: resp.PoolBase + uint32(i*cfg.Window),
			// The engine gives up after GiveUp without a result, a bound
			// in time that a loaded machine's stalls do not trip; the
			// simulator runs the same policy.
			Timeout: cfg.Timeout, GiveUp: cfg.GiveUp,
			Key: resp.GetAuthKey(), Lane: uint8(i), Sparse: cfg.Sparse,
		})
		if err != nil {
			return fmt.Errorf("switchml: lane %d: %w", i, err)
		}
		l.init(eng, peers[i])
		l.trace, l.tid = trace, i+1
	}
	return nil
}

// grant checks the slots and switch addresses the controller granted
// against cfg and returns the switch's address for each lane: the one
// data plane, or, on a software switch of several data-plane shards, the
// shard that serves the lane.
func grant(cfg Config, resp *jobpb.RegisterResponse) ([]netip.AddrPort, error) {
	if resp.PoolSize < uint32(cfg.Lanes*cfg.Window) {
		return nil, fmt.Errorf("switchml: the controller granted %d slots: the job needs Config.Lanes*Config.Window = %d", resp.PoolSize, cfg.Lanes*cfg.Window)
	}
	n := cfg.Lanes
	dp, err := netip.ParseAddrPort(resp.SwitchDataplane)
	if err != nil {
		return nil, fmt.Errorf("switchml: bad switch address %q from the controller: %v", resp.SwitchDataplane, err)
	}
	peers := make([]netip.AddrPort, n)
	for i := range peers {
		peers[i] = dp
	}
	lds := resp.GetLaneDataplanes()
	if len(lds) == 0 {
		return peers, nil
	}
	if len(lds) != n {
		return nil, fmt.Errorf("switchml: %d lane data-plane addresses from the controller for Config.Lanes %d: the controller and this worker disagree on the job", len(lds), n)
	}
	for i, a := range lds {
		if peers[i], err = netip.ParseAddrPort(a); err != nil {
			return nil, fmt.Errorf("switchml: bad data-plane address %q for lane %d from the controller: %v", a, i, err)
		}
	}
	return peers, nil
}

// transport is what the lanes move packets through (Session.Transport).
func (sw *switchLanes) transport() string {
	if len(sw.lanes) == 0 {
		return TransportUDP
	}
	// Every lane opened the same transport; one that moves its packets
	// over UDP (fell back, or has not reached a peer's inbox) makes it UDP.
	carries := transport.CarrierOf(sw.lanes[0].conn)
	for _, l := range sw.lanes[1:] {
		if transport.CarrierOf(l.conn) != carries {
			return TransportUDP
		}
	}
	return carries
}

// close releases the lanes' sockets.
func (sw *switchLanes) close() {
	for _, l := range sw.lanes {
		l.conn.Close()
	}
}

// execute runs a call on the switch: each lane drives its share.
func (sw *switchLanes) execute(h *Handle) error {
	err := sw.reduce(h)
	if err != nil && !sw.cfg.FallbackOnLoss && switchLoss(err) {
		// Every call the loss fails names the option, also one made after
		// the controller said the switch was lost.
		err = configField.Errorf("%w (to move to the ring when the switch is lost, set {FallbackOnLoss} with {Fallback} %q)", err, FallbackRing)
	}
	return err
}

// reduce is execute, without the hint.
func (sw *switchLanes) reduce(h *Handle) error {
	st := sw.st
	st.mu.Lock()
	if st.broken != nil {
		st.mu.Unlock()
		return st.broken
	}
	seq := sw.seq
	sw.seq++
	dense := sw.cfg.Sparse && sw.sparse.dense(h.n, sw.cfg.SparseCrossover)
	st.mu.Unlock()
	begin := time.Now()
	ranges := engine.SplitLanes(h.n, len(sw.lanes), h.op.PerPacket(sw.cfg.PacketElements))
	errs := make(chan error, len(sw.lanes))
	active := 0
	for i, r := range ranges {
		if r.Len == 0 {
			continue
		}
		op := h.op.Slice(r)
		op.Seq, op.Dense = seq, dense
		active++
		go func(l *laneDriver) { errs <- l.run(h.ctx, st.quit, st.aborted, op) }(sw.lanes[i])
	}
	var first error
	for i := 0; i < active; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	reported := false
	if errors.Is(first, ErrTimeoutBudget) && st.departure(h.ctx, "allreduce") == nil {
		// The switch stopped answering this rank: lost, or waiting for a
		// rank that stopped sending? The controller looks before it says.
		var verdict error
		if reported, verdict = sw.job.verdictOnGiveUp(first); verdict != nil {
			st.abort(verdict)
			first = verdict
		}
	}
	held := 0.0
	if sw.cfg.Sparse && first == nil {
		held = sw.held(h, dense, ranges)
	}
	end := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	before := st.stats
	if sw.cfg.Sparse && first == nil {
		sw.sparse.done(h.n, held)
		if dense {
			st.stats.DenseCalls++
		}
	}
	sw.count(&st.stats)
	if sw.trace != nil {
		detail := ""
		if first != nil {
			detail = first.Error()
		}
		sw.trace.span(0, "allreduce", "allreduce", detail, begin, end,
			traceArg{"seq", int64(seq)}, traceArg{"elements", int64(h.n)},
			traceArg{"packets", int64(st.stats.Packets - before.Packets)},
			traceArg{"retransmits", int64(st.stats.Retransmits - before.Retransmits)},
			traceArg{"queued_us", begin.Sub(h.queued).Microseconds()})
	}
	if first != nil {
		st.stats.Failed++
		if errors.Is(first, errAborted) {
			return st.broken
		}
		var nf *quant.NonFiniteError
		if errors.As(first, &nf) {
			// A lane found it in its share: name the tensor's first.
			if err := h.op.DType.Check(h.op.Data); err != nil {
				first = fmt.Errorf("switchml: input not finite: %w", err)
			}
		}
		// Some lane stopped mid-op: its slots are out of step with the
		// other workers, so no later call can be correct; the others
		// learn it through the controller.
		if st.broken == nil {
			st.broken = fmt.Errorf("switchml: session unusable after a failed allreduce (close it and join again): %w", first)
			reason := first
			if why := st.departure(h.ctx, "allreduce"); why != nil {
				reason = why // the caller stopped it: say so, not what the lanes saw
			}
			if !reported {
				sw.job.reportAsync(reason)
			}
		}
		return first
	}
	st.stats.AllReduces++
	st.stats.Elements += uint64(h.n)
	sw.durations.Observe(end.Sub(begin).Seconds())
	return nil
}

// count sets the lanes' counters in stats: packets, bytes,
// retransmissions, timeouts and the largest round-trip estimates.
func (sw *switchLanes) count(stats *Stats) {
	stats.Packets, stats.Retransmits, stats.Timeouts, stats.SentBytes, stats.RTT, stats.Timeout = 0, 0, 0, 0, 0, 0
	for _, l := range sw.lanes {
		ls := l.eng.Stats()
		stats.Packets += ls.Sent + ls.Retransmits
		stats.Retransmits += ls.Retransmits
		stats.Timeouts += ls.Timeouts
		stats.SentBytes += l.bytes
		rtt, rto := l.eng.RTT()
		stats.RTT, stats.Timeout = max(stats.RTT, rtt), max(stats.Timeout, rto)
	}
}

// held is the share of blocks some rank held in the call of h that the
// lanes ran on ranges: counted by the lanes for a sparse call, from the
// result for a dense one.
func (sw *switchLanes) held(h *Handle, dense bool, ranges []engine.Range) float64 {
	if dense {
		return heldInResult(h.op, h.n, max(sw.cfg.PacketElements, 1))
	}
	held, blocks := 0, 0
	for i, l := range sw.lanes {
		if ranges[i].Len == 0 {
			continue // no op: the lane's figures are an earlier call's
		}
		if hb, b, ok := l.eng.SparseBlocks(); ok {
			held, blocks = held+hb, blocks+b
		}
	}
	if blocks == 0 {
		return 0
	}
	return float64(held) / float64(blocks)
}

// switchLoss reports whether err means the switch is gone.
func switchLoss(err error) bool {
	return errors.Is(err, ErrSwitchLost) || errors.Is(err, ErrTimeoutBudget)
}
