package bmv2

import (
	"net/netip"
	"testing"

	"github.com/switchml/switchml-go/wire"
)

// TestCheckReplyCatchesCorruption: the frame checker the BMv2 tests rely
// on accepts a well-formed reply and reports each kind of damage.
func TestCheckReplyCatchesCorruption(t *testing.T) {
	sw := endpoint{MAC: [6]byte{2, 0x53, 0x4d, 0x4c, 0, 0xfe}, Addr: netip.MustParseAddrPort("10.0.0.254:48864")}
	dst := endpoint{MAC: [6]byte{2, 0, 0, 0, 1, 1}, Addr: netip.MustParseAddrPort("10.0.1.1:41000")}
	h := wire.Header{Format: wire.FormatCompat, Seq: 7, PacketID: 0xdeadbeef, Set: 1, Slot: 100, Exp0: -5, Exp1: 1, Elements: elements}
	vals := make([]int32, elements)
	for i := range vals {
		vals[i] = int32(i*7919) - 1<<20
	}
	good, err := buildFrame(sw, dst, 1, h, vals)
	if err != nil {
		t.Fatal(err)
	}
	// buildFrame writes TTL 64, which is also what the switch's replies carry.
	if p := checkReply(good, result{Src: sw, Dst: dst, Hdr: h, Vals: vals}); len(p) != 0 {
		t.Fatalf("a well-formed reply was rejected: %v", p)
	}
	want := result{Src: sw, Dst: dst, Hdr: h, Vals: vals}
	for _, c := range []struct {
		name string
		off  int
		xor  byte
	}{
		{"destination MAC", 0, 1},
		{"source MAC", 6, 1},
		{"EtherType", 12, 1},
		{"IPv4 checksum", ethLen + 10, 1},
		{"IPv4 TTL (checksum no longer matches either)", ethLen + 8, 1},
		{"IPv4 total length", ethLen + 3, 1},
		{"IPv4 source", ethLen + 15, 1},
		{"IPv4 destination", ethLen + 19, 1},
		{"UDP source port", ethLen + ipv4Len + 1, 1},
		{"UDP destination port", ethLen + ipv4Len + 3, 1},
		{"UDP length", ethLen + ipv4Len + 5, 1},
		{"UDP checksum", ethLen + ipv4Len + 7, 1},
		{"sequence number", ethLen + ipv4Len + udpLen + 1, 1},
		{"packet id", ethLen + ipv4Len + udpLen + 5, 1},
		{"set", ethLen + ipv4Len + udpLen + 6, 0x80},
		{"exponent", ethLen + ipv4Len + udpLen + 8, 1},
		{"first value", ethLen + ipv4Len + udpLen + wire.CompatLen + 3, 1},
		{"last value", frameLen - 1, 1},
	} {
		bad := append([]byte(nil), good...)
		bad[c.off] ^= c.xor
		if p := checkReply(bad, want); len(p) == 0 {
			t.Errorf("damage to the %s went unnoticed", c.name)
		}
	}
	if p := checkReply(good[:frameLen-4], want); len(p) == 0 {
		t.Error("a truncated frame went unnoticed")
	}
	if p := checkStep([][][]byte{{good}, nil}, []*result{nil, &want}); len(p) != 2 {
		t.Errorf("a reply to the wrong rank: %d problems (%v), want 2 (an unexpected frame, a missing one)", len(p), p)
	}
}
