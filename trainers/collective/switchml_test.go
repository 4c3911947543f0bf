package collective

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml"
)

// TestSwitchMLBackendSums aggregates through the embedded software switch:
// real UDP, a controller programming the switch over P4Runtime.
func TestSwitchMLBackendSums(t *testing.T) {
	fab := local.ForTest(t, local.Options{})
	const n, length = 3, 5000
	// The library's default packet, and one only the extended header carries.
	for _, pe := range []int{0, 1000} {
		out := runWorkers(t, n, func(ctx context.Context, r int) (Backend, error) {
			return Dial(ctx, Config{Kind: SwitchML, Rank: r, Workers: n, Controller: fab.ControllerAddr(), Job: "collective-test", PacketElements: pe})
		}, length)
		// Inputs below 3*5000 < 2^14 in magnitude: every block exponent is at most 14.
		bound := quant.ErrorBound(n, 14)
		k := float64(n * (n + 1) / 2)
		for r, y := range out {
			for i, v := range y {
				if want := k * (float64(i) + 0.5); math.Abs(float64(v)-want) > bound {
					t.Fatalf("%d values per packet: rank %d element %d = %v, want %v within %g", pe, r, i, v, want, bound)
				}
			}
		}
	}
}

// TestSwitchMLSparseBackend sums mostly-zero tensors over the switchml-sparse
// backend: the sums are right, and each rank sends far fewer packets than
// the tensor has blocks, which only the sparse mode does.
func TestSwitchMLSparseBackend(t *testing.T) {
	fab := local.ForTest(t, local.Options{})
	const n, length, k = 3, 100_000, 256
	kind, err := ParseKind("switchml-sparse")
	if err != nil {
		t.Fatal(err)
	}
	// Rank r holds values in block 10*(r+1) only.
	input := func(r int) []float32 {
		x := make([]float32, length)
		for i := range k {
			x[10*(r+1)*k+i] = float32(r+1) * (float32(i) + 0.5)
		}
		return x
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	out := make([][]float32, n)
	packets := make([]uint64, n)
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Dial(ctx, Config{Kind: kind, Rank: r, Workers: n, Controller: fab.ControllerAddr(), Job: "collective-sparse", PacketElements: k})
			if err != nil {
				errs[r] = err
				return
			}
			defer b.Close()
			out[r] = input(r)
			if errs[r] = b.AllReduceFloat32(ctx, out[r]); errs[r] != nil {
				return
			}
			s, ok := b.(interface{ Stats() switchml.Stats })
			if !ok {
				errs[r] = fmt.Errorf("the backend (%T) has no Stats", b)
				return
			}
			packets[r] = s.Stats().Packets
		}()
	}
	wg.Wait()
	want := make([]float64, length)
	for r := range n {
		for i, v := range input(r) {
			want[i] += float64(v)
		}
	}
	bound := quant.ErrorBound(n, 10) // every input is below 2^10
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i, v := range out[r] {
			if math.Abs(float64(v)-want[i]) > bound {
				t.Fatalf("rank %d element %d = %v, want %v within %g", r, i, v, want[i], bound)
			}
		}
		// The dense mode sends every one of the length/k blocks.
		if packets[r] > length/k/4 {
			t.Errorf("rank %d sent %d packets for a tensor of %d blocks, 3 of them non-zero: the backend did not run sparse", r, packets[r], length/k)
		}
	}
}
