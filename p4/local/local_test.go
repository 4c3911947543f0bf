package local_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
	swtensor "github.com/switchml/switchml-go/switchml/tensor"
)

// TestJobOnEmbeddedFabric runs workers as goroutines against an embedded
// switch and controller and checks every call type of the public API.
func TestJobOnEmbeddedFabric(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	const n = 3
	const size = 10_000
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = worker(ctx, fab.ControllerAddr(), r, n, size)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if c := fab.Counters(); c[switchjob.StatMulticast] == 0 {
		t.Fatalf("the switch multicast nothing: counters %v", c)
	}
}

func worker(ctx context.Context, ctl string, rank, n, size int) error {
	sess, err := switchml.Join(ctx, switchml.Config{Controller: ctl, Job: "embedded", Rank: rank, Workers: n, Lanes: 2, Window: 16})
	if err != nil {
		return err
	}
	defer sess.Close()

	ints := make([]int32, size)
	floats := make([]float32, size)
	for i := range ints {
		ints[i] = int32(i*(rank+1)) - 5000
		floats[i] = float32(i%100) * 0.25 * float32(rank+1)
	}
	// Async calls complete in order.
	hi := sess.StartInt32(ctx, ints)
	hf := sess.StartFloat32(ctx, floats)
	if err := hi.Wait(ctx); err != nil {
		return fmt.Errorf("int32: %w", err)
	}
	if err := hf.Wait(ctx); err != nil {
		return fmt.Errorf("float32: %w", err)
	}
	tri := n * (n + 1) / 2
	for i := range ints {
		if want := int32(i*tri) - int32(5000*n); ints[i] != want {
			return fmt.Errorf("int32 element %d = %d, want %d", i, ints[i], want)
		}
		want := float32(i%100) * 0.25 * float32(tri)
		if d := floats[i] - want; d > 1e-4 || d < -1e-4 {
			return fmt.Errorf("float32 element %d = %v, want %v", i, floats[i], want)
		}
	}
	// A gorgonia tensor.
	tt := tensor.New(tensor.WithShape(4, 5), tensor.WithBacking(make([]float32, 20)))
	for i := range 20 {
		tt.Data().([]float32)[i] = float32(i + rank)
	}
	if err := swtensor.AllReduce(ctx, sess, tt); err != nil {
		return fmt.Errorf("tensor: %w", err)
	}
	for i, v := range tt.Data().([]float32) {
		if want := float32(n*i + n*(n-1)/2); v != want {
			return fmt.Errorf("tensor element %d = %v, want %v", i, v, want)
		}
	}
	if err := swtensor.AllReduce(ctx, sess, tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))); !errors.Is(err, swtensor.ErrUnsupported) {
		return fmt.Errorf("float64 tensor: %v, want ErrUnsupported", err)
	}
	one := []int32{int32(rank)}
	if err := sess.AllReduceInt32(ctx, one); err != nil {
		return fmt.Errorf("one-element sum: %w", err)
	}
	if one[0] != int32(n*(n-1)/2) {
		return fmt.Errorf("one-element sum %d", one[0])
	}
	return nil
}

// TestMemoryDoesNotGrowWithTensor: what an allreduce allocates (workers,
// switch and controller all in this process) does not depend on the
// tensor's size; the tensor itself is the caller's, reduced in place.
func TestMemoryDoesNotGrowWithTensor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	const n = 2
	sessions := make([]*switchml.Session, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessions[r], errs[r] = switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: "memory", Rank: r, Workers: n})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	// allocated runs one allreduce of size floats on every rank and returns
	// the bytes the process allocated meanwhile (tensors made beforehand).
	allocated := func(size int) uint64 {
		xs := make([][]float32, n)
		for r := range xs {
			xs[r] = make([]float32, size)
			for i := range xs[r] {
				xs[r][i] = float32(i%1000) * 0.5
			}
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for r := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = sessions[r].AllReduceFloat32(ctx, xs[r])
			}()
		}
		wg.Wait()
		runtime.ReadMemStats(&after)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d, %d floats: %v", r, size, err)
			}
		}
		if got, want := xs[0][size-1], float32((size-1)%1000)*0.5*n; got != want {
			t.Fatalf("%d floats: last element %v, want %v", size, got, want)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	allocated(1 << 16) // warm-up: buffers made once per session
	small := allocated(1 << 18)
	large := allocated(1 << 23) // 32 MiB per rank
	t.Logf("allocated during an allreduce: %d bytes for 1 MiB tensors, %d bytes for 32 MiB tensors", small, large)
	if large > 1<<20 || large > 4*small+256<<10 {
		t.Fatalf("an allreduce of 32 MiB tensors allocated %d bytes (1 MiB tensors: %d): memory grows with the tensor", large, small)
	}
}
