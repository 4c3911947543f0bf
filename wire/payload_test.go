package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// withPlainLoops runs f with the vector kernels switched off.
func withPlainLoops(f func()) {
	saved := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = saved }()
	f()
}

// payloadResults runs every codec function on payload and base (which it
// leaves alone) and returns what they produced. The byte slices start one
// byte into their buffers, so the kernels also meet unaligned addresses.
func payloadResults(payload []byte, base []int32) (read, added []int32, put, appended []byte) {
	read = make([]int32, len(payload)/4)
	ReadPayload(read, payload)
	added = slices.Clone(base)
	AddPayload(added, payload)
	put = make([]byte, 1+4*len(base))[1:]
	PutPayload(put, base)
	appended = AppendPayload([]byte{0xaa}, base)
	return read, added, put, appended
}

// TestPayloadKernelsMatchPlainLoops: the vector kernels (where the CPU has
// them) give exactly what the plain loops give, and both give the
// big-endian layout, for every length around the 8-element blocks,
// unaligned buffers and wrapping sums included.
func TestPayloadKernelsMatchPlainLoops(t *testing.T) {
	for n := 0; n <= 70; n++ {
		r := rand.New(rand.NewPCG(uint64(n), 9))
		for off := 0; off < 4; off++ {
			payload := make([]byte, off+4*n)[off:]
			for i := range payload {
				payload[i] = byte(r.Uint32())
			}
			base := make([]int32, n)
			for i := range base {
				base[i] = int32(r.Uint32()) // sums wrap
			}
			if n > 0 {
				base[0] = math.MinInt32
			}
			read, added, put, appended := payloadResults(payload, base)
			var pRead, pAdded []int32
			var pPut, pAppended []byte
			withPlainLoops(func() { pRead, pAdded, pPut, pAppended = payloadResults(payload, base) })
			if !slices.Equal(read, pRead) || !slices.Equal(added, pAdded) || !bytes.Equal(put, pPut) || !bytes.Equal(appended, pAppended) {
				t.Fatalf("n=%d offset=%d: vector kernels and plain loops differ", n, off)
			}
			for i := range n {
				v := int32(binary.BigEndian.Uint32(payload[4*i:]))
				if read[i] != v {
					t.Fatalf("n=%d: ReadPayload[%d] = %d, want %d", n, i, read[i], v)
				}
				if added[i] != base[i]+v {
					t.Fatalf("n=%d: AddPayload[%d] = %d, want %d", n, i, added[i], base[i]+v)
				}
				if got := int32(binary.BigEndian.Uint32(put[4*i:])); got != base[i] {
					t.Fatalf("n=%d: PutPayload[%d] wrote %d, want %d", n, i, got, base[i])
				}
			}
			if len(appended) != 1+4*n || appended[0] != 0xaa || !bytes.Equal(appended[1:], put) {
				t.Fatalf("n=%d: AppendPayload wrote % x, want aa then % x", n, appended, put)
			}
		}
	}
}

func TestPayloadLayout(t *testing.T) {
	vals := []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 0x01020304}
	want := []byte{0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0, 1, 2, 3, 4}
	if got := AppendPayload(nil, vals); !bytes.Equal(got, want) {
		t.Fatalf("AppendPayload = % x, want % x", got, want)
	}
	back := make([]int32, len(vals))
	if k := ReadPayload(back, want); k != len(vals) || !slices.Equal(back, vals) {
		t.Fatalf("ReadPayload = %d, %v; want %d, %v", k, back, len(vals), vals)
	}
}

// The functions handle what both sides hold, like copy, and touch nothing
// beyond it.
func TestPayloadShortSides(t *testing.T) {
	vals := make([]int32, 20)
	for i := range vals {
		vals[i] = int32(i + 1)
	}
	payload := bytes.Repeat([]byte{0xee}, 4*20+3)
	if k := PutPayload(payload[:4*9+3], vals); k != 9 {
		t.Fatalf("PutPayload into 39 bytes = %d, want 9", k)
	}
	if payload[4*9] != 0xee {
		t.Fatal("PutPayload wrote past the last whole element")
	}
	if k := PutPayload(payload, vals[:10]); k != 10 || payload[40] != 0xee {
		t.Fatalf("PutPayload of 10 values = %d or wrote past them", k)
	}
	got := slices.Clone(vals)
	if k := ReadPayload(got[:17], payload[:4*10]); k != 10 || got[10] != 11 {
		t.Fatalf("ReadPayload = %d, element 10 = %d (want 10, untouched 11)", k, got[10])
	}
	if k := AddPayload(got, payload[:4*12+2]); k != 12 || got[12] != 13 || got[11] != 12+int32(-0x11111112) {
		t.Fatalf("AddPayload = %d, %v", k, got[10:13])
	}
}

func TestPayloadNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	vals := make([]int32, MaxElements)
	buf := make([]byte, 0, MaxPacket)
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendPayload(buf[:0], vals)
		ReadPayload(vals, b)
		AddPayload(vals, b)
		PutPayload(b, vals)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per payload round", allocs)
	}
}

// FuzzPayload: any bytes decode, encode back to themselves, and add to
// any values as the vector kernels and the plain loops agree.
func FuzzPayload(f *testing.F) {
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0}, uint64(1))
	f.Add(bytes.Repeat([]byte{0xff}, 4*33+1), uint64(2))
	f.Fuzz(func(t *testing.T, payload []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 1))
		base := make([]int32, len(payload)/4+r.IntN(3))
		for i := range base {
			base[i] = int32(r.Uint32())
		}
		read, added, _, _ := payloadResults(payload, base)
		var pRead, pAdded []int32
		withPlainLoops(func() { pRead, pAdded, _, _ = payloadResults(payload, base) })
		if !slices.Equal(read, pRead) || !slices.Equal(added, pAdded) {
			t.Fatal("vector kernels and plain loops differ")
		}
		if back := AppendPayload(nil, read); !bytes.Equal(back, payload[:4*len(read)]) {
			t.Fatalf("payload % x reads and encodes back as % x", payload, back)
		}
	})
}

func BenchmarkPayload(b *testing.B) {
	for _, n := range []int{64, 256, MaxElements, 1 << 18} {
		vals := make([]int32, n)
		buf := make([]byte, 4*n)
		for i := range vals {
			vals[i] = int32(i * 2654435761)
		}
		for _, c := range []struct {
			name string
			fn   func()
		}{
			{"Read", func() { ReadPayload(vals, buf) }},
			{"Add", func() { AddPayload(vals, buf) }},
			{"Put", func() { PutPayload(buf, vals) }},
			{"Append", func() { buf = AppendPayload(buf[:0], vals) }},
		} {
			b.Run(fmt.Sprintf("%s/elements=%d", c.name, n), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				b.ReportAllocs()
				for b.Loop() {
					c.fn()
				}
			})
		}
	}
}
