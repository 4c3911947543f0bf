package switchml_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
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
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Println(err)
		return
	}
	// Every rank holds the same sum: 1+2+3+4 = 10 times the base values.
	fmt.Println(grads[0])
	// Output: [5 10 15 20]
}

// StartFloat32 and its kind return at once with a Handle, so that a
// training step can go on computing (the next layer's gradient) while an
// earlier bucket is summed. Here one goroutine drives both ranks, which
// only the asynchronous calls allow: it starts every rank's calls, in the
// same order on each, and then waits for them.
func ExampleSession_StartFloat32() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sessions, closeAll, err := joinLocal(ctx, "async", 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll()

	weights := make([][]float32, len(sessions))
	counts := make([][]int32, len(sessions))
	var handles []*switchml.Handle
	for rank, sess := range sessions {
		weights[rank] = []float32{0.25, -1, 3}
		counts[rank] = []int32{int32(rank), 100}
		// Neither slice may be touched until its handle is done.
		handles = append(handles, sess.StartFloat32(ctx, weights[rank]), sess.StartInt32(ctx, counts[rank]))
	}
	for _, h := range handles {
		if err := h.Wait(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("weights", weights[0])
	fmt.Println("counts", counts[0])
	// Output:
	// weights [0.5 -2 6]
	// counts [1 200]
}

// joinLocal starts an embedded switch and joins every rank of a job to it,
// as the package example does step by step. closeAll ends the sessions and
// the switch.
func joinLocal(ctx context.Context, job string, workers int) (sessions []*switchml.Session, closeAll func(), err error) {
	fab, err := local.Start(ctx, local.Options{})
	if err != nil {
		return nil, nil, err
	}
	sessions = make([]*switchml.Session, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for rank := range workers {
		// Join returns once every rank has joined: the ranks join together.
		wg.Go(func() {
			sessions[rank], errs[rank] = switchml.Join(ctx, switchml.Config{
				Controller: fab.ControllerAddr(), Job: job, Rank: rank, Workers: workers,
			})
		})
	}
	wg.Wait()
	closeAll = func() {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
		fab.Close()
	}
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, nil, err
	}
	return sessions, closeAll, nil
}
