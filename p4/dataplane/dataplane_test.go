package dataplane

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/transport"
)

// fanout answers every datagram with its bytes reversed, sent to each of
// dests (a stand-in for a multicast) or back to the sender.
type fanout struct {
	mu    sync.Mutex
	dests []netip.AddrPort
	buf   []byte
}

func (f *fanout) Process(src netip.AddrPort, pkt []byte, out *pipeline.Output) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf = f.buf[:0]
	for i := len(pkt) - 1; i >= 0; i-- {
		f.buf = append(f.buf, pkt[i])
	}
	out.Packet = f.buf
	out.Dests = out.Dests[:0]
	if len(f.dests) == 0 {
		out.Dests = append(out.Dests, src)
	} else {
		out.Dests = append(out.Dests, f.dests...)
	}
}

func TestServeRepliesAndMulticasts(t *testing.T) {
	sw, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := transport.Listen("127.0.0.1:0", transport.Options{})
	b, _ := transport.Listen("127.0.0.1:0", transport.Options{})
	defer a.Close()
	defer b.Close()
	proc := &fanout{}
	ctx, cancel := context.WithCancel(context.Background())
	var stats Stats
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sw, proc, nil, &stats) }()

	recv := func(c *transport.Conn) string {
		t.Helper()
		ms := []transport.Message{{Buf: make([]byte, 64)}}
		n, err := c.ReadBatch(ms, time.Now().Add(5*time.Second))
		if err != nil || n != 1 {
			t.Fatalf("no reply at %v: %v", c.LocalAddr(), err)
		}
		if ms[0].Addr != sw.LocalAddr() {
			t.Fatalf("reply from %v, want the switch %v", ms[0].Addr, sw.LocalAddr())
		}
		return string(ms[0].Buf)
	}
	if _, err := a.WriteBatch([]transport.Message{{Buf: []byte("abc"), Addr: sw.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if got := recv(a); got != "cba" {
		t.Fatalf("unicast reply %q, want %q", got, "cba")
	}
	proc.mu.Lock()
	proc.dests = []netip.AddrPort{a.LocalAddr(), b.LocalAddr()}
	proc.mu.Unlock()
	if _, err := b.WriteBatch([]transport.Message{{Buf: []byte("xyz"), Addr: sw.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if ga, gb := recv(a), recv(b); ga != "zyx" || gb != "zyx" {
		t.Fatalf("multicast copies %q and %q, want %q twice", ga, gb, "zyx")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop after its context was cancelled")
	}
	if r, s := stats.Received.Load(), stats.Sent.Load(); r != 2 || s != 3 {
		t.Fatalf("stats received=%d sent=%d, want 2 and 3", r, s)
	}
}

// TestServeOutlivesARefusedSend: a destination the kernel refuses (UDP
// port 0) costs that datagram only; the other copies go out and the switch
// keeps serving.
func TestServeOutlivesARefusedSend(t *testing.T) {
	sw, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := transport.Listen("127.0.0.1:0", transport.Options{})
	b, _ := transport.Listen("127.0.0.1:0", transport.Options{})
	defer a.Close()
	defer b.Close()
	refused := netip.MustParseAddrPort("127.0.0.1:0")
	proc := &fanout{dests: []netip.AddrPort{refused, a.LocalAddr(), b.LocalAddr()}}
	ctx, cancel := context.WithCancel(context.Background())
	var stats Stats
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sw, proc, nil, &stats) }()
	for round := 0; round < 3; round++ {
		if _, err := a.WriteBatch([]transport.Message{{Buf: []byte("abc"), Addr: sw.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*transport.Conn{a, b} {
			ms := []transport.Message{{Buf: make([]byte, 64)}}
			n, err := c.ReadBatch(ms, time.Now().Add(5*time.Second))
			if err != nil || n != 1 || string(ms[0].Buf) != "cba" {
				t.Fatalf("round %d: %v got %d datagrams (%v), want the reply", round, c.LocalAddr(), n, err)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if stats.SendErrors.Load() == 0 {
		t.Error("the refused sends were not counted")
	}
	if err, _ := stats.LastSendError.Load().(error); err == nil || !strings.Contains(err.Error(), "127.0.0.1:0") {
		t.Errorf("last send error %v, want the refused destination named", stats.LastSendError.Load())
	}
}

// TestServeNeverSendsToItself: a reply whose destination is the switch's
// own address (a lane registered with it) is dropped and counted; the
// other copies go out, and the switch does not feed itself.
func TestServeNeverSendsToItself(t *testing.T) {
	sw, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := transport.Listen("127.0.0.1:0", transport.Options{})
	defer a.Close()
	proc := &fanout{dests: []netip.AddrPort{sw.LocalAddr(), a.LocalAddr()}}
	ctx, cancel := context.WithCancel(context.Background())
	var stats Stats
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sw, proc, nil, &stats) }()
	const rounds = 3
	for round := 0; round < rounds; round++ {
		if _, err := a.WriteBatch([]transport.Message{{Buf: []byte("abc"), Addr: sw.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		ms := []transport.Message{{Buf: make([]byte, 64)}}
		n, err := a.ReadBatch(ms, time.Now().Add(5*time.Second))
		if err != nil || n != 1 || string(ms[0].Buf) != "cba" {
			t.Fatalf("round %d: got %d datagrams %q (%v), want the reply \"cba\"", round, n, ms[0].Buf, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if got := stats.SelfDrops.Load(); got != rounds {
		t.Errorf("%d self drops, want %d", got, rounds)
	}
	// Every datagram the switch took came from a; a copy it sent itself
	// would have been received and answered too.
	if r, s := stats.Received.Load(), stats.Sent.Load(); r != rounds || s != rounds {
		t.Errorf("received %d, sent %d, want %d each", r, s, rounds)
	}
}

// TestSelfOfAWildcardSocket: a socket bound to every address counts each
// local address and any loopback address with its port as its own, and a
// sibling shard's address too; other ports and hosts are not.
func TestSelfOfAWildcardSocket(t *testing.T) {
	sw, err := transport.Listen("0.0.0.0:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	port := sw.LocalAddr().Port()
	sibling := netip.MustParseAddrPort("10.9.8.7:48865")
	me := selfOf(sw, []netip.AddrPort{sibling})
	for _, a := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
		netip.AddrPortFrom(netip.MustParseAddr("127.3.2.1"), port),
		sibling,
	} {
		if !me.has(a) {
			t.Errorf("%v is not counted as the switch's own", a)
		}
	}
	for _, a := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port+1),
		netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), port),
	} {
		if me.has(a) {
			t.Errorf("%v is counted as the switch's own", a)
		}
	}
}
