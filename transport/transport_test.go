package transport

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

func listenPair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	a, err := Listen("127.0.0.1:0", Options{Batch: 16})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Listen("127.0.0.1:0", Options{Batch: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestBatchRoundTrip(t *testing.T) {
	a, b := listenPair(t)
	const count = 40
	out := make([]Message, count)
	for i := range out {
		out[i] = Message{Buf: []byte(fmt.Sprintf("datagram-%03d", i)), Addr: b.LocalAddr()}
	}
	if n, err := a.WriteBatch(out); err != nil || n != count {
		t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, count)
	}
	in := make([]Message, 16)
	for i := range in {
		in[i].Buf = make([]byte, MaxDatagram)
	}
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got < count {
		n, err := b.ReadBatch(in, deadline)
		if err != nil {
			t.Fatalf("ReadBatch after %d datagrams: %v", got, err)
		}
		for _, m := range in[:n] {
			want := fmt.Sprintf("datagram-%03d", got)
			if string(m.Buf) != want || m.N != len(want) {
				t.Fatalf("datagram %d = %q (N=%d), want %q", got, m.Buf, m.N, want)
			}
			if m.Addr != a.LocalAddr() {
				t.Fatalf("source %v, want %v", m.Addr, a.LocalAddr())
			}
			got++
		}
		for i := range in {
			in[i].Buf = in[i].Buf[:cap(in[i].Buf)]
		}
	}
}

func TestReadDeadline(t *testing.T) {
	a, _ := listenPair(t)
	in := []Message{{Buf: make([]byte, 64)}}
	n, err := a.ReadBatch(in, time.Now().Add(20*time.Millisecond))
	if n != 0 || !IsTimeout(err) {
		t.Fatalf("ReadBatch on an idle socket = %d, %v; want 0 and a timeout", n, err)
	}
}

func TestSharedBufferMulticast(t *testing.T) {
	a, b := listenPair(t)
	c, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload := []byte("same bytes to two places")
	if _, err := a.WriteBatch([]Message{{Buf: payload, Addr: b.LocalAddr()}, {Buf: payload, Addr: c.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Conn{b, c} {
		in := []Message{{Buf: make([]byte, 100)}}
		if n, err := r.ReadBatch(in, time.Now().Add(5*time.Second)); err != nil || n != 1 || !bytes.Equal(in[0].Buf, payload) {
			t.Fatalf("receiver %v got %d %q %v", r.LocalAddr(), n, in[0].Buf, err)
		}
	}
}

func TestBatchIOAllocatesNothing(t *testing.T) {
	a, b := listenPair(t)
	out := []Message{{Buf: make([]byte, 256), Addr: b.LocalAddr()}, {Buf: make([]byte, 256), Addr: b.LocalAddr()}}
	in := []Message{{Buf: make([]byte, 512)}, {Buf: make([]byte, 512)}}
	deadline := time.Now().Add(10 * time.Second)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < 2 {
			n, err := b.ReadBatch(in[got:], deadline)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		in[0].Buf, in[1].Buf = in[0].Buf[:cap(in[0].Buf)], in[1].Buf[:cap(in[1].Buf)]
	})
	if allocs != 0 {
		t.Fatalf("a write+read round allocates %v times, want 0", allocs)
	}
}

func TestListenErrors(t *testing.T) {
	if _, err := Listen("not an address", Options{}); err == nil {
		t.Fatal("Listen accepted a malformed address")
	}
	a, _ := listenPair(t)
	if _, err := Listen(a.LocalAddr().String(), Options{}); err == nil {
		t.Fatal("Listen on a taken port succeeded")
	}
}

func TestInjector(t *testing.T) {
	if _, err := NewInjector(Faults{Drop: 1.5}); err == nil {
		t.Fatal("drop probability 1.5 accepted")
	}
	mk := func(n int) []Message {
		ms := make([]Message, n)
		for i := range ms {
			ms[i] = Message{Buf: []byte{byte(i)}}
		}
		return ms
	}
	drop, _ := NewInjector(Faults{Drop: 1})
	if out := drop.Apply(mk(10)); len(out) != 0 || drop.Dropped != 10 {
		t.Fatalf("drop=1 let %d through, counted %d", len(out), drop.Dropped)
	}
	dup, _ := NewInjector(Faults{Duplicate: 1})
	if out := dup.Apply(mk(5)); len(out) != 10 || out[0].Buf[0] != out[1].Buf[0] {
		t.Fatalf("duplicate=1 gave %d datagrams, want 10 in pairs", len(out))
	}
	re, _ := NewInjector(Faults{Reorder: 1})
	first := mk(3)
	if out := re.Apply(first); len(out) != 0 || !re.Pending() {
		t.Fatalf("reorder=1 sent %d at once, want all held", len(out))
	}
	first[0].Buf[0] = 99 // the injector must own its copies
	out := re.Apply(nil)
	if len(out) != 3 || out[0].Buf[0] != 0 || out[2].Buf[0] != 2 {
		t.Fatalf("held datagrams released as %v", out)
	}
	// Same seed, same decisions.
	a, _ := NewInjector(Faults{Drop: 0.5, Seed: 7})
	b, _ := NewInjector(Faults{Drop: 0.5, Seed: 7})
	if x, y := len(a.Apply(mk(100))), len(b.Apply(mk(100))); x != y || x == 0 || x == 100 {
		t.Fatalf("seeded drop=0.5 kept %d and %d of 100", x, y)
	}
}

// TestSegmentedRuns sends runs that segmentation offload coalesces (same
// address, equal sizes, a shorter last one) mixed with ones it must not,
// with and without offload: every receiver gets exactly its datagrams, in
// order.
//
// With receive offload too, loopback hands the segmented sends over whole
// and the receiver must split them back.
func TestSegmentedRuns(t *testing.T) {
	for _, tc := range []struct{ noGSO, noGRO bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		noGSO := tc.noGSO
		t.Run(fmt.Sprintf("noGSO=%v,noGRO=%v", tc.noGSO, tc.noGRO), func(t *testing.T) {
			a, err := Listen("127.0.0.1:0", Options{Batch: 32, NoGSO: noGSO})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, _ := Listen("127.0.0.1:0", Options{NoGRO: tc.noGRO})
			c, _ := Listen("127.0.0.1:0", Options{NoGRO: tc.noGRO})
			defer b.Close()
			defer c.Close()
			var out []Message
			want := map[*Conn][]string{}
			add := func(to *Conn, size int) {
				body := bytes.Repeat([]byte{byte('a' + len(out)%26)}, size)
				copy(body, fmt.Sprintf("%04d", len(out)))
				out = append(out, Message{Buf: body, Addr: to.LocalAddr()})
				want[to] = append(want[to], string(body))
			}
			for i := 0; i < 70; i++ { // longer than one segmented send
				add(b, 300)
			}
			add(b, 100) // shorter: ends the run
			add(b, 300)
			add(c, 300)
			add(b, 500) // longer: starts a new run
			add(c, 7)
			if n, err := a.WriteBatch(out); err != nil || n != len(out) {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			for _, r := range []*Conn{b, c} {
				var got []string
				in := make([]Message, 16)
				for len(got) < len(want[r]) {
					for i := range in {
						in[i].Buf = make([]byte, 2048)
					}
					n, err := r.ReadBatch(in, time.Now().Add(5*time.Second))
					if err != nil {
						t.Fatalf("after %d of %d datagrams: %v", len(got), len(want[r]), err)
					}
					for _, m := range in[:n] {
						got = append(got, string(m.Buf))
					}
				}
				for i := range got {
					if got[i] != want[r][i] {
						t.Fatalf("datagram %d at %v: got %q..., want %q...", i, r.LocalAddr(), got[i][:4], want[r][i][:4])
					}
				}
				// Nothing more than was sent.
				if n, err := r.TryReadBatch(in); n != 0 || err != nil {
					t.Fatalf("%d extra datagrams at %v (%v)", n, r.LocalAddr(), err)
				}
			}
			merged := b.Coalesced()
			if tc.noGRO || noGSO {
				if merged != 0 {
					t.Fatalf("%d datagrams counted as coalesced with offload off", merged)
				}
			} else if merged < 64 {
				t.Fatalf("only %d of b's %d datagrams arrived coalesced over loopback", merged, len(want[b]))
			}
		})
	}
}

// With receive offload a message holds the whole datagram, whatever the
// size of the buffer it came with, and re-slicing it to its capacity does
// not reach the next datagram; without, a small buffer gets the head.
func TestSmallReadBuffers(t *testing.T) {
	for _, noGRO := range []bool{false, true} {
		t.Run(fmt.Sprintf("noGRO=%v", noGRO), func(t *testing.T) {
			a, err := Listen("127.0.0.1:0", Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := Listen("127.0.0.1:0", Options{NoGRO: noGRO})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var out []Message
			for i := 0; i < 10; i++ {
				out = append(out, Message{Buf: bytes.Repeat([]byte{byte('0' + i)}, 1000), Addr: b.LocalAddr()})
			}
			if _, err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			want := 1000
			if noGRO {
				want = 10 // cut to the buffer
			}
			got := 0
			for got < 10 {
				in := []Message{{Buf: make([]byte, 10)}, {Buf: make([]byte, 10)}, {Buf: make([]byte, 10)}}
				n, err := b.ReadBatch(in, time.Now().Add(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range in[:n] {
					full := m.Buf[:cap(m.Buf)]
					if !bytes.Equal(m.Buf, bytes.Repeat([]byte{byte('0' + got)}, want)) || m.N != want || len(full) != want {
						t.Fatalf("datagram %d: %d bytes (N=%d, capacity %d) starting %q, want %d", got, len(m.Buf), m.N, cap(m.Buf), m.Buf[:min(len(m.Buf), 4)], want)
					}
					got++
				}
			}
		})
	}
}

// An empty datagram is a datagram; the read after it works.
func TestEmptyDatagram(t *testing.T) {
	a, b := listenPair(t)
	if _, err := a.WriteBatch([]Message{{Buf: nil, Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	in := []Message{{Buf: make([]byte, 64)}}
	if n, err := b.ReadBatch(in, time.Now().Add(5*time.Second)); err != nil || n != 1 || len(in[0].Buf) != 0 {
		t.Fatalf("empty datagram: n=%d, %d bytes, %v", n, len(in[0].Buf), err)
	}
	if _, err := a.WriteBatch([]Message{{Buf: []byte("next"), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReadBatch(in, time.Now().Add(5*time.Second)); err != nil || n != 1 || string(in[0].Buf) != "next" {
		t.Fatalf("after an empty datagram: n=%d, %q, %v", n, in[0].Buf, err)
	}
}
