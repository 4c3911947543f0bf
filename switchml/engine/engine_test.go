package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/wire"
)

func addr(r int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(r >> 8), byte(r)}), 7000)
}

// harness connects n single-lane workers to a pipeline with instant,
// in-order delivery; drop can discard chosen packets.
type harness struct {
	p     *pipeline.Pipeline
	lanes []*Lane
	now   time.Duration
	drop  func(toSwitch bool, rank int, h wire.Header) bool
}

func newHarness(t testing.TB, n int, cfg Config) *harness {
	t.Helper()
	p, err := pipeline.New(pipeline.Config{Slots: int(cfg.SlotBase) + cfg.Window, MaxElements: cfg.Elements, MaxWorkers: n})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{p: p}
	var reps []switchjob.Replica
	for r := 0; r < n; r++ {
		w := switchjob.Worker{JobID: 1, Rank: uint16(r), NumWorkers: uint16(n), MulticastGroup: 1, PoolBase: cfg.SlotBase, PoolSize: uint32(cfg.Window)}
		if err := p.InsertWorker(pipeline.WorkerKey{Addr: addr(r)}, w); err != nil {
			t.Fatal(err)
		}
		if err := p.InsertReply(pipeline.ReplyKey{JobID: 1, Rank: uint16(r)}, pipeline.Reply{Addr: addr(r)}); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, switchjob.Replica{Instance: uint16(r)})
		c := cfg
		c.Rank, c.NumWorkers = r, n
		l, err := NewLane(c)
		if err != nil {
			t.Fatal(err)
		}
		h.lanes = append(h.lanes, l)
	}
	if err := p.InsertMulticastGroup(1, reps); err != nil {
		t.Fatal(err)
	}
	return h
}

// run starts ops[r] on rank r and drives everything until all lanes are
// done; it returns false if maxSteps timer advances were not enough.
func (h *harness) run(t testing.TB, ops []Op) bool {
	t.Helper()
	for r, l := range h.lanes {
		if err := l.Start(ops[r], h.now); err != nil {
			t.Fatalf("rank %d: Start: %v", r, err)
		}
	}
	var out pipeline.Output
	buf := make([]byte, 0, wire.MaxPacket)
	type delivery struct {
		rank int
		pkt  []byte
	}
	var inbox []delivery
	for steps := 0; steps < 100000; steps++ {
		progress := false
		for r, l := range h.lanes {
			for {
				var ok bool
				buf, ok = l.AppendPacket(buf[:0])
				if !ok {
					break
				}
				progress = true
				hd, _, _ := wire.Parse(buf)
				if h.drop != nil && h.drop(true, r, hd) {
					continue
				}
				h.p.Process(addr(r), buf, &out)
				for _, d := range out.Dests {
					rank := int(d.Addr().As4()[2])<<8 | int(d.Addr().As4()[3])
					if h.drop != nil && h.drop(false, rank, hd) {
						continue
					}
					inbox = append(inbox, delivery{rank, append([]byte(nil), out.Packet...)})
				}
			}
		}
		for _, d := range inbox {
			h.lanes[d.rank].Receive(d.pkt, h.now)
		}
		inbox = inbox[:0]
		if progress {
			continue
		}
		done := true
		next := time.Duration(math.MaxInt64)
		for _, l := range h.lanes {
			if !l.Done() {
				done = false
			}
			if d, ok := l.Deadline(); ok {
				next = min(next, d)
			}
		}
		if done {
			return true
		}
		if next == math.MaxInt64 {
			t.Fatal("lanes not done and no timer running")
		}
		h.now = next
		for _, l := range h.lanes {
			l.Tick(h.now)
		}
	}
	return false
}

