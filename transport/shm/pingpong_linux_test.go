//go:build linux

package shm

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/switchml/switchml-go/transport"
)

// TestPingPongNeverStalls bounces one datagram at a time between two
// Conns, each reader waiting without a deadline: a wake-up lost between
// a reader going to sleep and a writer publishing would stall it for good.
// With coalesced wake-ups every wake-up is one put off until the writer's
// own read blocks.
func TestPingPongNeverStalls(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		t.Run(fmt.Sprintf("coalesce=%v", coalesce), func(t *testing.T) {
			pingPong(t, Options{CoalesceWakeups: coalesce})
		})
	}
}

func pingPong(t *testing.T, o Options) {
	dir := t.TempDir()
	a, b := listen(t, dir, o), listen(t, dir, o)
	const rounds = 20000
	echo := func(c *Conn, to *Conn, first bool, done chan<- error) {
		in := make([]transport.Message, 8)
		out := []transport.Message{{Buf: []byte("ping"), Addr: to.LocalAddr()}}
		if first {
			if _, err := c.WriteBatch(out); err != nil {
				done <- err
				return
			}
		}
		for i := 0; i < rounds; i++ {
			n, err := c.ReadBatch(in, time.Time{})
			if err != nil {
				done <- err
				return
			}
			for j := 0; j < n; j++ {
				if _, err := c.WriteBatch(out); err != nil {
					done <- err
					return
				}
			}
		}
		// The last write's wake-up may be owed: a coalescing Conn that
		// stops reading rings it.
		c.Flush()
		done <- nil
	}
	done := make(chan error, 2)
	go echo(a, b, true, done)
	go echo(b, a, false, done)
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("stalled: a %+v, b %+v", a.Stats(), b.Stats())
		}
	}
}

// TestSetReadDeadlineWakesReader moves a blocked reader's deadline into
// the past from another goroutine.
func TestSetReadDeadlineWakesReader(t *testing.T) {
	b := listen(t, t.TempDir(), Options{})
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(make([]transport.Message, 4), time.Time{})
		done <- err
	}()
	for b.in.u32(hSleeping).Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := b.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !transport.IsTimeout(err) {
			t.Fatalf("woken reader: %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetReadDeadline did not wake the reader")
	}
}

// TestBuildInPlace builds datagrams in the inbox's slots with Reserve and
// Commit and reads them back.
func TestBuildInPlace(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{Slots: 8})
	u, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if bufs := a.Reserve(u.LocalAddr(), 4, 100); bufs != nil {
		t.Fatalf("a destination without an inbox: %d buffers", len(bufs))
	}
	if bufs := a.Reserve(b.LocalAddr(), 4, transport.MaxDatagram+1); bufs != nil {
		t.Fatalf("a size beyond the inbox's slots: %d buffers", len(bufs))
	}
	in := make([]transport.Message, 16)
	next, held := 0, 0
	for round := 0; round < 50; round++ {
		bufs := a.Reserve(b.LocalAddr(), 16, 1500)
		// The reader holds the slots of its last read until its next.
		if len(bufs) != 8-held {
			if bufs != nil {
				a.Commit(nil)
			}
			t.Fatalf("round %d: %d buffers, want the ring's 8 less the %d read last", round, len(bufs), held)
		}
		k := round%(8-held) + 1 // build fewer than reserved, sometimes
		held = k
		for i := 0; i < k; i++ {
			bufs[i] = append(bufs[i], datagram(next+i)...)
		}
		if n, err := a.Commit(bufs[:k]); err != nil || n != k {
			t.Fatalf("Commit: %d, %v", n, err)
		}
		n, err := b.ReadBatch(in, time.Now().Add(5*time.Second))
		if err != nil || n != k {
			t.Fatalf("round %d: read %d of %d: %v", round, n, k, err)
		}
		for _, m := range in[:n] {
			i, err := checkDatagram(m.Buf[:m.N])
			if err != nil || i != next || m.Addr != a.LocalAddr() {
				t.Fatalf("datagram %d from %v (%v), want %d from %v", i, m.Addr, err, next, a.LocalAddr())
			}
			next++
		}
	}
	// A full ring has no room, and says so with an empty, non-nil slice.
	bufs := a.Reserve(b.LocalAddr(), 8, 100)
	for i := range bufs {
		bufs[i] = append(bufs[i], 'x')
	}
	a.Commit(bufs)
	if more := a.Reserve(b.LocalAddr(), 1, 100); more == nil || len(more) != 0 {
		t.Fatalf("a full ring: %v", more)
	}
	b.ReadBatch(in, time.Now().Add(5*time.Second))
	b.TryReadBatch(in)
	// A buffer not built where it was reserved is refused.
	bufs = a.Reserve(b.LocalAddr(), 1, 100)
	if _, err := a.Commit([][]byte{append([]byte(nil), "elsewhere"...)}); err == nil || len(bufs) != 1 {
		t.Fatalf("Commit of a foreign buffer: %v", err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		bufs := a.Reserve(b.LocalAddr(), 4, 100)
		for i := range bufs {
			bufs[i] = append(bufs[i], "0123456789"...)
		}
		a.Commit(bufs)
		b.TryReadBatch(in)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Reserve, Commit and read", allocs)
	}
}

