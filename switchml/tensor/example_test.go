package tensor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorgonia.org/tensor"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
	swtensor "github.com/switchml/switchml-go/switchml/tensor"
)

// A gorgonia dense tensor of float32 or int32 is summed in place, whatever
// its shape. Three ranks join a job on an embedded switch; AllReduce
// blocks until every rank has contributed, so each rank calls it from its
// own goroutine.
func ExampleAllReduce() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab, err := local.Start(ctx, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fab.Close()

	const workers = 3
	tensors := make([]*tensor.Dense, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for rank := range workers {
		tensors[rank] = tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))
		wg.Go(func() {
			sess, err := switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: "tensor", Rank: rank, Workers: workers})
			if err != nil {
				errs[rank] = err
				return
			}
			defer sess.Close()
			errs[rank] = swtensor.AllReduce(ctx, sess, tensors[rank])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tensors[0].Shape(), tensors[0].Data())
	// Output: (2, 3) [3 6 9 12 15 18]
}