func TestInt32Exact(t *testing.T) {
	for _, f := range []wire.Format{wire.FormatCompat, wire.FormatExtended} {
		for _, n := range []int{1, 2, 3, 5} {
			for _, size := range []int{0, 1, 31, 32, 33, 100, 1000} {
				t.Run(fmt.Sprintf("%v/n=%d/size=%d", f, n, size), func(t *testing.T) {
					h := newHarness(t, n, Config{Format: f, Elements: 32, Window: 4, SlotBase: 3})
					rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
					for op := 0; op < 3; op++ { // back to back: sets carry over
						ops := make([]Op, n)
						want := make([]int32, size)
						for r := range ops {
							v := make([]int32, size)
							for i := range v {
								v[i] = int32(rng.Uint32())
								want[i] += v[i]
							}
							ops[r] = Op{Seq: uint32(op + 250), DType: dtype.Int32, Data: dtype.Bytes(v)}
						}
						if !h.run(t, ops) {
							t.Fatal("did not finish")
						}
						for r := range ops {
							if err := h.lanes[r].Err(); err != nil {
								t.Fatal(err)
							}
							for i := range want {
								if dtype.As[int32](ops[r].Data)[i] != want[i] {
									t.Fatalf("op %d rank %d [%d] = %d, want %d", op, r, i, dtype.As[int32](ops[r].Data)[i], want[i])
								}
							}
						}
					}
				})
			}
		}
	}
}

// floatBound returns the allowed error of element i: quant's bound for the
// block's combined exponent.
func floatBound(inputs [][]float32, k, i int, bound func(int, int8) float64) float64 {
	lo := i / k * k
	hi := min(lo+k, len(inputs[0]))
	e := quant.MinExponent
	for _, in := range inputs {
		e = quant.MaxExponent(e, quant.BlockExponent(in[lo:hi]))
	}
	return bound(len(inputs), e)
}

func TestFloat32WithinBound(t *testing.T) {
	for _, f := range []wire.Format{wire.FormatCompat, wire.FormatExtended} {
		for _, n := range []int{1, 3, 8} {
			for _, size := range []int{0, 1, 50, 64, 300} {
				t.Run(fmt.Sprintf("%v/n=%d/size=%d", f, n, size), func(t *testing.T) {
					h := newHarness(t, n, Config{Format: f, Elements: 32, Window: 3})
					rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
					for op := 0; op < 2; op++ {
						ops := make([]Op, n)
						inputs := make([][]float32, n)
						for r := range ops {
							v := make([]float32, size)
							for i := range v {
								// Blocks of very different scales.
								v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i/32%5-2)))
							}
							inputs[r] = append([]float32(nil), v...)
							ops[r] = Op{Seq: uint32(op), DType: dtype.Float32, Data: dtype.Bytes(v)}
						}
						if !h.run(t, ops) {
							t.Fatal("did not finish")
						}
						for i := 0; i < size; i++ {
							var exact float64
							for r := range inputs {
								exact += float64(inputs[r][i])
							}
							b := floatBound(inputs, 32, i, quant.ErrorBound)
							for r := range ops {
								if got := float64(dtype.As[float32](ops[r].Data)[i]); math.Abs(got-exact) > b {
									t.Fatalf("rank %d [%d] = %g, exact %g, bound %g", r, i, got, exact, b)
								}
								if dtype.As[float32](ops[r].Data)[i] != dtype.As[float32](ops[0].Data)[i] {
									t.Fatalf("ranks disagree at %d", i)
								}
							}
						}
					}
				})
			}
		}
	}
}

