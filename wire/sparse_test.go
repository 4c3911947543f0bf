package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestSparseLayout(t *testing.T) {
	h := Header{Format: FormatExtended, Seq: 7, PacketID: 9, Slot: 3, Elements: 2, Sparse: true, Block: 0x01020304, Next: 0x0a0b0c0d}
	b := packet(t, h)
	if len(b) != SparseLen+8 || h.Len() != SparseLen || h.PacketLen() != len(b) {
		t.Fatalf("sparse packet is %d bytes, Len %d, PacketLen %d", len(b), h.Len(), h.PacketLen())
	}
	if b[0] != 0x22 {
		t.Fatalf("first byte %#x, want 0x22 (extended, sparse)", b[0])
	}
	if !bytes.Equal(b[ExtendedLen:SparseLen], []byte{1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d}) {
		t.Fatalf("sparse fields = % x", b[ExtendedLen:SparseLen])
	}
	got, payload, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != h || !bytes.Equal(payload, b[SparseLen:]) {
		t.Fatalf("Parse = %+v, payload % x; want %+v", got, payload, h)
	}
	// Tagged and sparse together.
	h.Tagged = true
	b = packet(t, h)
	if got, _, err = Parse(b); err != nil || got != h {
		t.Fatalf("tagged sparse: Parse = %+v, %v", got, err)
	}
}

func TestSparseRejects(t *testing.T) {
	if _, err := (&Header{Format: FormatCompat, Elements: 32, Sparse: true}).Append(nil); !errors.Is(err, ErrSparseCompat) {
		t.Fatalf("compat sparse: err = %v, want ErrSparseCompat", err)
	}
	b := packet(t, Header{Format: FormatExtended, Sparse: true})
	for n := ExtendedLen; n < SparseLen; n++ {
		if _, _, err := Parse(b[:n]); !errors.Is(err, ErrShort) {
			t.Fatalf("sparse header cut at %d: err = %v, want ErrShort", n, err)
		}
	}
}

// TestNextKeyOrder: the smallest key names the smallest block and, among
// keys of one block, the largest exponent, which is what the switch's
// minimum relies on.
func TestNextKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b1, b2 := rng.IntN(MaxSparseBlocks), rng.IntN(MaxSparseBlocks)
		if rng.IntN(2) == 0 {
			b2 = b1
		}
		e1, e2 := int8(rng.IntN(256)-128), int8(rng.IntN(256)-128)
		k1, k2 := NextKey(b1, e1), NextKey(b2, e2)
		if k1 == NoNext || k2 == NoNext {
			t.Fatalf("a block's key is NoNext")
		}
		want := b1 < b2 || b1 == b2 && e1 > e2
		if (k1 < k2) != want {
			t.Fatalf("NextKey(%d,%d)=%#x < NextKey(%d,%d)=%#x is %v, want %v", b1, e1, k1, b2, e2, k2, k1 < k2, want)
		}
		if b, e, ok := SplitKey(k1); !ok || b != b1 || e != e1 {
			t.Fatalf("SplitKey(NextKey(%d, %d)) = %d, %d, %v", b1, e1, b, e, ok)
		}
	}
	if _, _, ok := SplitKey(NoNext); ok {
		t.Fatal("SplitKey(NoNext) ok")
	}
}
