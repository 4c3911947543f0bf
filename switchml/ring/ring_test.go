package ring

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// listeners reserves n loopback ports race-free: the listeners are handed to Dial.
func listeners(t testing.TB, n int) ([]net.Listener, []string) {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		addrs[i] = ln.Addr().String()
	}
	return lns, addrs
}

// dialAll builds an n-rank ring in this process.
func dialAll(t testing.TB, n, chunkBytes int) []*Ring {
	t.Helper()
	lns, addrs := listeners(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rings := make([]*Ring, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rings[i], errs[i] = Dial(ctx, Config{Rank: i, Workers: n, Addrs: addrs, ChunkBytes: chunkBytes, Listener: lns[i]})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Dial rank %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, r := range rings {
			r.Close()
		}
	})
	return rings
}

// onAll runs f for every rank concurrently and returns the per-rank errors.
func onAll(rings []*Ring, f func(rank int, r *Ring) error) []error {
	errs := make([]error, len(rings))
	var wg sync.WaitGroup
	for i, r := range rings {
		wg.Go(func() { errs[i] = f(i, r) })
	}
	wg.Wait()
	return errs
}

func sizesFor(n int) []int {
	s := []int{0, 1, 2, 3, 5, n - 1, n, n + 1, 2*n - 1, 100, 1023, 4097, 65537}
	if testing.Short() {
		s = s[:len(s)-1]
	}
	return s
}

func TestAllReduceInt32Exact(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		for _, chunk := range []int{0, 4, 1000, 4096} {
			t.Run(fmt.Sprintf("n=%d/chunk=%d", n, chunk), func(t *testing.T) {
				if testing.Short() && n == 8 && chunk == 4 {
					t.Skip("4-byte chunks at n=8 are slow")
				}
				rings := dialAll(t, n, chunk)
				rng := rand.New(rand.NewPCG(uint64(n), uint64(chunk)))
				// One ring serves every size: this checks buffer reuse and that the
				// op sequence stays in step across calls.
				for _, size := range sizesFor(n) {
					in := make([][]int32, n)
					want := make([]int32, size)
					for r := range n {
						in[r] = make([]int32, size)
						for i := range in[r] {
							in[r][i] = int32(rng.Uint32()) // full range: sums wrap
							want[i] += in[r][i]
						}
					}
					errs := onAll(rings, func(rank int, r *Ring) error {
						return r.AllReduceInt32(context.Background(), in[rank])
					})
					for r := range n {
						if errs[r] != nil {
							t.Fatalf("size %d rank %d: %v", size, r, errs[r])
						}
						for i := range want {
							if in[r][i] != want[i] {
								t.Fatalf("size %d rank %d element %d: got %d, want %d", size, r, i, in[r][i], want[i])
							}
						}
					}
				}
			})
		}
	}
}

// checkFloatSums compares every rank's result with a float64 reference: a ring sums
// in float32 along one order, so the error is bounded by (n-1) roundings of partial
// sums no larger than sum|x|. All ranks must agree bit for bit.
func checkFloatSums(t *testing.T, in [][]float32, ref, absSum []float64) {
	t.Helper()
	n := len(in)
	eps := math.Pow(2, -24)
	for i := range ref {
		tol := float64(n)*eps*absSum[i] + 1e-30
		if d := math.Abs(float64(in[0][i]) - ref[i]); d > tol {
			t.Fatalf("element %d: got %g, want %g (error %g > %g)", i, in[0][i], ref[i], d, tol)
		}
		for r := 1; r < n; r++ {
			if math.Float32bits(in[r][i]) != math.Float32bits(in[0][i]) {
				t.Fatalf("element %d: rank %d has %g, rank 0 has %g; ranks must agree exactly", i, r, in[r][i], in[0][i])
			}
		}
	}
}

func TestAllReduceFloat32(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		for _, viewIO := range []bool{true, false} {
			t.Run(fmt.Sprintf("n=%d/viewIO=%v", n, viewIO), func(t *testing.T) {
				rings := dialAll(t, n, 1024)
				for _, r := range rings {
					r.viewIO = r.viewIO && viewIO
				}
				rng := rand.New(rand.NewPCG(uint64(n), 7))
				for _, size := range sizesFor(n) {
					in := make([][]float32, n)
					ref := make([]float64, size)
					absSum := make([]float64, size)
					for r := range n {
						in[r] = make([]float32, size)
						for i := range in[r] {
							// Mixed signs and magnitudes, so cancellation happens.
							v := float32((rng.Float64()*2 - 1) * math.Pow(10, float64(rng.IntN(7)-3)))
							in[r][i] = v
							ref[i] += float64(v)
							absSum[i] += math.Abs(float64(v))
						}
					}
					errs := onAll(rings, func(rank int, r *Ring) error {
						return r.AllReduceFloat32(context.Background(), in[rank])
					})
					for r, err := range errs {
						if err != nil {
							t.Fatalf("size %d rank %d: %v", size, r, err)
						}
					}
					checkFloatSums(t, in, ref, absSum)
				}
			})
		}
	}
}

