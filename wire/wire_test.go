package wire

import (
	"bytes"
	"errors"
	"testing"
)

func packet(t testing.TB, h Header) []byte {
	t.Helper()
	b, err := h.Append(nil)
	if err != nil {
		t.Fatalf("Append(%+v): %v", h, err)
	}
	for i := 0; i < 4*h.Elements; i++ {
		b = append(b, byte(i*7))
	}
	if h.Tagged {
		for i := 0; i < TagLen; i++ {
			b = append(b, byte(0xa0+i))
		}
	}
	return b
}

func TestCompatLayout(t *testing.T) {
	h := Header{Format: FormatCompat, Seq: 0x1ab, PacketID: 0x01020304, Set: 1, Slot: 0x1234, Exp0: -3, Exp1: 5, Elements: 64}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	// msg_type 1, size code 1 (256 B); sequence low byte; id BE; set bit 15 + slot; exps.
	want := []byte{0x11, 0xab, 1, 2, 3, 4, 0x92, 0x34, 0xfd, 5}
	if !bytes.Equal(b, want) {
		t.Fatalf("compat header = % x, want % x", b, want)
	}
	if h.Len() != CompatLen {
		t.Fatalf("Len = %d", h.Len())
	}
}

func TestExtendedLayout(t *testing.T) {
	h := Header{Format: FormatExtended, Seq: 0xdeadbeef, PacketID: 7, Set: 1, Slot: 70000, Exp0: 127, Exp1: -128, Elements: 2048}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x20, 1, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 7, 0x80, 0x01, 0x11, 0x70, 0x7f, 0x80, 0x08, 0x00}
	if !bytes.Equal(b, want) {
		t.Fatalf("extended header = % x, want % x", b, want)
	}
}

// TestResultMark pins the result mark to bit 3 of the first byte in both
// layouts: the published compatible header's unused bit, which workers and
// the published Tofino program leave zero.
func TestResultMark(t *testing.T) {
	for _, c := range []struct {
		h     Header
		first byte
	}{
		{Header{Format: FormatCompat, Elements: 64}, 0x11},
		{Header{Format: FormatCompat, Elements: 64, Result: true}, 0x19},
		{Header{Format: FormatExtended, Tagged: true}, 0x21},
		{Header{Format: FormatExtended, Tagged: true, Sparse: true, Result: true}, 0x2b},
	} {
		b := packet(t, c.h)
		if b[0] != c.first {
			t.Errorf("%+v: first byte %#x, want %#x", c.h, b[0], c.first)
		}
		got, _, err := Parse(b)
		if err != nil || got.Result != c.h.Result {
			t.Errorf("%+v: parsed Result %v (%v)", c.h, got.Result, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Format: FormatCompat, Seq: 3, PacketID: 1, Slot: 0, Elements: 32},
		{Format: FormatCompat, Seq: 255, PacketID: 1<<32 - 1, Set: 1, Slot: MaxCompatSlot, Exp0: -126, Elements: 256},
		{Format: FormatCompat, Elements: 128, Exp1: 9},
		{Format: FormatExtended, Seq: 1 << 31, Slot: MaxExtendedSlot, Set: 1, Elements: 0},
		{Format: FormatExtended, Seq: 5, Slot: 9, Elements: 1},
		{Format: FormatExtended, Seq: 6, Slot: 10, Elements: 64, Tagged: true},
		{Format: FormatExtended, Tagged: true},
		{Format: FormatCompat, Seq: 4, Slot: 2, Elements: 64, Result: true},
		{Format: FormatExtended, Seq: 7, Slot: 11, Elements: 3, Tagged: true, Result: true},
	} {
		b := packet(t, h)
		got, payload, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(%+v): %v", h, err)
		}
		if got != h {
			t.Fatalf("round trip: got %+v, want %+v", got, h)
		}
		if len(payload) != 4*h.Elements || len(b) != h.PacketLen() || h.Len()+4*h.Elements > len(b) {
			t.Fatalf("payload %d bytes for %d elements", len(payload), h.Elements)
		}
	}
}

func TestAppendRejects(t *testing.T) {
	for _, c := range []struct {
		h   Header
		err error
	}{
		{Header{Format: FormatCompat, Elements: 48}, ErrSize},
		{Header{Format: FormatCompat, Elements: 64, Slot: MaxCompatSlot + 1}, ErrSlot},
		{Header{Format: FormatCompat, Elements: 64, Set: 2}, ErrSet},
		{Header{Format: FormatExtended, Elements: MaxElements + 1}, ErrSize},
		{Header{Format: FormatExtended, Elements: -1}, ErrSize},
		{Header{Format: FormatExtended, Slot: MaxExtendedSlot + 1}, ErrSlot},
		{Header{Format: 7}, ErrFormat},
		{Header{Format: FormatCompat, Elements: 64, Tagged: true}, ErrTagCompat},
	} {
		b, err := c.h.Append([]byte{9})
		if !errors.Is(err, c.err) {
			t.Errorf("Append(%+v) err = %v, want %v", c.h, err, c.err)
		}
		if len(b) != 1 {
			t.Errorf("Append(%+v) wrote %d bytes on error", c.h, len(b)-1)
		}
	}
}

