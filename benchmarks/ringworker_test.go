package benchmarks

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml/ring"
)

// TestRingWorker runs three ranks of the ring baseline in this process:
// each reports the timed calls, a verified sum and its CPU time.
func TestRingWorker(t *testing.T) {
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for r := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[r], addrs[r] = ln, ln.Addr().String()
	}
	reps := make([]WorkerReport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		w := RingWorker{Ring: ring.Config{Rank: r, Workers: n, Addrs: addrs, Listener: lns[r]}, Elements: 3000, Iters: 3, Warmup: 1, Seed: 7, Verify: true}
		wg.Go(func() { reps[r], errs[r] = w.Run(ctx) })
	}
	wg.Wait()
	for r, rep := range reps {
		if errs[r] != nil || rep.Error != "" {
			t.Fatalf("rank %d: %v (report %q)", r, errs[r], rep.Error)
		}
		if !rep.Verified || rep.Rank != r || rep.Workers != n || len(rep.TATs) != 3 || rep.MedianTAT <= 0 || rep.CPULoopUserS == nil || rep.DType != "float32" {
			t.Errorf("rank %d: report %+v: want verified, 3 timed calls, a median and CPU time", r, rep)
		}
	}
}

// TestRingWorkerRefuses: a configuration Check refuses is never dialed, and
// the report says why.
func TestRingWorkerRefuses(t *testing.T) {
	refused := errors.New("bad flags: --workers = 0")
	w := RingWorker{Ring: ring.Config{Workers: 0}, Iters: 1, Check: func(ring.Config) error { return refused }}
	rep, err := w.Run(context.Background())
	if !errors.Is(err, refused) || rep.Error != refused.Error() || rep.Verified {
		t.Errorf("Run: %v, report %+v; want the Check's error", err, rep)
	}
	if _, err := (RingWorker{Iters: 0}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "iterations >= 1") {
		t.Errorf("no iterations: %v", err)
	}
}

// TestCheckRingSum: the check takes every rank's exact sum and refuses an
// element one ulp-of-the-total off beyond the rounding bound.
func TestCheckRingSum(t *testing.T) {
	const n, size = 4, 2048
	x := make([]float32, size)
	for i := range x {
		for r := range n {
			x[i] += ringInput(9, r, i)
		}
	}
	if err := checkRingSum(x, 9, n); err != nil {
		t.Fatalf("the sum of the inputs: %v", err)
	}
	x[1500] += 0.5
	if err := checkRingSum(x, 9, n); err == nil || !strings.Contains(err.Error(), "element 1500") {
		t.Errorf("a wrong element 1500: %v", err)
	}
	if err := checkRingSum(x[:1], 10, n); err == nil {
		t.Errorf("another seed's inputs passed")
	}
}
