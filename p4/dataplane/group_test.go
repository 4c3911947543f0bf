package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/switchml/switchml-go/transport"
)

// TestGroupKeepsOrderPerDestination checks the grouping of a batch's
// replies: every message kept once, each destination's messages contiguous
// and in their original order, for batches to few and to more than
// maxGroups destinations, over reused buffers.
func TestGroupKeepsOrderPerDestination(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var g grouper
	for trial := 0; trial < 500; trial++ {
		dests := 1 + rng.IntN(3*maxGroups/2)
		if trial%2 == 0 {
			dests = 1 + rng.IntN(8)
		}
		n := rng.IntN(300)
		ms := make([]transport.Message, n)
		for i := range ms {
			d := rng.IntN(dests)
			ms[i] = transport.Message{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(d >> 8), byte(d)}), 7000), N: i}
		}
		in := append([]transport.Message(nil), ms...)
		var out []transport.Message
		out, g = g.group(ms)
		if err := checkGrouped(in, out); err != nil {
			t.Fatalf("trial %d (%d messages to %d destinations): %v", trial, n, dests, err)
		}
	}
}

func checkGrouped(in, out []transport.Message) error {
	if len(in) != len(out) {
		return fmt.Errorf("%d messages out of %d", len(out), len(in))
	}
	want := map[netip.AddrPort][]int{}
	for _, m := range in {
		want[m.Addr] = append(want[m.Addr], m.N)
	}
	done := map[netip.AddrPort]bool{}
	for i := 0; i < len(out); {
		a := out[i].Addr
		if done[a] {
			return fmt.Errorf("destination %v appears in two runs", a)
		}
		done[a] = true
		var got []int
		for ; i < len(out) && out[i].Addr == a; i++ {
			got = append(got, out[i].N)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[a]) {
			return fmt.Errorf("destination %v: messages %v, want %v in that order", a, got, want[a])
		}
	}
	return nil
}