func TestMixedOpsInterleaved(t *testing.T) {
	const n = 3
	rings := dialAll(t, n, 64)
	for round := range 5 {
		size := 10 + 37*round
		f := make([][]float32, n)
		i32 := make([][]int32, n)
		for r := range n {
			f[r] = make([]float32, size)
			i32[r] = make([]int32, size)
			for i := range size {
				f[r][i] = float32(r + i)      // small integers: float sums are exact
				i32[r][i] = int32(r*1000 - i) // negative values included
			}
		}
		errs := onAll(rings, func(rank int, r *Ring) error {
			if err := r.AllReduceFloat32(context.Background(), f[rank]); err != nil {
				return err
			}
			return r.AllReduceInt32(context.Background(), i32[rank])
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d rank %d: %v", round, r, err)
			}
		}
		for r := range n {
			for i := range size {
				if want := float32(3*i + 3); f[r][i] != want {
					t.Fatalf("round %d rank %d float %d: got %g, want %g", round, r, i, f[r][i], want)
				}
				if want := int32(3000 - 3*i); i32[r][i] != want {
					t.Fatalf("round %d rank %d int %d: got %d, want %d", round, r, i, i32[r][i], want)
				}
			}
		}
	}
}

// expectAllFail asserts every rank returned an error and at least one is an
// ErrMismatch that explains it with want.
func expectAllFail(t *testing.T, errs []error, want string) {
	t.Helper()
	explained := false
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: mismatched call succeeded", r)
		}
		if errors.Is(err, ErrMismatch) && strings.Contains(err.Error(), want) {
			explained = true
		}
	}
	if !explained {
		t.Fatalf("no rank's error mentions %q: %v", want, errs)
	}
}

func TestMismatchedCount(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rings := dialAll(t, n, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs := onAll(rings, func(rank int, r *Ring) error {
				size := 1000
				if rank == 1 {
					size = 1001
				}
				return r.AllReduceFloat32(ctx, make([]float32, size))
			})
			// Whichever neighbour of rank 1 reads the other's header first explains;
			// the rest see the ring break.
			expectAllFail(t, errs, "allreduce #1 (AllReduceFloat32): ranks disagree: rank")
			// The ring stays broken and says so.
			if err := rings[0].AllReduceFloat32(ctx, nil); !errors.Is(err, ErrBroken) {
				t.Fatalf("call after failure: %v", err)
			}
		})
	}
}

func TestMismatchedType(t *testing.T) {
	rings := dialAll(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := onAll(rings, func(rank int, r *Ring) error {
		if rank == 2 {
			return r.AllReduceInt32(ctx, make([]int32, 50))
		}
		return r.AllReduceFloat32(ctx, make([]float32, 50))
	})
	expectAllFail(t, errs, "allreduce #1: ranks disagree: rank")
}

func TestMismatchedSequence(t *testing.T) {
	rings := dialAll(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Rank 1 acts as if it had made a call that rank 0 did not (a real lone call
	// would just wait for rank 0 forever).
	errs := onAll(rings, func(rank int, r *Ring) error {
		if rank == 0 {
			return r.AllReduceInt32(ctx, make([]int32, 8))
		}
		r.seq++ // as if this rank had made a call the other one did not
		return r.AllReduceInt32(ctx, make([]int32, 8))
	})
	expectAllFail(t, errs, "is at #")
}

func TestCancel(t *testing.T) {
	rings := dialAll(t, 3, 0)
	// Only rank 0 calls, so it blocks until canceled.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rings[0].AllReduceFloat32(ctx, make([]float32, 1<<16)) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("canceled allreduce did not return")
	}
	// The break travels around the ring: rank 1 reads from rank 0, rank 2 from 1.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	for _, r := range rings[1:] {
		err := r.AllReduceFloat32(ctx2, make([]float32, 10))
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rank %d: got %v after rank 0 was canceled, want a broken-ring error", r.Rank(), err)
		}
	}
}

