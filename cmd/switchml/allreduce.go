package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

func init() {
	register("allreduce", "one worker of an allreduce job: fills a tensor from --seed and its rank, runs --iters allreduces and verifies the global sum", runAllReduce)
}

// minBarrierWait is the least a run's barrier waits for the other ranks.
const minBarrierWait = 10 * time.Second

// allreduceFlags names the flag that sets each switchml.Config field.
var allreduceFlags = map[string]string{
	"Controller": "controller", "Job": "job", "Rank": "rank", "Workers": "workers", "Token": "token", "Bind": "bind",
	"Lanes": "lanes", "Transport": "transport", "Window": "window", "PacketElements": "packet-elements", "Extended": "extended", "Auth": "auth",
	"Timeout": "timeout", "JoinTimeout": "join-timeout", "ConnectTimeout": "connect-timeout", "GiveUp": "give-up",
	"Faults.Drop": "drop", "Faults.Duplicate": "duplicate", "Faults.Reorder": "reorder", "Trace": "trace", "TraceEvents": "trace-events",
	"Sparse": "sparse", "SparseCrossover": "sparse-crossover", "WireBits": "wire-bits", "Fallback": "fallback", "FallbackOnLoss": "fallback-on-loss", "FallbackListen": "fallback-listen", "FallbackPeers": "fallback-peers",
}

// allreduceNames writes a Config field as this command's users set it:
// its flag, and for the token every way it is given.
func allreduceNames(f string) string {
	if f == "Token" {
		return "--token-file or $SWITCHML_TOKEN"
	}
	return field.Flags(allreduceFlags)(f)
}

