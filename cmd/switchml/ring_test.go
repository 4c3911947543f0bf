package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
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
	reps := make([]benchmarks.WorkerReport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		w := ringWorker{Ring: ring.Config{Rank: r, Workers: n, Addrs: addrs, Listener: lns[r]}, Elements: 3000, Iters: 3, Warmup: 1, Seed: 7, Verify: true}
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

// TestRingWorkerRefuses: a configuration ring.Dial would refuse is refused
// before dialing, naming the flags, and the report says why.
func TestRingWorkerRefuses(t *testing.T) {
	for _, tc := range []struct {
		w    ringWorker
		want []string
	}{
		{ringWorker{Ring: ring.Config{Workers: 0}, Iters: 1}, []string{"--workers = 0", "at least 1"}},
		{ringWorker{Ring: ring.Config{Workers: 2, Rank: 2, Addrs: []string{"a:1", "b:2"}}, Iters: 1}, []string{"--rank = 2", "rank < --workers (2)"}},
		{ringWorker{Ring: ring.Config{Workers: 3, Addrs: []string{"a:1", "b:2"}}, Iters: 1}, []string{"--addrs has 2 addresses for --workers 3"}},
		{ringWorker{Ring: ring.Config{Workers: 1, ChunkBytes: -1, DialTimeout: -time.Second}, Iters: 1}, []string{"--chunk-bytes = -1", "--dial-timeout = -1s"}},
		{ringWorker{Ring: ring.Config{Workers: 1}, Iters: 0}, []string{"--iters >= 1"}},
	} {
		rep, err := tc.w.Run(context.Background())
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) || rep.Error != err.Error() || rep.Verified {
				t.Errorf("%+v: %v (report %+v); want an error with %q in the report too", tc.w, err, rep, want)
			}
		}
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
	if err := checkRingSum(x, 0, 9, n); err != nil {
		t.Fatalf("the sum of the inputs: %v", err)
	}
	x[1500] += 0.5
	if err := checkRingSum(x, 0, 9, n); err == nil || !strings.Contains(err.Error(), "element 1500") {
		t.Errorf("a wrong element 1500: %v", err)
	}
	if err := checkRingSum(x[:1], 0, 10, n); err == nil {
		t.Errorf("another seed's inputs passed")
	}
}
