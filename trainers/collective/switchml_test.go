package collective

import (
	"context"
	"math"
	"testing"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/quant"
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