func runAllReduce(ctx context.Context, args []string) error {
	fs := newFlags("allreduce", "[--controller ADDR] [--job NAME] [--rank R] [--workers N] [flags]")
	var cfg switchml.Config
	fs.StringVar(&cfg.Controller, "controller", switchml.DefaultController, "controller gRPC address")
	fs.StringVar(&cfg.Job, "job", "demo", "job name, the same on every rank")
	fs.IntVar(&cfg.Rank, "rank", 0, "this worker's rank, 0..workers-1")
	fs.IntVar(&cfg.Workers, "workers", 1, "number of workers in the job")
	fs.StringVar(&cfg.Token, "token", "", "the job owner's secret, the same on every rank: the controller refuses this job's name to clients without it. On the command line every local user can read it (ps, /proc): prefer --token-file or $SWITCHML_TOKEN (which --token overrides)")
	tokenFile := fs.String("token-file", "", "read the job owner's secret from this `FILE` (a trailing newline is dropped) instead of --token or $SWITCHML_TOKEN")
	fs.StringVar(&cfg.Bind, "bind", "", "local IP the switch sees for this worker (default: the address that reaches the controller)")
	fs.IntVar(&cfg.Lanes, "lanes", 0, fmt.Sprintf("parallel lanes (sockets) per worker (0: %d; every rank of a job needs the same)", switchml.DefaultLanes))
	fs.StringVar(&cfg.Transport, "transport", switchml.TransportUDP, `how lanes move packets: "udp" (kernel sockets), "afxdp" (AF_XDP sockets on the --bind address's interface, bypassing the kernel's stack; falls back to UDP, saying why, where it cannot; Linux, root) or "shm" (UDP sockets whose datagrams to a switch on this host started with --transport shm go through shared memory; Linux)`)
	fs.IntVar(&cfg.Window, "window", 0, fmt.Sprintf("packets in flight per lane (0: %d; with --transport shm, 1 lane of 256 measured best)", switchml.DefaultWindow))
	fs.IntVar(&cfg.PacketElements, "packet-elements", 0, "int32 values per packet (32/64/128/256; up to 2048 with --extended); 0: what the switch takes (256 on the software switch, 64 on the P4 programs)")
	fs.BoolVar(&cfg.Extended, "extended", false, "use the software switch's extended header (needed above 256 values per packet or 32 workers)")
	fs.BoolVar(&cfg.Sparse, "sparse", false, "block-sparse mode: send only the packets' blocks that are not all zero (every rank of a job needs the same; extended header, software switch)")
	fs.Float64Var(&cfg.SparseCrossover, "sparse-crossover", 0, fmt.Sprintf("with --sparse: the share of a tensor's blocks held by some rank from which its size goes dense (0: %v; above 1: never)", switchml.DefaultSparseCrossover))
	fs.IntVar(&cfg.WireBits, "wire-bits", 0, "how wide float values travel: 0 (float16 and bfloat16 at 16 bits, float32 at 32), 16 (every float type at 16 bits: half the bytes, a coarser sum; see docs/design.md) or 32 (every type at 32); every rank of a job needs the same")
	fs.BoolVar(&cfg.Auth, "auth", false, "tag every packet with the job's key, for a software switch that checks tags (switch and controller --auth); needs --extended")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, fmt.Sprintf("retransmission timeout per packet (0: %v, or %v with --transport shm)", switchml.DefaultTimeout, switchml.DefaultShmTimeout))
	fs.DurationVar(&cfg.JoinTimeout, "join-timeout", switchml.DefaultJoinTimeout, "how long to wait for every rank to join")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", switchml.DefaultConnectTimeout, "how long to wait for a connection to the controller before failing (ranks that arrive late are --join-timeout's)")
	fs.DurationVar(&cfg.GiveUp, "give-up", switchml.DefaultGiveUp, "fail an allreduce when the switch has not answered for this long")
	fs.Float64Var(&cfg.Faults.Drop, "drop", 0, "probability of dropping each packet this worker sends")
	fs.Float64Var(&cfg.Faults.Duplicate, "duplicate", 0, "probability of duplicating each packet this worker sends")
	fs.Float64Var(&cfg.Faults.Reorder, "reorder", 0, "probability of delaying each packet this worker sends behind later ones")
	fs.StringVar(&cfg.Fallback, "fallback", "", `"ring": when the switch cannot serve the job (no room, too many workers, switch or controller unreachable), run it over the TCP ring allreduce instead`)
	fs.BoolVar(&cfg.FallbackOnLoss, "fallback-on-loss", false, "with --fallback ring: move to the ring when the switch is lost mid-job (instead of failing); barriers then run on the data path")
	fs.StringVar(&cfg.FallbackListen, "fallback-listen", "", "host:port this rank's ring listens on (default: --fallback-peers' entry for this rank, else the --bind address and a free port)")
	peers := fs.String("fallback-peers", "", "every rank's ring address, comma-separated in rank order: lets the ranks meet without the controller when it cannot be reached")
	tlsCA := fs.String("tls-ca", "", "CA (PEM) of the controller's certificate: the link to the controller speaks TLS")
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) this worker presents to the controller (mutual TLS)")
	tlsKey := fs.String("tls-key", "", "key (PEM) of --tls-cert")
	elements := fs.Int("elements", 1<<20, "tensor elements")
	dtName := fs.String("dtype", "float32", "element type: "+strings.Join(dtype.Names(), ", "))
	iters := fs.Int("iters", 5, "timed allreduce calls")
	warmup := fs.Int("warmup", 1, "untimed allreduce calls before the timed ones")
	seed := fs.Uint64("seed", 1, "seed of the tensor contents")
	var in tensorInput
	fs.Float64Var(&in.density, "density", 1, "share of the tensor's blocks (of --packet-elements values) that hold values; the others are all zero, and which ones differs by rank (1: every block)")
	fs.StringVar(&in.gradients, "gradients", "", "allreduce recorded float32 gradients instead of generated data: rank r reads DIR/rank<r>.f32 (raw little-endian float32, every rank's file the same size; --elements and --dtype are taken from them) and verifies against the sum of every rank's file")
	nanAt := fs.Int("nan-at", -1, "put a NaN into this rank's input at this allreduce (0-based, warm-up included), to watch a bad input end the job")
	asJSON := fs.Bool("json", false, "print one JSON object with the results on stdout")
	showProgress := fs.String("progress", "auto", progressFlagHelp)
	verify := fs.Bool("verify", true, "check every result against the exact sum")
	metricsAddr := fs.String("metrics", "", metricsFlagHelp)
	tracePath := fs.String("trace", "", "write this worker's timeline to this file when it ends, as Chrome trace-event JSON (open it in Perfetto or chrome://tracing)")
	fs.IntVar(&cfg.TraceEvents, "trace-events", 0, fmt.Sprintf("latest events the timeline keeps (0: %d)", switchml.DefaultTraceEvents))
	stopProfile, err := parseFlagsProfiled(fs, args)
	if err != nil {
		return err
	}
	defer stopProfile()
	if cfg.Token, err = jobToken(fs, *tokenFile, os.Stderr); err != nil {
		return err
	}
	if *peers != "" {
		cfg.FallbackPeers = strings.Split(*peers, ",")
	}
	if cfg.TLS, err = secure.Client(*tlsCA, *tlsCert, *tlsKey); err != nil {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
	}
	dt, err := dtype.ByName(*dtName)
	if err != nil {
		return fmt.Errorf("--dtype: %w", err)
	}
	st, err := newSteps(fmt.Sprintf("rank %d/%d", cfg.Rank, cfg.Workers), *showProgress)
	if err != nil {
		return err
	}
	if *elements < 0 || *iters < 1 || *warmup < 0 || !(in.density > 0 && in.density <= 1) {
		return fmt.Errorf("want --elements >= 0, --iters >= 1, --warmup >= 0 and 0 < --density <= 1")
	}
	if in.gradients != "" {
		if dt, *elements, err = in.gradientElements(cfg.Rank); err != nil {
			return err
		}
	}
	cfg.Faults.Seed = *seed*1000 + uint64(cfg.Rank)

	rep := benchmarks.WorkerReport{Workers: cfg.Workers, Rank: cfg.Rank, Elements: *elements, DType: dt.Name(), Iters: *iters,
		Lanes: cfg.Lanes, Window: cfg.Window, PacketElements: cfg.PacketElements, Sparse: cfg.Sparse, Density: in.density, Gradients: in.gradients}
	var trace *traceFile
	if *tracePath != "" {
		if trace, err = createTrace(*tracePath); err != nil {
			return err
		}
		cfg.Trace = trace
	}
	in.seed = *seed
	err = allreduceRounds(ctx, cfg, dt, *elements, *iters, *warmup, in, *verify, *nanAt, *metricsAddr, st, &rep)
	// The library names Config's fields; this command's users set flags.
	err = field.Named(err, allreduceNames)
	if trace != nil {
		if terr := trace.Close(); terr != nil && err == nil {
			err = terr
		}
	}
	if err != nil {
		// A run that failed verified nothing, whatever it checked first.
		rep.Fail(err)
	}
	if u, sys, ok := benchmarks.ProcessCPU(); ok {
		rep.CPUUserS, rep.CPUSysS = u, sys
	}
	if len(rep.TATs) > 0 {
		sorted := append([]float64(nil), rep.TATs...)
		sort.Float64s(sorted)
		rep.MedianTAT = sorted[len(sorted)/2]
		if rep.MedianTAT > 0 {
			rep.GoodputGbps = float64(*elements*dt.Size()*8) / rep.MedianTAT / 1e9
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		if e := enc.Encode(rep); e != nil {
			return e
		}
	} else if err == nil {
		fmt.Printf("rank %d/%d: %d x %s, %d iterations, median %.4f s, %.3f Gbit/s, verified=%v, retransmits=%d\n",
			cfg.Rank, cfg.Workers, *elements, dt.Name(), *iters, rep.MedianTAT, rep.GoodputGbps, rep.Verified, rep.Retransmits)
		if rep.Fallback != "" {
			fmt.Printf("rank %d/%d: ran %d calls over the ring: %s\n", cfg.Rank, cfg.Workers, rep.RingCalls, termText(rep.Fallback))
		}
	}
	return err
}