func TestDeadline(t *testing.T) {
	rings := dialAll(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := rings[1].AllReduceInt32(ctx, make([]int32, 100))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
}

func TestCanceledBeforeStartKeepsRing(t *testing.T) {
	rings := dialAll(t, 2, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rings[0].AllReduceInt32(ctx, make([]int32, 4)); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	errs := onAll(rings, func(rank int, r *Ring) error {
		x := []int32{int32(rank), 1}
		if err := r.AllReduceInt32(context.Background(), x); err != nil {
			return err
		}
		if x[0] != 1 || x[1] != 2 {
			return fmt.Errorf("got %v, want [1 2]", x)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestClose(t *testing.T) {
	rings := dialAll(t, 2, 0)
	done := make(chan error, 1)
	go func() { done <- rings[0].AllReduceFloat32(context.Background(), make([]float32, 1000)) }()
	time.Sleep(10 * time.Millisecond)
	if err := rings[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("call interrupted by Close: got %v, want ErrClosed", err)
	}
	if err := rings[0].AllReduceFloat32(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: got %v, want ErrClosed", err)
	}
	if err := rings[0].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The peer sees the connection drop instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := rings[1].AllReduceFloat32(ctx, make([]float32, 1000))
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("peer of closed rank: got %v, want a connection error", err)
	}
}

func TestSingleRank(t *testing.T) {
	r, err := Dial(context.Background(), Config{Rank: 0, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{1, 2, 3}
	if err := r.AllReduceFloat32(context.Background(), x); err != nil || x[0] != 1 || x[2] != 3 {
		t.Fatalf("got %v, %v", x, err)
	}
	if err := r.AllReduceInt32(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := r.AllReduceInt32(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Rank: 0, Workers: 0}, "Workers = 0"},
		{Config{Rank: 2, Workers: 2, Addrs: []string{"a:1", "b:1"}}, "Rank = 2 out of range"},
		{Config{Rank: -1, Workers: 2, Addrs: []string{"a:1", "b:1"}}, "out of range"},
		{Config{Rank: 0, Workers: 3, Addrs: []string{"a:1", "b:1"}}, "2 Addrs for 3 workers"},
		{Config{Rank: 0, Workers: 1, ChunkBytes: -1}, "ChunkBytes"},
	} {
		_, err := Dial(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestDialMissingPeer(t *testing.T) {
	lns, addrs := listeners(t, 2)
	lns[1].Close() // rank 1 never comes up
	_, err := Dial(context.Background(), Config{Rank: 0, Workers: 2, Addrs: addrs, Listener: lns[0], DialTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), addrs[1]) {
		t.Fatalf("got %v, want an error naming rank 1 at %s", err, addrs[1])
	}
}

func TestDialWorldMismatch(t *testing.T) {
	lns, addrs := listeners(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfgs := []Config{
		{Rank: 0, Workers: 2, Addrs: addrs, Listener: lns[0]},
		// Rank 1 believes in three ranks; its next rank (2) is at rank 0's address.
		{Rank: 1, Workers: 3, Addrs: []string{addrs[0], addrs[1], addrs[0]}, Listener: lns[1]},
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() {
			r, err := Dial(ctx, cfg)
			if r != nil {
				r.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "Workers = ") {
			t.Errorf("rank %d: got %v, want a world size mismatch", i, err)
		}
	}
}

func TestDialIgnoresStrangers(t *testing.T) {
	lns, addrs := listeners(t, 2)
	// A client that is not a ring rank connects first and sends junk; another
	// connects and says nothing until it is dropped.
	junk, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	junk.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	rings := make([]*Ring, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			rings[i], errs[i] = Dial(context.Background(), Config{Rank: i, Workers: 2, Addrs: addrs, Listener: lns[i], DialTimeout: 10 * time.Second})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
		defer rings[i].Close()
	}
	errs = onAll(rings, func(rank int, r *Ring) error {
		x := []int32{int32(rank + 1)}
		if err := r.AllReduceInt32(context.Background(), x); err != nil {
			return err
		}
		if x[0] != 3 {
			return fmt.Errorf("got %d, want 3", x[0])
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestDialListensOnAddr(t *testing.T) {
	// Without a Listener, Dial listens on Addrs[Rank] itself. The ports
	// are free when listeners returns them, but another process may take
	// one before Dial listens: then the test tries fresh ports, and fails
	// on any other error.
	var rings []*Ring
	for attempt := 1; rings == nil; attempt++ {
		lns, addrs := listeners(t, 2)
		for _, ln := range lns {
			ln.Close()
		}
		rings = make([]*Ring, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				rings[i], errs[i] = Dial(context.Background(), Config{Rank: i, Workers: 2, Addrs: addrs, DialTimeout: 10 * time.Second})
			})
		}
		wg.Wait()
		taken := slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, syscall.EADDRINUSE) })
		for i, err := range errs {
			switch {
			case err == nil:
				defer rings[i].Close()
			case taken && attempt < 5:
				t.Logf("attempt %d, rank %d: %v (the port was taken meanwhile: trying others)", attempt, i, err)
			default:
				t.Fatalf("rank %d: %v", i, err)
			}
		}
		if taken {
			rings = nil
		}
	}
	errs := onAll(rings, func(rank int, r *Ring) error {
		x := []float32{1, float32(rank + 1), -2.5}
		if err := r.AllReduceFloat32(context.Background(), x); err != nil {
			return err
		}
		if want := []float32{2, 3, -5}; !slices.Equal(x, want) {
			return fmt.Errorf("sums %v, want %v", x, want)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestSegments(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for count := 0; count < 40; count++ {
			next := 0
			for i := range n {
				off, l := segment(i, n, count)
				if off != next || l < count/n || l > count/n+1 {
					t.Fatalf("n=%d count=%d segment %d: off %d len %d", n, count, i, off, l)
				}
				next = off + l
			}
			if next != count {
				t.Fatalf("n=%d count=%d: segments cover %d", n, count, next)
			}
		}
	}
}

// pipeRings builds an n-rank ring over in-memory connections (net.Pipe,
// which moves no byte until the other end reads), for tests in a
// testing/synctest bubble, where time is fake and moves only while every
// goroutine waits.
func pipeRings(n int, stall time.Duration) []*Ring {
	rings := make([]*Ring, n)
	for i := range rings {
		rings[i] = &Ring{rank: i, n: n, chunkElems: DefaultChunkBytes / 4, stall: stall,
			viewIO: nativeLittleEndian && !raceEnabled, dead: make(chan struct{}),
			prevAddr: fmt.Sprintf("pipe %d", (i-1+n)%n), nextAddr: fmt.Sprintf("pipe %d", (i+1)%n)}
	}
	prev := make([]net.Conn, n)
	next := make([]net.Conn, n)
	for i := range rings {
		next[i], prev[(i+1)%n] = net.Pipe()
	}
	for i, r := range rings {
		r.start(prev[i], next[i])
	}
	return rings
}

// TestStallTimeout, on a fake clock: ranks that start a call up to just
// under StallTimeout apart complete it; when rank 2 of 3 never makes the
// call, rank 0 (whose previous rank it is) fails exactly StallTimeout
// after it started waiting, naming the stall, and rank 1 fails with it,
// instead of both blocking until their context ends.
func TestStallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stall = 300 * time.Millisecond
		rings := pipeRings(3, stall)
		defer func() {
			for _, r := range rings {
				r.Close()
			}
		}()
		ctx := context.Background()
		x := make([][]int32, 3)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i, r := range rings {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * (stall - time.Millisecond) / 2)
				x[i] = []int32{int32(i), 1}
				errs[i] = r.AllReduceInt32(ctx, x[i])
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("a call whose ranks started %v apart at most failed: %v", stall-time.Millisecond, err)
		}
		for i := range x {
			if x[i][0] != 3 || x[i][1] != 3 {
				t.Fatalf("rank %d sums %v, want [3 3]", i, x[i])
			}
		}

		start := time.Now()
		var failedAfter time.Duration
		errs = make([]error, 2)
		for i, r := range rings[:2] {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * stall / 3)
				errs[i] = r.AllReduceInt32(ctx, make([]int32, 1000))
				if i == 0 {
					failedAfter = time.Since(start)
				}
			})
		}
		wg.Wait()
		if !errors.Is(errs[0], ErrStalled) || !strings.Contains(errs[0].Error(), "receiving from rank 2") || !strings.Contains(errs[0].Error(), "nothing moved for 300ms") {
			t.Errorf("rank 0 (whose previous rank stalled): %v; want the stall named", errs[0])
		}
		if failedAfter != stall {
			t.Errorf("rank 0 failed %v after it started waiting, want StallTimeout (%v)", failedAfter, stall)
		}
		if errs[1] == nil {
			t.Error("rank 1 returned without its stalled peer")
		}
	})
}