// TestCoalescedWakeups checks when a coalescing writer wakes a sleeping
// reader: not for a few datagrams, until the writer's own read blocks or
// the writer closes; at once for half a ring.
func TestCoalescedWakeups(t *testing.T) {
	const slots = 16
	dir := t.TempDir()
	b := listen(t, dir, Options{Slots: slots})
	sleeper := func() <-chan int {
		got := make(chan int, 1)
		go func() {
			in := make([]transport.Message, 2*slots)
			n, err := b.ReadBatch(in, time.Time{})
			if err != nil {
				t.Error(err)
			}
			got <- n
		}()
		for b.in.u32(hSleeping).Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		return got
	}
	send := func(a *Conn, k int) {
		t.Helper()
		ms := make([]transport.Message, k)
		for i := range ms {
			ms[i] = transport.Message{Buf: []byte("coalesced"), Addr: b.LocalAddr()}
		}
		if _, err := a.WriteBatch(ms); err != nil {
			t.Fatal(err)
		}
	}
	a := listen(t, dir, Options{CoalesceWakeups: true})
	exchange(t, a, b, 1, 1) // attach, so that what follows uses the inbox

	// A few datagrams: the reader sleeps on until a's reader blocks.
	got := sleeper()
	send(a, 3)
	select {
	case n := <-got:
		t.Fatalf("reader woken by %d datagrams below half a ring, before the writer read", n)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := a.ReadBatch(make([]transport.Message, 4), time.Now().Add(10*time.Millisecond)); !transport.IsTimeout(err) {
		t.Fatalf("writer's read: %v, want a timeout", err)
	}
	if n := <-got; n != 3 {
		t.Fatalf("woken reader took %d datagrams, want 3", n)
	}
	if a.Stats().Doorbells == 0 {
		t.Fatal("the writer counted no doorbell")
	}

	// Half a ring wakes the reader at once.
	got = sleeper()
	send(a, slots/2)
	select {
	case n := <-got:
		if n != slots/2 {
			t.Fatalf("woken reader took %d datagrams, want %d", n, slots/2)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("half a ring did not wake the reader")
	}

	// A writer whose reader never blocks rings it all the same.
	got = sleeper()
	send(a, 1)
	deadline := time.Now().Add(10 * time.Second)
	for woken := false; !woken; {
		if time.Now().After(deadline) {
			t.Fatal("a writer that keeps reading without blocking never rang the wake-up it owed")
		}
		if _, err := a.TryReadBatch(make([]transport.Message, 4)); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-got:
			if n != 1 {
				t.Fatalf("woken reader took %d datagrams, want 1", n)
			}
			woken = true
		default:
		}
	}

	// Close rings what it owes.
	got = sleeper()
	send(a, 1)
	a.Close()
	select {
	case n := <-got:
		if n != 1 {
			t.Fatalf("woken reader took %d datagrams, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not ring the wake-up it owed")
	}
}

// TestYieldsBeforeSleep: a reader that yields before it sleeps still
// times out, still sleeps and is woken, and the option is bounded.
func TestYieldsBeforeSleep(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{YieldsBeforeSleep: 50})
	in := make([]transport.Message, 8)
	if n, err := b.ReadBatch(in, time.Now().Add(20*time.Millisecond)); n != 0 || !transport.IsTimeout(err) {
		t.Fatalf("nothing sent: %d, %v", n, err)
	}
	for i := 0; i < 50; i++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(time.Duration(i%5) * time.Millisecond) // before, during and after the yields
			a.WriteBatch([]transport.Message{{Buf: datagram(i), Addr: b.LocalAddr()}})
		}()
		n, err := b.ReadBatch(in, time.Now().Add(5*time.Second))
		<-done
		if err != nil || n != 1 {
			t.Fatalf("round %d: %d, %v", i, n, err)
		}
		if j, err := checkDatagram(in[0].Buf); err != nil || j != i {
			t.Fatalf("round %d: datagram %d, %v", i, j, err)
		}
	}
	for _, y := range []int{-1, 1001} {
		if _, err := Listen(loopback, Options{Dir: dir, YieldsBeforeSleep: y}, transport.Options{}); err == nil || !strings.Contains(err.Error(), "YieldsBeforeSleep") {
			t.Errorf("YieldsBeforeSleep %d: %v", y, err)
		}
	}
}

