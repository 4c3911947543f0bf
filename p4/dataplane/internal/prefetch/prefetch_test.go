package prefetch

import "testing"

func TestBytes(t *testing.T) {
	b := make([]byte, 4096)
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 4096} {
		Bytes(b[:n])
		Bytes(b[4096-n:])
	}
	Bytes(nil)
	if allocs := testing.AllocsPerRun(100, func() { Bytes(b) }); allocs != 0 {
		t.Errorf("%v allocations", allocs)
	}
}
