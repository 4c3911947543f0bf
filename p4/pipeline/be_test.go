package pipeline

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// The vector payload loops agree with the plain ones for every length
// around the 8-element blocks, including wrapping sums.
func TestBEKernelsMatchPlainLoops(t *testing.T) {
	run := func(n int, vector bool) (copied, added []int32, stored []byte) {
		saved := useAVX2
		useAVX2 = useAVX2 && vector
		defer func() { useAVX2 = saved }()
		r := rand.New(rand.NewPCG(uint64(n), 9))
		payload := make([]byte, 4*n)
		for i := range payload {
			payload[i] = byte(r.Uint32())
		}
		copied = make([]int32, n)
		copyBE(copied, payload)
		added = slices.Clone(copied)
		for i := range added {
			added[i] = int32(r.Uint32()) // wraps when added
		}
		addBE(added, payload)
		stored = appendBE([]byte{0xaa}, added)
		return
	}
	for n := 0; n <= 70; n++ {
		c0, a0, s0 := run(n, false)
		c1, a1, s1 := run(n, true)
		if !slices.Equal(c0, c1) || !slices.Equal(a0, a1) || !bytes.Equal(s0, s1) {
			t.Fatalf("n=%d: vector and plain loops differ", n)
		}
		if len(s0) != 1+4*n || s0[0] != 0xaa {
			t.Fatalf("n=%d: appendBE wrote %d bytes or lost the prefix", n, len(s0))
		}
		for i, v := range a0 {
			if got := int32(uint32(s0[1+4*i])<<24 | uint32(s0[2+4*i])<<16 | uint32(s0[3+4*i])<<8 | uint32(s0[4+4*i])); got != v {
				t.Fatalf("n=%d: element %d stored as %d, want %d", n, i, got, v)
			}
		}
	}
}
