package transport

import "testing"

func TestPrefetch(t *testing.T) {
	b := make([]byte, 4096)
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 4096} {
		Prefetch(b[:n])
		Prefetch(b[4096-n:])
	}
	Prefetch(nil)
	if allocs := testing.AllocsPerRun(100, func() { Prefetch(b) }); allocs != 0 {
		t.Errorf("%v allocations", allocs)
	}
}
