package switchml_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"gorgonia.org/tensor"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/local"
)

// Four workers, here goroutines of one process, join the same job on an
// embedded software switch and sum a gradient. In a real job each worker
// is a process of its own and Controller is the address of a running
// controller (switchml controller).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab, err := local.Start(ctx, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fab.Close()

	const workers = 4
	grads := make([][]float32, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for rank := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := switchml.Join(ctx, switchml.Config{
				Controller: fab.ControllerAddr(), Job: "example", Rank: rank, Workers: workers,
			})
			if err != nil {
				errs[rank] = err
				return
			}
			defer sess.Close()
			// Rank r holds (r+1) times 0.5, 1, 1.5, 2.
			g := []float32{0.5, 1, 1.5, 2}
			for i := range g {
				g[i] *= float32(rank + 1)
			}
			errs[rank] = sess.AllReduceFloat32(ctx, g)
			grads[rank] = g
		}()
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			fmt.Printf("rank %d: %v\n", rank, err)
			return
		}
	}
	// Every rank holds the same sum: 1+2+3+4 = 10 times the base values.
	fmt.Println(grads[0])
	// Output: [5 10 15 20]
}

// StartFloat32 and its kind return at once with a Handle, so that a
// training step can go on computing (the next layer's gradient) while an
// earlier bucket is summed. Every rank starts the same calls in the same
// order; Wait collects each result.
func ExampleSession_StartFloat32() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab, err := local.Start(ctx, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fab.Close()

	const workers = 2
	type buckets struct {
		weights []float32
		counts  []int32
	}
	got := make([]buckets, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for rank := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := switchml.Join(ctx, switchml.Config{
				Controller: fab.ControllerAddr(), Job: "async", Rank: rank, Workers: workers,
			})
			if err != nil {
				errs[rank] = err
				return
			}
			defer sess.Close()
			b := buckets{weights: []float32{0.25, -1, 3}, counts: []int32{int32(rank), 100}}
			weights := sess.StartFloat32(ctx, b.weights)
			counts := sess.StartInt32(ctx, b.counts)
			// Neither slice may be touched until its handle is done.
			if err := weights.Wait(ctx); err != nil {
				errs[rank] = err
				return
			}
			errs[rank] = counts.Wait(ctx)
			got[rank] = b
		}()
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			fmt.Printf("rank %d: %v\n", rank, err)
			return
		}
	}
	fmt.Println("weights", got[0].weights)
	fmt.Println("counts", got[0].counts)
	// Output:
	// weights [0.5 -2 6]
	// counts [1 200]
}

// A gorgonia dense tensor of float32 or int32 is summed in place, whatever
// its shape.
func ExampleSession_AllReduceTensor() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab, err := local.Start(ctx, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fab.Close()

	const workers = 3
	results := make([]*tensor.Dense, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for rank := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := switchml.Join(ctx, switchml.Config{
				Controller: fab.ControllerAddr(), Job: "tensor", Rank: rank, Workers: workers,
			})
			if err != nil {
				errs[rank] = err
				return
			}
			defer sess.Close()
			t := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))
			errs[rank] = sess.AllReduceTensor(ctx, t)
			results[rank] = t
		}()
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			fmt.Printf("rank %d: %v\n", rank, err)
			return
		}
	}
	t := results[0]
	fmt.Println(t.Shape(), t.Data())
	// Output: (2, 3) [3 6 9 12 15 18]
}