func TestParseRejects(t *testing.T) {
	compat := packet(t, Header{Format: FormatCompat, Elements: 32})
	ext := packet(t, Header{Format: FormatExtended, Elements: 3})
	tagged := packet(t, Header{Format: FormatExtended, Elements: 3, Tagged: true})
	mod := func(b []byte, i int, v byte) []byte {
		c := append([]byte(nil), b...)
		c[i] = v
		return c
	}
	for name, c := range map[string]struct {
		b   []byte
		err error
	}{
		"empty":                       {nil, ErrShort},
		"short compat":                {compat[:9], ErrShort},
		"short extended":              {ext[:17], ErrShort},
		"type 0":                      {mod(compat, 0, 0x00), ErrMsgType},
		"type 3":                      {mod(compat, 0, 0x30), ErrMsgType},
		"first byte bit 2":            {mod(compat, 0, 0x1c), ErrSize},
		"size code 4":                 {mod(compat, 0, 0x14), ErrSize},
		"pool index bit 14":           {mod(compat, 6, 0x40), ErrReservedBits},
		"ext flags":                   {mod(ext, 0, 0x2c), ErrReservedBits},
		"ext version":                 {mod(ext, 1, 2), ErrVersion},
		"ext count":                   {mod(ext, 16, 0x08|0x10), ErrSize},
		"payload short":               {compat[:len(compat)-1], ErrPayloadShort},
		"trailing":                    {append(append([]byte(nil), ext...), 0), ErrPayloadTrailer},
		"ext payload short":           {ext[:len(ext)-4], ErrPayloadShort},
		"ext flag bit 2":              {mod(ext, 0, 0x24), ErrReservedBits},
		"sparse flag, no fields room": {mod(ext, 0, 0x22), ErrPayloadShort},
		"tag missing":                 {tagged[:len(tagged)-TagLen], ErrPayloadShort},
		"tag short":                   {tagged[:len(tagged)-1], ErrPayloadShort},
		"tag trailing":                {append(append([]byte(nil), tagged...), 0), ErrPayloadTrailer},
		"untagged with tag":           {mod(tagged, 0, 0x20), ErrPayloadTrailer},
	} {
		_, p, err := Parse(c.b)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: err = %v, want %v", name, err, c.err)
		}
		if p != nil {
			t.Errorf("%s: payload returned with an error", name)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	h := Header{Format: FormatExtended, Seq: 1, Slot: 2, Elements: 64}
	buf := make([]byte, 0, MaxPacket)
	pkt := packet(t, h)
	allocs := testing.AllocsPerRun(100, func() {
		b, _ := h.Append(buf[:0])
		_ = b
		_, _, _ = Parse(pkt)
		_, _, _ = Parse(pkt[:3]) // error path too
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per Append+Parse", allocs)
	}
}

// FuzzParse checks that Parse never panics and that everything it accepts
// re-encodes to exactly the same bytes (the layouts have no slack).
func FuzzParse(f *testing.F) {
	f.Add(packet(f, Header{Format: FormatCompat, Seq: 1, PacketID: 2, Set: 1, Slot: 3, Exp0: -1, Elements: 32}))
	f.Add(packet(f, Header{Format: FormatExtended, Seq: 1 << 20, Slot: 1 << 20, Elements: 5}))
	f.Add(packet(f, Header{Format: FormatExtended}))
	f.Add([]byte{0x10})
	f.Add(packet(f, Header{Format: FormatExtended, Seq: 3, Slot: 4, Elements: 2, Tagged: true}))
	f.Add(packet(f, Header{Format: FormatExtended, Tagged: true}))
	f.Add(packet(f, Header{Format: FormatExtended, Seq: 3, Slot: 4, Elements: 2, Sparse: true, Block: 9, Next: NoNext}))
	f.Add(packet(f, Header{Format: FormatExtended, Sparse: true, Tagged: true, Block: DirectoryBlock}))
	f.Add(packet(f, Header{Format: FormatCompat, Seq: 2, Slot: 5, Elements: 32, Result: true}))
	f.Add(packet(f, Header{Format: FormatExtended, Seq: 2, Slot: 5, Elements: 1, Result: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, payload, err := Parse(b)
		if err != nil {
			return
		}
		if len(payload) != 4*h.Elements {
			t.Fatalf("payload %d bytes, %d elements", len(payload), h.Elements)
		}
		out, err := h.Append(nil)
		if err != nil {
			t.Fatalf("parsed header %+v does not re-encode: %v", h, err)
		}
		out = append(out, payload...)
		if h.Tagged {
			// The tag is opaque to Parse: carry it over.
			out = append(out, b[len(b)-TagLen:]...)
		}
		if len(out) != h.PacketLen() {
			t.Fatalf("re-encoded %d bytes, PacketLen %d", len(out), h.PacketLen())
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip differs:\n in % x\nout % x", b, out)
		}
		h2, _, err := Parse(out)
		if err != nil || h2 != h {
			t.Fatalf("second parse %+v %v, want %+v", h2, err, h)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	pkt := packet(b, Header{Format: FormatCompat, Elements: 64})
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = Parse(pkt)
	}
}

func BenchmarkAppend(b *testing.B) {
	h := Header{Format: FormatCompat, Elements: 64}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = h.Append(buf[:0])
	}
}