func TestHalfPrecision(t *testing.T) {
	for _, c := range []struct {
		dt    dtype.Codec
		to    func(float32) uint16
		from  func(uint16) float32
		bound func(int, int8) float64
	}{
		{dtype.Float16, quant.Float32ToF16, quant.F16ToFloat32, quant.ErrorBoundF16},
		{dtype.BFloat16, quant.Float32ToBF16, quant.BF16ToFloat32, quant.ErrorBoundBF16},
	} {
		const n, size = 4, 150
		h := newHarness(t, n, Config{Format: wire.FormatExtended, Elements: 64, Window: 2})
		ops := make([]Op, n)
		inputs := make([][]float32, n)
		for r := range ops {
			v := make([]uint16, size)
			inputs[r] = make([]float32, size)
			for i := range v {
				v[i] = c.to(float32(i%17-8) * 0.37 * float32(r+1))
				inputs[r][i] = c.from(v[i])
			}
			ops[r] = Op{Seq: 1, DType: c.dt, Data: dtype.Bytes(v)}
		}
		if !h.run(t, ops) {
			t.Fatal("did not finish")
		}
		for i := 0; i < size; i++ {
			var exact float64
			for r := range inputs {
				exact += float64(inputs[r][i])
			}
			b := floatBound(inputs, 64, i, c.bound)
			if got := float64(c.from(dtype.As[uint16](ops[1].Data)[i])); math.Abs(got-exact) > b {
				t.Fatalf("%v [%d] = %g, exact %g, bound %g", c.dt, i, got, exact, b)
			}
		}
	}
}

