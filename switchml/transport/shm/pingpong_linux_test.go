//go:build linux

package shm

import (
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml/transport"
)

// TestPingPongNeverStalls bounces one datagram at a time between two
// Conns, each reader waiting without a deadline: a wake-up lost between
// a reader going to sleep and a writer publishing would stall it for good.
func TestPingPongNeverStalls(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{})
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
