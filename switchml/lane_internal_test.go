//go:build linux

package switchml

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/transport/shm"
	"github.com/switchml/switchml-go/wire"
)

// TestLaneWaitsForRoomNotForever runs a lane, building its packets in a
// switch's shared-memory ring, against a switch that takes the whole ring
// in one read, answers all of it and only then reads again, a while
// later: that next read is what frees the ring. The lane finds no room
// for its next window with nothing in flight, so no result or timer will
// wake it; it must look again by itself.
func TestLaneWaitsForRoomNotForever(t *testing.T) {
	const window = 8
	dir := t.TempDir()
	lo := netip.MustParseAddrPort("127.0.0.1:0")
	sw, err := shm.Listen(lo, shm.Options{Dir: dir, Slots: window}, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	lc, err := shm.Listen(lo, shm.Options{Dir: dir}, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()

	// One worker: a result is its request, echoed.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		in := make([]transport.Message, 4*window)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := sw.ReadBatch(in, time.Now().Add(100*time.Millisecond))
			if err != nil && !transport.IsTimeout(err) {
				return
			}
			for i := range in[:n] {
				in[i].Buf = in[i].Buf[:in[i].N]
			}
			sw.WriteBatch(in[:n])
			time.Sleep(20 * time.Millisecond) // the ring stays held meanwhile
		}
	}()

	eng, err := engine.NewLane(engine.Config{NumWorkers: 1, Format: wire.FormatCompat, Elements: 64, Window: window, Timeout: time.Hour, GiveUp: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l := &laneDriver{conn: lc}
	l.init(eng, sw.LocalAddr())
	if l.inPlace == nil {
		t.Fatal("the lane does not build packets in the switch's ring")
	}
	// 100 windows: the switch holds the ring 20 ms each time (2 s in
	// all); a lane that waited for room only as long as a read may wait
	// (a second) would take 100 s and miss the context's 20.
	x := make([]int32, 100*window*64)
	for i := range x {
		x[i] = int32(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.run(ctx, nil, nil, engine.Op{Seq: 1, DType: dtype.Int32, Data: dtype.Bytes(x)}); err != nil {
		t.Fatalf("the op did not finish: %v", err)
	}
	for i, v := range x {
		if v != int32(i) {
			t.Fatalf("result [%d] = %d, want %d", i, v, i)
		}
	}
	if s := eng.Stats(); s.Retransmits != 0 {
		t.Errorf("%d retransmissions: the lane should have waited for room, not timed out", s.Retransmits)
	}
}
