package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

func TestStatusOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, statusOK},
		{invalid("x"), statusInvalid},
		{switchml.Config{Workers: 2, Rank: 5}.Validate(), statusConfig},
		{noHandle("session", 9), statusHandle},
		{fmt.Errorf("join: %w", switchml.ErrControllerUnreachable), statusUnreachable},
		{fmt.Errorf("%w: world size", switchml.ErrJobMismatch), statusMismatch},
		{fmt.Errorf("%w: sizes", errMismatch), statusMismatch},
		{context.DeadlineExceeded, statusTimeout},
		{switchml.ErrTimeoutBudget, statusTimeout},
		// An abort whose cause is a timeout is an abort.
		{fmt.Errorf("%w: rank 1: %w", switchml.ErrAborted, switchml.ErrTimeoutBudget), statusAborted},
		{switchml.ErrClosed, statusClosed},
		{errors.New("disk on fire"), statusOther},
	} {
		if got := statusOf(c.err); got != c.want {
			t.Errorf("statusOf(%v) = %s, want %s", c.err, statusNames[got], statusNames[c.want])
		}
	}
}

func TestHandlesAreNotReused(t *testing.T) {
	var h handles[string]
	a := h.add("a")
	if v, ok := h.take(a); !ok || v != "a" {
		t.Fatalf("take(%d) = %q, %v", a, v, ok)
	}
	if _, ok := h.take(a); ok {
		t.Fatalf("second take of %d succeeded", a)
	}
	if b := h.add("b"); b == a {
		t.Fatalf("handle %d given out twice", a)
	}
}

// TestJobThroughHandles runs a job through the functions behind the
// exports, as C callers reach them: two ranks, an allreduce on memory the
// caller owns, a broadcast, what the lanes moved packets through, and
// closes; over UDP and over shared memory.
func TestJobThroughHandles(t *testing.T) {
	for _, kind := range []string{"", switchml.TransportShm} {
		t.Run("transport="+kind, func(t *testing.T) { jobThroughHandles(t, kind) })
	}
}

