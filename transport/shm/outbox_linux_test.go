//go:build linux

package shm

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/switchml/switchml-go/transport"
)

// big is datagram i in a length worth sharing: 128 to 1627 bytes.
func big(i int) []byte { return patterned(i, minShared) }

func checkBig(b []byte) (int, error) { return checkPatterned(b, minShared) }

// multicast sends datagrams first..first+k-1 from a, each to every one of
// dsts as copies of one buffer, as the software switch sends a result.
func multicast(t *testing.T, a *Conn, first, k int, dsts ...*Conn) {
	t.Helper()
	var ms []transport.Message
	for i := first; i < first+k; i++ {
		b := big(i)
		for _, d := range dsts {
			ms = append(ms, transport.Message{Buf: b, Addr: d.LocalAddr()})
		}
	}
	if n, err := a.WriteBatch(ms); err != nil || n != len(ms) {
		t.Fatalf("WriteBatch: %d of %d, %v", n, len(ms), err)
	}
}

// readN reads k datagrams from c and checks that they are first..first+k-1
// in order, from src.
func readN(t *testing.T, c *Conn, src netip.AddrPort, first, k int) []transport.Message {
	t.Helper()
	in := make([]transport.Message, k)
	got := 0
	for got < k {
		n, err := c.ReadBatch(in[got:], time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatalf("after %d of %d: %v", got, k, err)
		}
		for _, m := range in[got : got+n] {
			i, err := checkBig(m.Buf[:m.N])
			if err != nil {
				t.Fatal(err)
			}
			if i != first+got || m.Addr != src {
				t.Fatalf("datagram %d from %v, want %d from %v", i, m.Addr, first+got, src)
			}
			got++
		}
		if got < k {
			// The messages of a read are valid until the next: check what
			// the caller gets back only when one read holds them all.
			in = append(in[:0:0], in...)
		}
	}
	return in
}

// inOutbox tells whether b lies in an outbox c mapped.
func inOutbox(c *Conn, b []byte) bool {
	p := uintptr(unsafe.Pointer(&b[0]))
	for _, m := range c.outs {
		if len(m.mem) > 0 {
			lo := uintptr(unsafe.Pointer(&m.mem[0]))
			if p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(m.mem)) {
				return true
			}
		}
	}
	return false
}

