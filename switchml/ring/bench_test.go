package ring

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// benchAllReduce times allreduces of elems float32 on an n-rank ring in this
// process. Bytes per op is the tensor size (S), so the reported MB/s is the goodput
// of one rank; each rank actually sends and receives 2(n-1)/n times that.
func benchAllReduce(b *testing.B, n, elems, chunkBytes int) {
	rings := dialAll(b, n, chunkBytes)
	xs := make([][]float32, n)
	for r := range xs {
		xs[r] = make([]float32, elems)
		for i := range xs[r] {
			xs[r][i] = float32(i%1000) * 0.001
		}
	}
	// One long-lived goroutine per rank, released once per iteration, so that the
	// timing and allocation counts are those of the allreduce alone.
	start := make([]chan struct{}, n)
	var done sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		start[r] = make(chan struct{})
		go func() {
			for range start[r] {
				if errs[r] == nil {
					errs[r] = rings[r].AllReduceFloat32(context.Background(), xs[r])
				}
				done.Done()
			}
		}()
	}
	defer func() {
		for _, c := range start {
			close(c)
		}
	}()
	run := func() {
		done.Add(n)
		for _, c := range start {
			c <- struct{}{}
		}
		done.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	run() // first call sizes nothing new, but warms the connections
	b.SetBytes(int64(4 * elems))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		run()
	}
}

// BenchmarkRingAllReduce is the reference figure: 4 ranks, 16 MiB of float32.
func BenchmarkRingAllReduce(b *testing.B) {
	benchAllReduce(b, 4, 4<<20, 0)
}

// BenchmarkRingAllReduceSweep shows how ring size, tensor size and chunk size move
// the figure.
func BenchmarkRingAllReduceSweep(b *testing.B) {
	for _, tc := range []struct{ n, elems, chunk int }{
		{2, 4 << 20, 0},
		{8, 4 << 20, 0},
		{4, 4 << 20, 64 << 10},
		{4, 4 << 20, 1 << 20},
		{4, 1 << 10, 0},
		{4, 256 << 10, 0},
	} {
		b.Run(fmt.Sprintf("n=%d/bytes=%d/chunk=%d", tc.n, 4*tc.elems, tc.chunk), func(b *testing.B) {
			benchAllReduce(b, tc.n, tc.elems, tc.chunk)
		})
	}
}