func allreduceRounds(ctx context.Context, cfg switchml.Config, dt dtype.Codec, elements, iters, warmup int, in tensorInput, verify bool, nanAt int, metricsAddr string, st *steps, rep *benchmarks.WorkerReport) error {
	sess, err := switchml.Join(ctx, cfg)
	if err != nil {
		return err
	}
	// An interrupt can land between two calls (filling or checking a
	// tensor), where no call of the session sees it: the job is then
	// aborted for every rank, not left, so that the peers stop at once
	// and say why.
	defer func() {
		if ctx.Err() != nil {
			sess.Abort(st.interrupted())
		} else {
			sess.Close()
		}
	}()
	if metricsAddr != "" {
		reg, err := newMetricsRegistry(sess.Collector())
		if err != nil {
			return err
		}
		mctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if _, err := serveMetrics(mctx, metricsAddr, reg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
			return err
		}
	}
	defer st.done()
	// The work between calls stops when the job ends for a peer's cause
	// too. The calls take ctx itself: for them, a cancelled context is
	// this rank's own interrupt.
	work, stop := untilJobEnds(ctx, sess, cfg.FallbackOnLoss)
	defer stop()
	rep.PacketElements, rep.Lanes, rep.Window = sess.PacketElements(), sess.Lanes(), sess.Window()
	var exp *dtype.Expectation
	if verify {
		// Blocks are what a packet carries: twice the words at 16 bits.
		k := sess.PacketElements()
		if cfg.WireWidth(dt) == dtype.WireNarrow {
			k *= 2
		}
		if exp, err = in.expect(work, st, dt, cfg.Workers, elements, k); err != nil {
			return err
		}
		if cfg.WireWidth(dt) == dtype.WireNarrow {
			exp.OnWire16()
		}
	}
	data := dtype.New(dt, elements)
	// The run's barriers wait for the slowest rank as long as an
	// allreduce waits for the switch (--give-up; at least
	// minBarrierWait, for the filling and checking of large tensors): a
	// rank that stopped is named, and the job ends, instead of its peers
	// waiting out the join timeout.
	barrier := func(name string) error {
		bctx, cancel := context.WithTimeout(ctx, max(cfg.GiveUp, minBarrierWait))
		defer cancel()
		return sess.Barrier(bctx, name)
	}
	// Verified is set once every iteration's check passed, and only then.
	rep.Verified = false
	var meter benchmarks.CPUMeter
	defer meter.Report(rep)
	sz := dt.Size()
	for it := 0; it < warmup+iters; it++ {
		if err := in.fill(work, st, fmt.Sprintf("filling the tensor of allreduce %d", it), dt, data, cfg.Rank, sess.PacketElements()); err != nil {
			return err
		}
		if it == nanAt && elements > 0 && dt.Scaled() {
			dt.Set(data, elements/2, math.NaN())
		}
		// Start together, so a rank's time does not include waiting for
		// a slower rank to finish filling its tensor.
		if err := barrier(fmt.Sprintf("iter-%d", it)); err != nil {
			return err
		}
		st.begin(fmt.Sprintf("allreduce %d of %d", it, warmup+iters))
		meter.Begin()
		start := time.Now()
		err := sess.AllReduce(ctx, dt, data)
		tat := time.Since(start)
		meter.End()
		if err != nil {
			return fmt.Errorf("allreduce %d: %w", it, err)
		}
		if it >= warmup {
			rep.TATs = append(rep.TATs, tat.Seconds())
			if it == warmup {
				rep.TimedStart = unixSeconds(start)
			}
			rep.TimedEnd = unixSeconds(start.Add(tat))
		}
		// Checking and refilling the tensor is CPU-heavy: start it only
		// when every rank is done, or ranks that finish first slow down
		// the others' timed allreduce on a shared host.
		if err := barrier(fmt.Sprintf("done-%d", it)); err != nil {
			return err
		}
		if verify {
			err := st.each(work, fmt.Sprintf("verifying allreduce %d", it), elements, func(lo, hi int) error {
				return exp.CheckAt(lo, data[lo*sz:hi*sz])
			})
			if err != nil {
				if work.Err() != nil {
					return err
				}
				return fmt.Errorf("verification failed after allreduce %d: %w", it, err)
			}
		}
	}
	stats := sess.Stats()
	if _, why := sess.Fallback(); why != "" {
		rep.Fallback, rep.RingCalls = why, stats.Ring
	}
	rep.Retransmits, rep.Packets = stats.Retransmits, stats.Packets
	rep.WireBits, rep.SentBytes = cfg.WireWidth(dt), stats.SentBytes
	rep.Transport = sess.Transport() // after the calls: a shared-memory lane counts once it has used the switch's inbox
	rep.RTTMillis, rep.TimeoutMillis = stats.RTT.Seconds()*1e3, stats.Timeout.Seconds()*1e3
	rep.Verified = verify
	return nil
}

// untilJobEnds is ctx, also cancelled, with the job's end as the cause,
// when the controller ends sess for a peer's cause. With fallbackOnLoss a
// switch loss moves the session to the ring instead of ending it, and
// only ctx counts.
func untilJobEnds(ctx context.Context, sess *switchml.Session, fallbackOnLoss bool) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancelCause(ctx)
	if !fallbackOnLoss {
		go func() {
			select {
			case <-sess.Done():
				cancel(cmp.Or(sess.Err(), switchml.ErrAborted))
			case <-work.Done():
			}
		}()
	}
	return work, func() { cancel(nil) }
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
