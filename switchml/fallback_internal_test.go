package switchml

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/engine"
)

// TestFallbackCatchUpAfterLostResult: the switch multicast the result of
// call 5 to rank 0 and died before ranks 1 and 2 got it; rank 0 went on
// into call 6. Moving to the ring, ranks 1 and 2 finish call 5 with rank
// 0's copy of the switch's result, bit for bit, and then every rank does
// call 6 over the ring from its kept input: nothing is lost or done twice.
func TestFallbackCatchUpAfterLostResult(t *testing.T) {
	const n, size = 3, 1000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addrs := make([]string, n)
	sess := make([]*lossGuard, n)
	execs := make([]executor, n) // each rank's executor, swapped by the move
	for r := range sess {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[r] = ln.Addr().String()
		cfg := Config{Job: "catch-up", Rank: r, Workers: n, Fallback: FallbackRing, FallbackOnLoss: true}.withDefaults()
		st := newState()
		sw := &switchLanes{cfg: cfg, st: st, job: newJobClient(cfg, st), durations: newDurations(cfg)}
		s := &lossGuard{sw: sw, link: &ringLink{ln: ln}, swap: func(e executor) { execs[r] = e }}
		execs[r] = s
		sess[r] = s
	}
	for _, s := range sess {
		s.link.addrs = addrs
		defer s.link.close()
	}
	// The switch's result of call 5 (float32, as quantized sums come
	// back: values whose every bit matters), and the inputs of call 6.
	result5 := make([]float32, size)
	for i := range result5 {
		result5[i] = float32(math.Sqrt(float64(i)+0.1)) * 1e-3
	}
	input6 := func(r, i int) int32 { return int32(r*1_000_003 + i*7 - 1<<29) }
	garbage := func(x []float32) {
		for i := range x {
			x[i] = -1
		}
	}

	handles := make([]*Handle, n)
	for r, s := range sess {
		if r == 0 {
			s.calls = 6
			s.last.save(engine.Op{DType: dtype.Float32, Data: dtype.Bytes(append([]float32(nil), result5...))})
			in := make([]int32, size)
			for i := range in {
				in[i] = input6(r, i)
			}
			s.saved.save(engine.Op{DType: dtype.Int32, Data: dtype.Bytes(in)})
			partial := make([]int32, size) // partly overwritten by the lost call
			handles[r] = &Handle{ctx: ctx, op: engine.Op{DType: dtype.Int32, Data: dtype.Bytes(partial)}, n: size}
			continue
		}
		s.calls = 5
		s.saved.save(engine.Op{DType: dtype.Float32, Data: dtype.Bytes(make([]float32, size))})
		buf := make([]float32, size)
		garbage(buf)
		handles[r] = &Handle{ctx: ctx, op: engine.Op{DType: dtype.Float32, Data: dtype.Bytes(buf)}, n: size}
	}
	lost := errors.Join(ErrSwitchLost, errors.New("the test took it away"))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, s := range sess {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = s.moveToRing(handles[r], lost, true)
			if r == 0 || errs[r] != nil {
				return
			}
			// Behind: call 5 is done; the application makes call 6.
			for i, v := range dtype.As[float32](handles[r].op.Data) {
				if math.Float32bits(v) != math.Float32bits(result5[i]) {
					errs[r] = errors.New("call 5's result differs from the switch's")
					t.Errorf("rank %d call 5 element %d = %v, want the switch's %v", r, i, v, result5[i])
					return
				}
			}
			in := make([]int32, size)
			for i := range in {
				in[i] = input6(r, i)
			}
			handles[r] = &Handle{ctx: ctx, op: engine.Op{DType: dtype.Int32, Data: dtype.Bytes(in)}, n: size}
			errs[r] = execs[r].execute(handles[r])
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, s := range sess {
		for i, got := range dtype.As[int32](handles[r].op.Data) {
			var want int32
			for q := range n {
				want += input6(q, i)
			}
			if got != want {
				t.Fatalf("rank %d call 6 element %d = %d, want %d", r, i, got, want)
			}
		}
		// Over the ring, rank 0 made call 6; the others finished call 5
		// and made call 6.
		want := uint64(2)
		if r == 0 {
			want = 1
		}
		if st := s.sw.st.stats; st.AllReduces != want || st.Ring != want {
			t.Fatalf("rank %d counts %d calls, %d over the ring, want %d", r, st.AllReduces, st.Ring, want)
		}
		if _, ok := execs[r].(*ringSum); !ok {
			t.Fatalf("rank %d runs its calls through %T, want the ring", r, execs[r])
		}
		if why := s.sw.st.why; why == "" {
			t.Fatalf("rank %d: no reason for the ring", r)
		}
	}
}

// TestFallbackHintAfterSwitchLost: without FallbackOnLoss, a call made
// after the controller said the switch was lost (the session is already
// broken) fails naming the loss and the option, as the call that met the
// loss does.
func TestFallbackHintAfterSwitchLost(t *testing.T) {
	cfg := Config{Job: "hint", Rank: 0, Workers: 2}.withDefaults()
	st := newState()
	s := &switchLanes{cfg: cfg, st: st, job: newJobClient(cfg, st)}
	st.broken = abortedBy(&jobpb.WatchEvent{Aborted: true, Cause: "switch_lost", Reason: "the controller lost the switch"})
	for k := range 2 {
		err := s.execute(&Handle{ctx: context.Background(), op: engine.Op{DType: dtype.Int32, Data: dtype.Bytes(make([]int32, 4))}, n: 4})
		if !errors.Is(err, ErrSwitchLost) || !strings.Contains(err.Error(), "FallbackOnLoss") {
			t.Fatalf("call %d: %v, want ErrSwitchLost naming FallbackOnLoss", k, err)
		}
	}
}

// TestHeldBitsRoundTrip: a kept tensor of any type, of any byte length,
// travels as int32 words (what the ranks behind receive in catchUp) and
// comes back bit for bit.
func TestHeldBitsRoundTrip(t *testing.T) {
	for _, c := range dtype.All() {
		for _, n := range []int{0, 1, 3, 8, 1001} {
			in := dtype.New(c, n)
			dtype.Fill(c, in, 9, 2)
			var b held
			b.save(engine.Op{DType: c, Data: in})
			words := make([]int32, b.words())
			if want := (n*c.Size() + 3) / 4; len(words) != want {
				t.Fatalf("%s x %d: %d words, want %d", c.Name(), n, len(words), want)
			}
			b.bits(words)
			out := engine.Op{DType: c, Data: dtype.New(c, n)}
			setBits(out, words)
			if !bytes.Equal(out.Data, in) {
				t.Fatalf("%s x %d: %x came back as %x", c.Name(), n, in, out.Data)
			}
		}
	}
}