func TestRejectsNonFinite(t *testing.T) {
	l, err := NewLane(Config{NumWorkers: 1, Elements: 32, Window: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Start(Op{DType: dtype.Float32, Data: dtype.Bytes([]float32{1, float32(math.NaN())})}, 0)
	var nf *quant.NonFiniteError
	if !errors.As(err, &nf) || nf.Index != 1 {
		t.Fatalf("NaN input: %v", err)
	}
	if !l.Done() {
		t.Fatal("rejected op left the lane busy")
	}
	if err := l.Start(Op{DType: dtype.Int32, Data: dtype.Bytes([]int32{1})}, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(Op{DType: dtype.Int32, Data: dtype.Bytes([]int32{1})}, 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Start: %v", err)
	}
}

// echoAll drives a one-worker lane to the end of its op, feeding every
// packet back as its own result, and returns the packets in sending order.
func echoAll(t *testing.T, l *Lane) [][]byte {
	t.Helper()
	var sent [][]byte
	for steps := 0; !l.Done(); steps++ {
		if steps > 1_000_000 {
			t.Fatal("op did not finish")
		}
		var batch [][]byte
		for {
			b, ok := l.AppendPacket(nil)
			if !ok {
				break
			}
			batch = append(batch, b)
		}
		for _, b := range batch {
			sent = append(sent, b)
			l.Receive(b, 0)
		}
	}
	return sent
}

// TestCheckOnSend: with CheckOnSend a finite op sends exactly the packets
// and sums of one with precomputed exponents, and a NaN fails the op when
// its block's exponent packet is built, naming its index in the op, with
// the blocks before it sent and none after.
func TestCheckOnSend(t *testing.T) {
	const k, blocks = 32, 40
	input := func() []float32 {
		x := make([]float32, k*blocks-5)
		for i := range x {
			x[i] = float32(math.Sin(float64(i))) * float32(1+i%7)
		}
		return x
	}
	run := func(op Op) ([][]byte, []float32, error) {
		l, err := NewLane(Config{NumWorkers: 1, Elements: k, Window: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(op, 0); err != nil {
			t.Fatal(err)
		}
		sent := echoAll(t, l)
		return sent, dtype.As[float32](op.Data), l.Err()
	}
	x := input()
	exps := make([]int8, blocks)
	if err := quant.BlockExponents(exps, x, k); err != nil {
		t.Fatal(err)
	}
	wantPkts, wantSum, err := run(Op{DType: dtype.Float32, Data: dtype.Bytes(x), Checked: true, Exps: exps, ExpBlock: k})
	if err != nil {
		t.Fatal(err)
	}
	gotPkts, gotSum, err := run(Op{DType: dtype.Float32, Data: dtype.Bytes(input()), CheckOnSend: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(gotPkts) != len(wantPkts) {
		t.Fatalf("%d packets, want %d", len(gotPkts), len(wantPkts))
	}
	for i := range wantPkts {
		if !bytes.Equal(gotPkts[i], wantPkts[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
	for i := range wantSum {
		if gotSum[i] != wantSum[i] {
			t.Fatalf("sum [%d] = %v, want %v", i, gotSum[i], wantSum[i])
		}
	}

	bad := input()
	const at = 17*k + 3
	bad[at] = float32(math.Inf(-1))
	sent, _, err := run(Op{DType: dtype.Float32, Data: dtype.Bytes(bad), CheckOnSend: true})
	var nf *quant.NonFiniteError
	if !errors.As(err, &nf) || nf.Index != at {
		t.Fatalf("Inf at %d: %v", at, err)
	}
	for _, b := range sent {
		h, _, err := wire.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.PacketID >= 17 {
			t.Fatalf("packet %d was sent after the bad block 17", h.PacketID)
		}
	}
	if len(sent) != 17 {
		t.Fatalf("%d packets sent before the bad block, want 17", len(sent))
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{NumWorkers: 0, Elements: 32, Window: 1},
		{NumWorkers: 2, Rank: 2, Elements: 32, Window: 1},
		{NumWorkers: 2, Elements: 33, Window: 1},
		{NumWorkers: 2, Elements: 32, Window: 0},
		{NumWorkers: 2, Elements: 32, Window: 2, SlotBase: wire.MaxCompatSlot},
		{NumWorkers: 2, Format: wire.FormatExtended, Elements: 4096, Window: 1},
		{NumWorkers: 2, Format: 9, Elements: 32, Window: 1},
	} {
		if _, err := NewLane(c); err == nil {
			t.Errorf("NewLane(%+v) accepted", c)
		}
	}
}

// TestRetransmitAndDuplicates loses packets in both directions and checks
// recovery, then feeds stale and duplicate results.
func TestRetransmitAndDuplicates(t *testing.T) {
	const n = 3
	h := newHarness(t, n, Config{Format: wire.FormatCompat, Elements: 32, Window: 2})
	seen := map[string]bool{}
	h.drop = func(toSwitch bool, rank int, hd wire.Header) bool {
		// Drop the first copy of every third packet up and of packet 1's
		// result to rank 2.
		key := fmt.Sprint(toSwitch, rank, hd.Seq, hd.PacketID)
		if seen[key] {
			return false
		}
		seen[key] = true
		return toSwitch && hd.PacketID%3 == 0 || !toSwitch && rank == 2 && hd.PacketID == 1
	}
	ops := make([]Op, n)
	for r := range ops {
		ops[r] = Op{Seq: 5, DType: dtype.Float32, Data: dtype.Bytes([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35})}
	}
	if !h.run(t, ops) {
		t.Fatal("did not finish")
	}
	for r := range ops {
		for i, v := range dtype.As[float32](ops[r].Data) {
			if math.Abs(float64(v)-3*float64(i+1)) > 1e-5 {
				t.Fatalf("rank %d [%d] = %g", r, i, v)
			}
		}
		st := h.lanes[r].Stats()
		if st.Timeouts == 0 || st.Retransmits == 0 {
			t.Fatalf("rank %d: no retransmission: %+v", r, st)
		}
	}
	if h.p.Counter(switchjob.StatRetransmitReply) == 0 {
		t.Fatal("lost result not recovered by a unicast reply")
	}
	// Stale (other sequence number), duplicate and malformed results are ignored.
	l := h.lanes[0]
	if err := l.Start(Op{Seq: 6, DType: dtype.Int32, Data: dtype.Bytes(make([]int32, 64))}, h.now); err != nil {
		t.Fatal(err)
	}
	pkt, _ := l.AppendPacket(nil)
	hd, _, _ := wire.Parse(pkt)
	old := hd
	old.Seq = 5
	b, _ := old.Append(nil)
	l.Receive(append(b, make([]byte, 128)...), h.now)
	l.Receive([]byte{1, 2, 3}, h.now)
	l.Receive(pkt, h.now) // the request itself: a valid result for packet 0
	l.Receive(pkt, h.now) // duplicate
	st := l.Stats()
	if st.Stale != 1 || st.Malformed != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTimeoutBudgetAndBackoff(t *testing.T) {
	l, err := NewLane(Config{NumWorkers: 2, Elements: 32, Window: 2, Timeout: time.Millisecond, BackoffAfter: 4, MaxTimeout: 4 * time.Millisecond, MaxTimeouts: 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(Op{Seq: 1, DType: dtype.Int32, Data: dtype.Bytes(make([]int32, 100))}, 0); err != nil {
		t.Fatal(err)
	}
	var now time.Duration
	var gaps []time.Duration
	for !l.Done() {
		for {
			if _, ok := l.AppendPacket(nil); !ok {
				break
			}
		}
		d, ok := l.Deadline()
		if !ok {
			t.Fatal("no deadline while running")
		}
		gaps = append(gaps, d-now)
		now = d
		l.Tick(now)
	}
	if !errors.Is(l.Err(), ErrTimeoutBudget) {
		t.Fatalf("err = %v", l.Err())
	}
	st := l.Stats()
	if st.Timeouts != 21 || st.Backoffs != 5 {
		t.Fatalf("stats %+v", st)
	}
	// The retry interval grows from 1 ms to the 4 ms cap.
	if gaps[0] != time.Millisecond || gaps[len(gaps)-1] > 4*time.Millisecond {
		t.Fatalf("gaps %v", gaps)
	}
	// The lane can run the next op after a failure.
	if err := l.Start(Op{Seq: 2}, now); err != nil || !l.Done() {
		t.Fatalf("empty op after failure: %v", err)
	}
}

func TestSplitLanes(t *testing.T) {
	for _, c := range []struct {
		total, lanes, k int
		want            []Range
	}{
		{0, 2, 32, []Range{{0, 0}, {0, 0}}},
		{1, 4, 32, []Range{{0, 0}, {0, 0}, {0, 0}, {0, 1}}},
		{100, 2, 32, []Range{{0, 64}, {64, 36}}},
		{128, 4, 32, []Range{{0, 32}, {32, 32}, {64, 32}, {96, 32}}},
		{161, 3, 32, []Range{{0, 64}, {64, 64}, {128, 33}}},
	} {
		got := SplitLanes(c.total, c.lanes, c.k)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("SplitLanes(%d, %d, %d) = %v, want %v", c.total, c.lanes, c.k, got, c.want)
		}
	}
}

func TestAppendPacketNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, op := range []Op{{}, {CheckOnSend: true}} {
		for _, c := range dtype.All() {
			l, err := NewLane(Config{NumWorkers: 1, Elements: 64, Window: 8})
			if err != nil {
				t.Fatal(err)
			}
			op.Seq, op.DType, op.Data = 1, c, dtype.New(c, 64*1000)
			if err := l.Start(op, 0); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 0, wire.MaxPacket)
			step := func() {
				b, ok := l.AppendPacket(buf[:0])
				if !ok {
					t.Fatal("nothing to send")
				}
				l.Receive(b, 0) // n = 1: the switch would echo the packet
			}
			// Past the exponent round, so that every measured packet
			// carries data (AllocsPerRun rounds an average below one
			// down to zero).
			for range 16 {
				step()
			}
			allocs := testing.AllocsPerRun(200, step)
			if allocs != 0 {
				t.Fatalf("%s (CheckOnSend %v): %v allocs per packet", c.Name(), op.CheckOnSend, allocs)
			}
		}
	}
}

// BenchmarkLane measures the worker's per-packet cost: encode (quantize)
// one packet and accept its result (dequantize). With one worker the
// switch's reply equals the request, so the request is fed back.
func BenchmarkLane(b *testing.B) {
	for _, c := range []struct {
		dt     dtype.Codec
		k      int
		wire16 bool
	}{{dtype.Int32, 64, false}, {dtype.Float32, 64, false}, {dtype.Float32, 256, false}, {dtype.Float16, 256, false},
		{dtype.BFloat16, 256, false}, {dtype.Float32, 256, true}, {dtype.BFloat16, 256, true}} {
		name := fmt.Sprintf("%s/elements=%d", c.dt.Name(), c.k)
		if c.wire16 {
			name += "/wire16"
		}
		b.Run(name, func(b *testing.B) {
			l, err := NewLane(Config{NumWorkers: 1, Elements: c.k, Window: 64})
			if err != nil {
				b.Fatal(err)
			}
			const size = 1 << 16
			op := Op{DType: c.dt, Data: dtype.New(c.dt, size), Wire16: c.wire16}
			for i := range size {
				v := float64(i%100) * 0.01
				if !c.dt.Scaled() {
					v = float64(i)
				}
				c.dt.Set(op.Data, i, v)
			}
			buf := make([]byte, 0, wire.MaxPacket)
			b.ReportAllocs()
			for b.Loop() {
				if l.Done() {
					op.Seq++
					if err := l.Start(op, 0); err != nil {
						b.Fatal(err)
					}
				}
				pkt, _ := l.AppendPacket(buf[:0])
				l.Receive(pkt, 0)
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns, "ns/packet")
			b.ReportMetric(float64(op.PerPacket(c.k))*1e9/ns, "elements/s")
		})
	}
}

// TestTimeoutFollowsRTT drives one worker whose results come back 30 ms
// after each send, three times the initial timeout: the first op resends,
// the timeout grows past the measured round trip, and later ops resend
// nothing. With FixedTimeout every op keeps resending.
func TestTimeoutFollowsRTT(t *testing.T) {
	const rtt = 30 * time.Millisecond
	run := func(fixed bool) []uint64 {
		l, err := NewLane(Config{Rank: 0, NumWorkers: 1, Format: wire.FormatCompat, Elements: 32, Window: 4, Timeout: 10 * time.Millisecond, FixedTimeout: fixed})
		if err != nil {
			t.Fatal(err)
		}
		var retx []uint64
		now := time.Duration(0)
		for op := 0; op < 4; op++ {
			data := make([]int32, 32*40)
			if err := l.Start(Op{Seq: uint32(op), DType: dtype.Int32, Data: dtype.Bytes(data)}, now); err != nil {
				t.Fatal(err)
			}
			before := l.Stats().Retransmits
			type flight struct {
				at  time.Duration
				pkt []byte
			}
			var inflight []flight
			for steps := 0; !l.Done(); steps++ {
				if steps > 100000 {
					t.Fatal("op did not finish")
				}
				for {
					b, ok := l.AppendPacket(nil)
					if !ok {
						break
					}
					inflight = append(inflight, flight{now + rtt, b})
				}
				next := time.Duration(1 << 62)
				if d, ok := l.Deadline(); ok {
					next = d
				}
				for _, f := range inflight {
					next = min(next, f.at)
				}
				now = next
				rest := inflight[:0]
				for _, f := range inflight {
					if f.at <= now {
						l.Receive(f.pkt, now) // n=1: the sum is the packet itself
					} else {
						rest = append(rest, f)
					}
				}
				inflight = rest
				l.Tick(now)
			}
			if err := l.Err(); err != nil {
				t.Fatal(err)
			}
			retx = append(retx, l.Stats().Retransmits-before)
		}
		return retx
	}
	adaptive := run(false)
	if adaptive[0] == 0 {
		t.Fatalf("first op resent nothing although results take 3x the timeout: %v", adaptive)
	}
	for i, r := range adaptive[2:] {
		if r != 0 {
			t.Fatalf("op %d resent %d packets after the timeout adapted (per op: %v)", i+2, r, adaptive)
		}
	}
	fixed := run(true)
	if fixed[3] == 0 {
		t.Fatalf("fixed timeout below the RTT resent nothing in the last op: %v", fixed)
	}
}

// TestGiveUpInTime: with GiveUp, the op fails once no result arrived for
// that long on the caller's clock, however many timeouts that took, and not
// a tick before; the count budget no longer applies.
func TestGiveUpInTime(t *testing.T) {
	// Retries every millisecond on two slots: DefaultMaxTimeouts would run
	// out after about 250 ms.
	l, err := NewLane(Config{NumWorkers: 2, Elements: 32, Window: 2, Timeout: time.Millisecond, MaxTimeout: time.Millisecond, GiveUp: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(Op{Seq: 1, DType: dtype.Int32, Data: dtype.Bytes(make([]int32, 100))}, 0); err != nil {
		t.Fatal(err)
	}
	var now time.Duration
	for !l.Done() {
		for {
			if _, ok := l.AppendPacket(nil); !ok {
				break
			}
		}
		d, ok := l.Deadline()
		if !ok {
			t.Fatal("no deadline while running")
		}
		now = d
		l.Tick(now)
		if !l.Done() && now > 500*time.Millisecond {
			t.Fatalf("still running at %v, past GiveUp", now)
		}
	}
	if !errors.Is(l.Err(), ErrTimeoutBudget) {
		t.Fatalf("err = %v", l.Err())
	}
	if now <= 500*time.Millisecond {
		t.Fatalf("gave up at %v, before GiveUp", now)
	}
	if st := l.Stats(); st.Timeouts <= DefaultMaxTimeouts {
		t.Fatalf("stats %+v: the time bound, not a count, should have ended the op", st)
	}
	if _, err := NewLane(Config{NumWorkers: 1, Elements: 32, Window: 1, GiveUp: -time.Second}); err == nil {
		t.Fatal("negative GiveUp accepted")
	}
}

// TestPrecomputedExponents checks that an op carrying its block exponents
// (quant.BlockExponents) sends exactly the packets of one that scans each
// block, whole and cut into lanes, and that exponents of the wrong block
// size are ignored rather than used.
func TestPrecomputedExponents(t *testing.T) {
	const k = 64
	rng := rand.New(rand.NewPCG(5, 6))
	data := make([]float32, 64*37+19)
	for i := range data {
		data[i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(40)-20))
	}
	exps := make([]int8, (len(data)+k-1)/k)
	if err := quant.BlockExponents(exps, data, k); err != nil {
		t.Fatal(err)
	}
	// sent drains every packet a lane sends for op, answering each as
	// the switch of a one-worker job would (the request is the result).
	sent := func(op Op) [][]byte {
		l, err := NewLane(Config{NumWorkers: 1, Elements: k, Window: 8})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(op, 0); err != nil {
			t.Fatal(err)
		}
		var pkts [][]byte
		for !l.Done() {
			b, ok := l.AppendPacket(nil)
			if !ok {
				t.Fatal("lane not done and nothing to send")
			}
			pkts = append(pkts, b)
			l.Receive(b, 0)
		}
		return pkts
	}
	base := Op{Seq: 1, DType: dtype.Float32, Data: dtype.Bytes(slices.Clone(data))}
	withExps := Op{Seq: 1, DType: dtype.Float32, Data: dtype.Bytes(slices.Clone(data)), Exps: exps, ExpBlock: k}
	for _, r := range append(SplitLanes(len(data), 3, k), Range{Off: 0, Len: len(data)}) {
		want, got := sent(base.Slice(r)), sent(withExps.Slice(r))
		if len(got) != len(want) {
			t.Fatalf("range %+v: %d packets with exponents given, %d without", r, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("range %+v: packet %d differs with exponents given", r, i)
			}
		}
	}
	// Wrong exponents of the right size would change the packets; given
	// for another block size they must be ignored.
	wrong := slices.Repeat([]int8{quant.MinExponent}, len(data))
	if got, want := sent(Op{Seq: 1, DType: dtype.Float32, Data: dtype.Bytes(slices.Clone(data)), Exps: wrong, ExpBlock: 1}), sent(base); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatal("exponents computed for another block size were used")
	}
	if got, want := sent(Op{Seq: 1, DType: dtype.Float32, Data: dtype.Bytes(slices.Clone(data)), Exps: wrong[:len(exps)], ExpBlock: k}), sent(base); slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatal("the given exponents were not used")
	}
}