func TestSharedCopies(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{ShareCopies: true, Slots: 16})
	b, c, d := listen(t, dir, Options{Slots: 16}), listen(t, dir, Options{Slots: 16}), listen(t, dir, Options{Slots: 16})
	// Many more datagrams than the outbox holds (64 of the largest, 256
	// entries): its space is reused.
	const rounds, k = 100, 8
	for r := 0; r < rounds; r++ {
		multicast(t, a, r*k, k, b, c, d)
		for _, x := range []*Conn{b, c, d} {
			got := readN(t, x, a.LocalAddr(), r*k, k)
			if !inOutbox(x, got[0].Buf) {
				t.Fatalf("round %d: a shared copy read from outside the writer's outbox", r)
			}
		}
	}
	if s := a.Stats(); s.Shared != 3*rounds*k || s.ShmTX != 3*rounds*k || s.Dropped != 0 {
		t.Fatalf("writer: %+v, want all %d copies by reference", s, 3*rounds*k)
	}
	// A datagram to one destination, or shorter than a reference is
	// worth, is copied.
	short := datagram(1)
	if _, err := a.WriteBatch([]transport.Message{{Buf: big(0), Addr: b.LocalAddr()}, {Buf: short, Addr: b.LocalAddr()}, {Buf: short, Addr: c.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	readN(t, b, a.LocalAddr(), 0, 1)
	in := make([]transport.Message, 4)
	for _, x := range []*Conn{b, c} {
		if n, err := x.ReadBatch(in, time.Now().Add(5*time.Second)); err != nil || n != 1 || string(in[0].Buf) != string(short) {
			t.Fatalf("a short multicast: %d, %v", n, err)
		}
	}
	if s := a.Stats(); s.Shared != 3*rounds*k {
		t.Fatalf("unicasts and short datagrams went by reference: %+v", s)
	}
	// Without the option nothing is shared.
	e := listen(t, dir, Options{Slots: 16})
	multicast(t, e, 0, k, b, c)
	readN(t, b, e.LocalAddr(), 0, k)
	readN(t, c, e.LocalAddr(), 0, k)
	if s := e.Stats(); s.Shared != 0 || s.ShmTX != 2*k {
		t.Fatalf("a writer without ShareCopies: %+v", s)
	}
}

// TestHeldCopiesSurvive holds the messages of a read while the writer goes
// on sharing with other readers: the held bytes must stay as they were
// until the holder reads again, the outbox falling back to copies when it
// is full of slots the holder still references.
func TestHeldCopiesSurvive(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{ShareCopies: true, Slots: 8}) // an outbox of 32 × 9 KiB, 128 entries
	b, c := listen(t, dir, Options{Slots: 8}), listen(t, dir, Options{Slots: 64})
	multicast(t, a, 0, 4, b, c)
	held := readN(t, b, a.LocalAddr(), 0, 4)
	readN(t, c, a.LocalAddr(), 0, 4)
	// Four shared datagrams a round, about 3.5 KB: 199 rounds go more than
	// twice round the outbox's 288 KiB.
	for r := 1; r < 200; r++ {
		multicast(t, a, 4*r, 4, c)
		multicast(t, a, 1000+4*r, 4, c, c) // two copies to one reader share too
		readN(t, c, a.LocalAddr(), 4*r, 4)
		in := make([]transport.Message, 8)
		for got := 0; got < 8; {
			n, err := c.ReadBatch(in, time.Now().Add(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range in[:n] {
				if i, err := checkBig(m.Buf[:m.N]); err != nil || i != 1000+4*r+got/2 {
					t.Fatalf("copy %d of round %d: datagram %d, %v", got, r, i, err)
				}
				got++
			}
		}
	}
	for j, m := range held {
		if i, err := checkBig(m.Buf[:m.N]); err != nil || i != j {
			t.Fatalf("held datagram %d overwritten while held: %d, %v", j, i, err)
		}
	}
	s := a.Stats()
	if s.Shared == 0 || s.Shared == s.ShmTX {
		t.Fatalf("writer %+v: want references until the outbox filled, copies after", s)
	}
	// Once the holder reads on, the outbox is free again.
	multicast(t, a, 0, 1, b)
	readN(t, b, a.LocalAddr(), 0, 1)
	before := a.Stats().Shared
	multicast(t, a, 5, 2, b, c)
	readN(t, b, a.LocalAddr(), 5, 2)
	readN(t, c, a.LocalAddr(), 5, 2)
	if s := a.Stats(); s.Shared != before+4 {
		t.Fatalf("after the holder read on: %+v, want 4 more by reference", s)
	}
}

// TestSharedCopiesOutliveTheWriter reads references whose writer has
// closed, and checks that the outbox goes with its owner.
func TestSharedCopiesOutliveTheWriter(t *testing.T) {
	dir := t.TempDir()
	a, err := Listen(loopback, Options{Dir: dir, ShareCopies: true}, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, c := listen(t, dir, Options{}), listen(t, dir, Options{})
	multicast(t, a, 0, 4, b, c)
	readN(t, b, a.LocalAddr(), 0, 2) // b maps the outbox now; c has not yet
	out := a.out.path
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
	src := a.LocalAddr()
	a.Close()
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("the outbox outlived its Conn's Close: %v", err)
	}
	readN(t, b, src, 2, 2)
	// c never mapped it: those datagrams are lost, as a dead producer's,
	// and the read says nothing.
	if n, err := c.ReadBatch(make([]transport.Message, 8), time.Now().Add(50*time.Millisecond)); n != 0 || !transport.IsTimeout(err) {
		t.Fatalf("references into a removed outbox: %d, %v", n, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.out")); len(left) != 0 {
		t.Fatalf("outboxes left: %q", left)
	}
}

func TestSharingAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{ShareCopies: true})
	b, c := listen(t, dir, Options{}), listen(t, dir, Options{})
	var out []transport.Message
	for i := 0; i < 16; i++ {
		buf := make([]byte, 1024)
		out = append(out, transport.Message{Buf: buf, Addr: b.LocalAddr()}, transport.Message{Buf: buf, Addr: c.LocalAddr()})
	}
	in := make([]transport.Message, 64)
	round := func() {
		a.WriteBatch(out)
		for _, x := range []*Conn{b, c} {
			if n, _ := x.TryReadBatch(in); n != len(out)/2 {
				t.Fatalf("read %d of %d", n, len(out)/2)
			}
		}
	}
	for i := 0; i < 300; i++ { // every outbox slot's references grown once
		round()
	}
	allocs := testing.AllocsPerRun(200, round)
	if allocs != 0 {
		t.Errorf("%v allocations per write and reads", allocs)
	}
	if s := a.Stats(); s.Shared != s.ShmTX {
		t.Errorf("%+v: want every copy by reference", s)
	}
}

// TestReplacedReaderFreesItsReferences closes a reader that left
// references unread and puts a new one at its address: once the writer
// looks the address up again, the references into the old inbox must not
// hold the outbox, and sharing goes on with the new reader.
func TestReplacedReaderFreesItsReferences(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{ShareCopies: true, Slots: 8}) // an outbox of 128 entries
	b := listen(t, dir, Options{Slots: 16})
	old, err := Listen(loopback, Options{Dir: dir, Slots: 16}, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := old.LocalAddr()
	// Far into old's ring, then references left unread there.
	for r := 0; r < 40; r++ {
		multicast(t, a, 8*r, 8, b, old)
		readN(t, b, a.LocalAddr(), 8*r, 8)
		readN(t, old, a.LocalAddr(), 8*r, 8)
	}
	multicast(t, a, 0, 8, b, old)
	readN(t, b, a.LocalAddr(), 0, 8)
	old.Close()
	neu, err := Listen(addr, Options{Dir: dir, Slots: 16}, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer neu.Close()
	time.Sleep(recheck + 100*time.Millisecond)
	before := a.Stats().Shared
	const rounds = 20 // 160 datagrams through an outbox of 128 entries
	for r := 1; r <= rounds; r++ {
		multicast(t, a, 8*r, 8, b, neu)
		readN(t, b, a.LocalAddr(), 8*r, 8)
		readN(t, neu, a.LocalAddr(), 8*r, 8)
	}
	if s := a.Stats(); s.Shared != before+2*8*rounds {
		t.Fatalf("after the reader was replaced: %+v, want all %d copies since by reference", s, 2*8*rounds)
	}
}

// TestTruncatedOutboxIsAnErrorNotACrash cuts the writer's outbox short
// under it: the write that faults says so, and datagrams are copied from
// then on.
func TestTruncatedOutboxIsAnErrorNotACrash(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{ShareCopies: true})
	b, c := listen(t, dir, Options{}), listen(t, dir, Options{})
	multicast(t, a, 0, 2, b, c)
	readN(t, b, a.LocalAddr(), 0, 2)
	readN(t, c, a.LocalAddr(), 0, 2)
	if err := os.Truncate(a.out.path, outHeader); err != nil {
		t.Fatal(err)
	}
	ms := []transport.Message{{Buf: big(2), Addr: b.LocalAddr()}, {Addr: c.LocalAddr()}}
	ms[1].Buf = ms[0].Buf
	if _, err := a.WriteBatch(ms); !errors.Is(err, ErrFault) || !strings.Contains(err.Error(), "outbox") {
		t.Fatalf("write into a truncated outbox: %v", err)
	}
	shared := a.Stats().Shared
	multicast(t, a, 3, 4, b, c)
	readN(t, b, a.LocalAddr(), 3, 4)
	readN(t, c, a.LocalAddr(), 3, 4)
	if s := a.Stats(); s.Shared != shared {
		t.Fatalf("after the fault: %+v, want copies", s)
	}
}

// TestCopiesArePacked: datagrams go into the outbox one after another, at
// cache-line boundaries, so that small ones share pages; and a datagram
// that would run past the outbox's end starts it again.
func TestCopiesArePacked(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{ShareCopies: true, Slots: 1, MaxDatagram: 2000}) // 4 × 2048 bytes
	b, c := listen(t, dir, Options{}), listen(t, dir, Options{})
	var offs []uintptr
	for i, size := range []int{1000, 1000, 1000, 1000, 2000, 1000, 2000} {
		buf := make([]byte, size)
		buf[0] = byte(i)
		if _, err := a.WriteBatch([]transport.Message{{Buf: buf, Addr: b.LocalAddr()}, {Buf: buf, Addr: c.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		in := make([]transport.Message, 4)
		for _, x := range []*Conn{b, c} {
			if n, err := x.ReadBatch(in, time.Now().Add(5*time.Second)); err != nil || n != 1 || len(in[0].Buf) != size || in[0].Buf[0] != byte(i) {
				t.Fatalf("datagram %d (%d bytes): %d, %v", i, size, n, err)
			}
			if !inOutbox(x, in[0].Buf) {
				t.Fatalf("datagram %d was copied", i)
			}
		}
		offs = append(offs, uintptr(unsafe.Pointer(&in[0].Buf[0]))) // c's mapping
	}
	// 1000 bytes take 1024, 2000 take 2048; the last 2048 would run past
	// the 8192 bytes, so they start the outbox again, where the first
	// datagram was (read, so free).
	for i, want := range []uintptr{0, 1024, 2048, 3072, 4096, 6144, 0} {
		if got := offs[i] - offs[0]; got != want {
			t.Errorf("datagram %d at %d, want %d", i, got, want)
		}
	}
}
