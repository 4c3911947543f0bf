package ring_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/switchml/switchml-go/switchml/ring"
)

// Three ranks in one process; normally each runs on its own host with the same Addrs.
func Example() {
	const n = 3
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			return
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	results := make([][]float32, n)
	var wg sync.WaitGroup
	for rank := range n {
		wg.Go(func() {
			r, err := ring.Dial(ctx, ring.Config{Rank: rank, Workers: n, Addrs: addrs, Listener: lns[rank]})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer r.Close()
			x := []float32{float32(rank), 1, 10}
			if err := r.AllReduceFloat32(ctx, x); err != nil {
				fmt.Println(err)
				return
			}
			results[rank] = x
		})
	}
	wg.Wait()
	fmt.Println(results)
	// Output: [[3 3 30] [3 3 30] [3 3 30]]
}
