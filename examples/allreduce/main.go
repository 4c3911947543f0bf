// Command allreduce is the smallest complete SwitchML program: it starts an
// embedded software switch and controller, runs four workers as goroutines
// and sums a gradient-sized float32 vector across them.
//
//	go run ./examples/allreduce [--port BASE]
//
// With --port, the switch's data plane, its P4Runtime server and the
// controller listen on 127.0.0.1 at BASE, BASE+1 and BASE+2 (for a
// firewall, or to watch them); by default on free ports.
//
// In a real job each worker is its own process (or host) and calls
// switchml.Join with the address of a running controller.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
)

func main() {
	port := flag.Int("port", 0, "pin the switch's and the controller's ports on 127.0.0.1 from this one (0: free ports)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	fab, err := local.Start(ctx, local.Options{Port: *port})
	if err != nil {
		log.Fatal(err)
	}
	defer fab.Close()

	const workers, size = 4, 1 << 20
	var wg sync.WaitGroup
	for rank := 0; rank < workers; rank++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := switchml.Join(ctx, switchml.Config{
				Controller: fab.ControllerAddr(), Job: "example", Rank: rank, Workers: workers,
			})
			if err != nil {
				log.Fatalf("rank %d: %v", rank, err)
			}
			defer sess.Close()

			grads := make([]float32, size)
			for i := range grads {
				grads[i] = float32(rank+1) * 0.001 * float32(i%1000)
			}
			start := time.Now()
			if err := sess.AllReduceFloat32(ctx, grads); err != nil {
				log.Fatalf("rank %d: %v", rank, err)
			}
			// 1+2+3+4 = 10 times the rank-1 value.
			fmt.Printf("rank %d: grads[999] = %.4f (want %.4f) in %v\n", rank, grads[999], 10*0.001*999, time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
}