// TestRingFitsTheDatagrams: a destination first reached through Reserve
// for datagrams of some size gets a ring whose slots fit them, packed that
// closely; larger datagrams to it go over UDP, and arrive.
func TestRingFitsTheDatagrams(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{})
	bufs := a.Reserve(b.LocalAddr(), 4, 1000)
	if len(bufs) != 4 {
		t.Fatalf("Reserve: %d buffers", len(bufs))
	}
	// A Reserve holds the Conn until Commit: let it go before failing.
	fatal := func(format string, args ...any) {
		t.Helper()
		a.Commit(nil)
		t.Fatalf(format, args...)
	}
	for i, buf := range bufs {
		if cap(buf) != 1024-slotHeader {
			fatal("buffer %d holds %d bytes, want %d", i, cap(buf), 1024-slotHeader)
		}
		if i > 0 {
			if d := uintptr(unsafe.Pointer(&buf[:1][0])) - uintptr(unsafe.Pointer(&bufs[i-1][:1][0])); d != 1024 {
				fatal("buffer %d starts %d bytes after the one before, want 1024", i, d)
			}
		}
		bufs[i] = append(buf, patterned(i, 880)...) // 880 to 991 bytes
	}
	if n, err := a.Commit(bufs); err != nil || n != 4 {
		t.Fatalf("Commit: %d, %v", n, err)
	}
	// Too large for the ring: over UDP. A later Reserve for more than the
	// ring's slots hold is refused (nil), as for a destination without an
	// inbox.
	if _, err := a.WriteBatch([]transport.Message{{Buf: patterned(4, 2000), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if more := a.Reserve(b.LocalAddr(), 1, 2000); more != nil {
		a.Commit(nil)
		t.Fatalf("Reserve beyond the ring's slots: %d buffers", len(more))
	}
	in := make([]transport.Message, 8)
	for got := 0; got < 5; {
		n, err := b.ReadBatch(in, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatalf("after %d: %v", got, err)
		}
		for _, m := range in[:n] {
			least := 880
			if len(m.Buf[:m.N]) > 1600 {
				least = 2000
			}
			if _, err := checkPatterned(m.Buf[:m.N], least); err != nil {
				t.Fatal(err)
			}
			got++
		}
	}
	if s := a.Stats(); s.ShmTX != 4 || s.UDPTX != 1 {
		t.Errorf("%+v: want 4 through the ring, 1 over UDP", s)
	}
	g := newGeometry(Options{Slots: 4, Producers: 1, MaxDatagram: 1000}.mustDefaults(t))
	for v, want := range map[uint32]int{0: g.stride, 63: g.stride, 100: g.stride, 64: 64, 512: 512, uint32(g.stride) + 64: g.stride} {
		if got := g.entryStride(v); got != want {
			t.Errorf("entryStride(%d) = %d, want %d", v, got, want)
		}
	}
}

func (o Options) mustDefaults(t *testing.T) Options {
	t.Helper()
	o, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return o
}