func jobThroughHandles(t *testing.T, kind string) {
	sw, addr, err := localStart(kind)
	if err != nil {
		t.Fatal(err)
	}
	want := switchml.TransportUDP
	if kind != "" {
		want = kind
	}
	defer localStop(sw)
	const ranks, n = 2, 5000
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				id, err := join(switchml.Config{Controller: addr, Job: "capi", Rank: r, Workers: ranks, Transport: kind})
				if err != nil {
					return err
				}
				x := make([]int32, n)
				for i := range x {
					x[i] = int32(i * (r + 1))
				}
				if err := allreduce(id, unsafe.Pointer(&x[0]), n, dtype.Int32.Code(), 0); err != nil {
					return err
				}
				for i, v := range x {
					if v != int32(3*i) {
						return fmt.Errorf("x[%d] = %d, want %d", i, v, 3*i)
					}
				}
				if got, err := transportOf(id); err != nil || got != want {
					return fmt.Errorf("transport %q (%v), want %q", got, err, want)
				}
				if st, err := statsOf(id); err != nil || st.AllReduces == 0 || st.Elements < uint64(n) || st.SentBytes < 4*uint64(n) {
					return fmt.Errorf("stats after an allreduce of %d values: %+v (%v), want a call, its values and at least their bytes", n, st, err)
				}
				if v, err := counterOf(id, "elements"); err != nil || v != uint64(n) {
					return fmt.Errorf("counter elements = %d (%v), want %d", v, err, n)
				}
				if b, err := wireBitsOf(id, dtype.BFloat16.Code()); err != nil || b != 16 {
					return fmt.Errorf("bfloat16 travels at %d bits (%v), want 16 by default", b, err)
				}
				buf := []byte("......")
				if r == 1 {
					copy(buf, "from 1")
				}
				if err := broadcast(id, "b", 1, buf, 0); err != nil {
					return err
				}
				if string(buf) != "from 1" {
					return fmt.Errorf("broadcast gave %q", buf)
				}
				if err := allreduce(id, unsafe.Pointer(&x[0]), n, 42, 0); statusOf(err) != statusInvalid {
					return fmt.Errorf("dtype 42: got %v, want an invalid-argument error", err)
				}
				if err := closeSession(id); err != nil {
					return err
				}
				if err := barrier(id, "after", 0); statusOf(err) != statusHandle {
					return fmt.Errorf("barrier after close: got %v, want an unknown-handle error", err)
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestFallbackThroughHandles: the controller is unreachable, so two ranks
// configured with the ring fallback and each other's ring addresses run
// their allreduce over the ring; switchml_fallback's function says so.
func TestFallbackThroughHandles(t *testing.T) {
	var peers []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, ln.Addr().String())
		ln.Close()
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	controller := dead.Addr().String()
	dead.Close() // nothing listens there now
	const n = 3000
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() {
			errs[r] = func() error {
				id, err := join(switchml.Config{Controller: controller, Job: "capi-ring", Rank: r, Workers: 2,
					JoinTimeout: 5 * time.Second, Fallback: "ring", FallbackPeers: splitPeers(strings.Join(peers, " , "))})
				if err != nil {
					return err
				}
				defer closeSession(id)
				on, why, err := fallbackOf(id)
				if err != nil || !on || !strings.Contains(why, "controller") {
					return fmt.Errorf("fallbackOf = %v, %q, %v; want the ring, and the controller named as the reason", on, why, err)
				}
				x := make([]int32, n)
				for i := range x {
					x[i] = int32(i + r)
				}
				if err := allreduce(id, unsafe.Pointer(&x[0]), n, dtype.Int32.Code(), 0); err != nil {
					return err
				}
				for i, v := range x {
					if v != int32(2*i+1) {
						return fmt.Errorf("x[%d] = %d, want %d", i, v, 2*i+1)
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if _, _, err := fallbackOf(12345); statusOf(err) != statusHandle {
		t.Errorf("fallbackOf of no session: %v, want a handle error", err)
	}
}

// TestLengthsAcrossTheBoundary: counts, sizes and timeouts a C caller
// passes are refused with SWITCHML_ERR_INVALID when their byte size runs
// past the address space or a duration would wrap, on a live session, and
// nothing is reduced; a count that fits still sums.
func TestLengthsAcrossTheBoundary(t *testing.T) {
	sw, addr, err := localStart("")
	if err != nil {
		t.Fatal(err)
	}
	defer localStop(sw)
	id, err := join(switchml.Config{Controller: addr, Job: "capi-lengths", Rank: 0, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer closeSession(id)
	x := []float32{1, 2, 3, 4}
	p := unsafe.Pointer(&x[0])
	for _, c := range []struct {
		what  string
		count int64
		code  int
		ms    int64
		want  string
	}{
		// 2^62 float32 values are 2^64 bytes: count*size wraps to 0.
		{"2^62 float32", 1 << 62, dtype.Float32.Code(), 0, "count is 4611686018427387904"},
		{"2^61 float32", 1 << 61, dtype.Float32.Code(), 0, "run past the end of the address space"},
		{"2^63-1 int32", math.MaxInt64, dtype.Int32.Code(), 0, "run past the end of the address space"},
		{"2^63-1 float16", math.MaxInt64, dtype.Float16.Code(), 0, "run past the end of the address space"},
		{"a timeout beyond a duration", 4, dtype.Float32.Code(), math.MaxInt64, "timeout_ms is 9223372036854775807"},
	} {
		if err := allreduce(id, p, c.count, c.code, c.ms); statusOf(err) != statusInvalid || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("allreduce of %s: %v (%s), want SWITCHML_ERR_INVALID saying %q", c.what, err, statusNames[statusOf(err)], c.want)
		}
	}
	for _, size := range []int64{math.MaxInt64, 1 << 56, 1 << 31} {
		if err := broadcastAt(id, "b", 0, p, size, 0); statusOf(err) != statusInvalid || !strings.Contains(fmt.Sprintf("%v", err), fmt.Sprintf("size is %d", size)) {
			t.Errorf("broadcast of %d bytes: %v, want SWITCHML_ERR_INVALID naming the size", size, err)
		}
	}
	if err := allreduce(id, p, int64(len(x)), dtype.Float32.Code(), 0); err != nil || x[3] != 4 {
		t.Fatalf("allreduce of 4 values after the refusals: %v, x = %v", err, x)
	}
	if st, err := statsOf(id); err != nil || st.AllReduces != 1 || st.Elements != 4 {
		t.Errorf("stats %+v (%v): want the one allreduce of 4 values, none for the refused calls", st, err)
	}
}
