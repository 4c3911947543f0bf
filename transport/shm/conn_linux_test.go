//go:build linux

package shm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/transport/internal/netns"
)

var loopback = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)

func listen(t *testing.T, dir string, o Options) *Conn {
	t.Helper()
	o.Dir = dir
	c, err := Listen(loopback, o, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// datagram i: its sequence number and a pattern derived from it, in a
// length that varies with i.
func datagram(i int) []byte { return patterned(i, 8) }

// patterned is datagram i at least least bytes long.
func patterned(i, least int) []byte {
	b := make([]byte, least+(i*37)%1500)
	binary.LittleEndian.PutUint64(b, uint64(i))
	for k := 8; k < len(b); k++ {
		b[k] = byte(i + k)
	}
	return b
}

func checkDatagram(b []byte) (int, error) { return checkPatterned(b, 8) }

// checkPatterned checks that b is patterned(i, least) and returns i.
func checkPatterned(b []byte, least int) (int, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("datagram of %d bytes", len(b))
	}
	i := int(binary.LittleEndian.Uint64(b))
	want := patterned(i, least)
	if string(b) != string(want) {
		return i, fmt.Errorf("datagram %d: %d bytes differ from the %d sent", i, len(b), len(want))
	}
	return i, nil
}

// exchange sends total datagrams from a to b in windows of win, each
// window read back before the next goes, and checks each one, its order
// and its source.
func exchange(t *testing.T, a, b transport.PacketConn, total, win int) {
	t.Helper()
	exchangeOrdered(t, a, b, total, win, true)
}

// exchangeOrdered is exchange, checking the order only when ordered:
// datagrams that take different paths may overtake each other.
func exchangeOrdered(t *testing.T, a, b transport.PacketConn, total, win int, ordered bool) {
	t.Helper()
	seen := make([]bool, total)
	out := make([]transport.Message, win)
	in := make([]transport.Message, 64)
	for i := range in {
		in[i].Buf = make([]byte, transport.MaxDatagram)
	}
	next := 0
	for sent := 0; sent < total; {
		k := min(win, total-sent)
		for j := 0; j < k; j++ {
			out[j] = transport.Message{Buf: datagram(sent + j), Addr: b.LocalAddr()}
		}
		if n, err := a.WriteBatch(out[:k]); err != nil || n != k {
			t.Fatalf("WriteBatch: %d of %d, %v", n, k, err)
		}
		sent += k
		for next < sent {
			n, err := b.ReadBatch(in, time.Now().Add(10*time.Second))
			if err != nil {
				t.Fatalf("after %d of %d datagrams: %v", next, total, err)
			}
			for _, m := range in[:n] {
				i, err := checkDatagram(m.Buf[:m.N])
				if err != nil {
					t.Fatal(err)
				}
				if ordered && i != next || i >= total || seen[i] {
					t.Fatalf("datagram %d arrived when %d was due", i, next)
				}
				seen[i] = true
				if m.Addr != a.LocalAddr() {
					t.Fatalf("datagram %d from %v, want %v", i, m.Addr, a.LocalAddr())
				}
				next++
			}
		}
	}
}

func TestExchangeThroughInbox(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{})
	exchange(t, a, b, 20000, 64)
	exchange(t, b, a, 20000, 200)
	sa, sb := a.Stats(), b.Stats()
	if sa.ShmTX != 20000 || sb.ShmRX != 20000 || sb.ShmTX != 20000 || sa.ShmRX != 20000 {
		t.Errorf("not everything went through the inboxes: a %+v, b %+v", sa, sb)
	}
	if sa.UDPTX+sb.UDPTX+sa.Dropped+sb.Dropped != 0 {
		t.Errorf("UDP or drops where none were due: a %+v, b %+v", sa, sb)
	}
	if sa.Peers != 1 || sb.Peers != 1 {
		t.Errorf("peers: a %d, b %d, want 1 each", sa.Peers, sb.Peers)
	}
}

func TestPeersWithoutInboxGoOverUDP(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{})
	u, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	exchange(t, a, u, 2000, 32)
	exchange(t, u, a, 2000, 32)
	// A datagram larger than the inbox's slots goes over UDP too.
	small := listen(t, dir, Options{MaxDatagram: 100})
	exchangeOrdered(t, a, small, 500, 16, false)
	s := a.Stats()
	if s.UDPTX < 2000 || s.UDPRX != 2000 || s.ShmTX == 0 || s.ShmTX >= 500 {
		t.Errorf("stats %+v: want 2000+ UDP sends, 2000 UDP receipts, and some but not all of 500 through the small inbox", s)
	}
}

func TestDoorbellWakesBlockedReader(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{})
	// Attach first, so that the datagram below goes through the inbox.
	exchange(t, a, b, 1, 1)
	done := make(chan error, 1)
	go func() {
		in := make([]transport.Message, 8)
		n, err := b.ReadBatch(in, time.Time{})
		if err == nil && (n != 1 || string(in[0].Buf[:in[0].N]) != "wake") {
			err = fmt.Errorf("read %d datagrams, first %q", n, in[0].Buf[:in[0].N])
		}
		done <- err
	}()
	// Write only once the reader sleeps, so the doorbell is what wakes it.
	for b.in.u32(hSleeping).Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := a.WriteBatch([]transport.Message{{Buf: []byte("wake"), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never woke up")
	}
	if s := a.Stats(); s.Doorbells == 0 || s.ShmTX != 2 {
		t.Errorf("stats %+v: want a doorbell and 2 datagrams through the inbox", s)
	}
}

func TestDeadlineAndClose(t *testing.T) {
	b := listen(t, t.TempDir(), Options{})
	in := make([]transport.Message, 4)
	if _, err := b.ReadBatch(in, time.Now().Add(-time.Second)); !transport.IsTimeout(err) {
		t.Fatalf("past deadline: %v, want a timeout", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(in, time.Time{})
		done <- err
	}()
	for b.in.u32(hSleeping).Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	path := b.Inbox()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("inbox %s still there after Close: %v", path, err)
	}
	if err := b.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.WriteBatch([]transport.Message{{Buf: []byte("x"), Addr: b.LocalAddr()}}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

func TestListenRefusals(t *testing.T) {
	dir := t.TempDir()
	if _, err := Listen(netip.MustParseAddrPort("0.0.0.0:0"), Options{Dir: dir}, transport.Options{}); !errors.Is(err, errNoAddr) {
		t.Errorf("wildcard address: %v", err)
	}
	if _, err := Listen(loopback, Options{Dir: dir + "/missing"}, transport.Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
	if _, err := Listen(loopback, Options{Dir: dir, Slots: -1}, transport.Options{}); err == nil {
		t.Error("negative Slots accepted")
	}
	var logged []string
	c, err := ListenOrUDP(netip.MustParseAddrPort("0.0.0.0:0"), Options{Dir: dir}, transport.Options{}, func(f string, a ...any) {
		logged = append(logged, fmt.Sprintf(f, a...))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*transport.Conn); !ok || len(logged) != 1 || !strings.Contains(logged[0], "using UDP sockets") {
		t.Errorf("fallback: %T, logged %q", c, logged)
	}
}

func TestGeometry(t *testing.T) {
	o, _ := Options{Producers: 3, Slots: 5, MaxDatagram: 1000}.withDefaults()
	g := newGeometry(o)
	if g.stride%64 != 0 || g.stride < slotHeader+1000 || g.ringsOffset()%4096 != 0 {
		t.Fatalf("geometry %+v", g)
	}
	if !g.valid(int64(g.size())) || g.valid(int64(g.size())+1) {
		t.Error("valid does not check the file size")
	}
	bad := g
	bad.stride += 64
	if bad.valid(int64(bad.size())) {
		t.Error("valid accepts a stride this package would not write")
	}
	if g.slot(2, 4)+g.stride != g.size() {
		t.Errorf("last slot ends at %d, file at %d", g.slot(2, 4)+g.stride, g.size())
	}
}

func TestEntriesAreReclaimed(t *testing.T) {
	dir := t.TempDir()
	b := listen(t, dir, Options{Producers: 2})
	a1, a2, a3 := listen(t, dir, Options{}), listen(t, dir, Options{}), listen(t, dir, Options{})
	exchange(t, a1, b, 10, 10)
	exchange(t, a2, b, 10, 10)
	exchange(t, a3, b, 10, 10) // no entry left: over UDP, still delivered
	if s := a3.Stats(); s.Peers != 0 || s.UDPTX != 10 {
		t.Fatalf("third sender: %+v, want UDP", s)
	}
	// Building in place allocates a sender's ring whole.
	for _, a := range []*Conn{a1, a2} {
		if bufs := a.Reserve(b.LocalAddr(), 1, 100); len(bufs) != 1 {
			t.Fatalf("Reserve: %d buffers", len(bufs))
		}
		a.Commit(nil)
	}
	before := allocated(t, b.Inbox())
	if ring := int64(256 * newGeometry(Options{MaxDatagram: transport.MaxDatagram}).stride); before < 2*ring {
		t.Fatalf("two senders' rings take %d bytes, want at least %d", before, 2*ring)
	}
	a1.Close()
	// The owner frees a1's entry when it next finds its rings empty; a3
	// looks again a second after its last look.
	time.Sleep(recheck + 100*time.Millisecond)
	if _, err := b.ReadBatch(make([]transport.Message, 4), time.Now().Add(-time.Second)); !transport.IsTimeout(err) {
		t.Fatal(err)
	}
	if after := allocated(t, b.Inbox()); after >= before {
		t.Errorf("the freed ring's memory was kept: %d bytes allocated before, %d after", before, after)
	}
	exchange(t, a3, b, 10, 10)
	if s := a3.Stats(); s.Peers != 1 || s.ShmTX != 10 {
		t.Fatalf("third sender after the first left: %+v, want it in the inbox", s)
	}
}

func TestTruncatedInboxIsAnErrorNotACrash(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{})
	exchange(t, a, b, 1, 1)
	if err := os.Truncate(b.Inbox(), headerSize); err != nil {
		t.Fatal(err)
	}
	_, err := a.WriteBatch([]transport.Message{{Buf: make([]byte, 100), Addr: b.LocalAddr()}})
	if !errors.Is(err, ErrFault) {
		t.Fatalf("write into a truncated inbox: %v", err)
	}
	if s := a.Stats(); s.Peers != 0 {
		t.Fatalf("still attached: %+v", s)
	}
	if _, err := a.WriteBatch([]transport.Message{{Buf: datagram(7), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.UDPTX != 1 {
		t.Errorf("after the fault: %+v, want the next datagram over UDP", s)
	}
	// The owner's reads fault on the same memory: an error, not a crash.
	if _, err := b.TryReadBatch(make([]transport.Message, 4)); !errors.Is(err, ErrFault) {
		t.Errorf("read of a truncated inbox: %v", err)
	}
}

func TestConcurrentReaderAndWriter(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{})
	const total = 20000
	// b echoes everything back while a sends and reads at once.
	go func() {
		in := make([]transport.Message, 64)
		for {
			n, err := b.ReadBatch(in, time.Time{})
			if err != nil {
				return
			}
			for i := range in[:n] {
				in[i].Buf = in[i].Buf[:in[i].N]
			}
			b.WriteBatch(in[:n])
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	var sendErr error
	go func() {
		defer wg.Done()
		ms := make([]transport.Message, 16)
		for i := 0; i < total; i += len(ms) {
			for j := range ms {
				ms[j] = transport.Message{Buf: datagram(i + j), Addr: b.LocalAddr()}
			}
			if _, err := a.WriteBatch(ms); err != nil {
				sendErr = err
				return
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()
	seen := make([]bool, total)
	got := 0
	in := make([]transport.Message, 64)
	for got < total {
		n, err := a.ReadBatch(in, time.Now().Add(3*time.Second))
		if transport.IsTimeout(err) {
			break // the rest were dropped at full rings
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:n] {
			i, err := checkDatagram(m.Buf[:m.N])
			if err != nil {
				t.Fatal(err)
			}
			if seen[i] {
				t.Fatalf("datagram %d twice", i)
			}
			seen[i] = true
			got++
		}
	}
	wg.Wait()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	sa, sb := a.Stats(), b.Stats()
	if lost := uint64(total - got); lost != sa.Dropped+sb.Dropped {
		t.Errorf("%d datagrams missing, %d counted as dropped (a %+v, b %+v)", lost, sa.Dropped+sb.Dropped, sa, sb)
	}
	if got < total/2 {
		t.Errorf("only %d of %d echoed", got, total)
	}
}

// TestAcrossProcesses echoes datagrams through a child process's Conn,
// then kills the child and checks that sends go back to UDP.
func TestAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEchoProcess$")
	cmd.Env = append(os.Environ(), "SHM_ECHO_DIR="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the echo process said nothing: %v", err)
	}
	peerAddr, err := netip.ParseAddrPort(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("echo process: %q", line)
	}
	a := listen(t, dir, Options{})
	in := make([]transport.Message, 64)
	out := make([]transport.Message, 32)
	for round := 0; round < 300; round++ {
		for j := range out {
			out[j] = transport.Message{Buf: datagram(round*len(out) + j), Addr: peerAddr}
		}
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(out); {
			n, err := a.ReadBatch(in, time.Now().Add(10*time.Second))
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			for _, m := range in[:n] {
				i, err := checkDatagram(m.Buf[:m.N])
				if err != nil {
					t.Fatal(err)
				}
				if i != round*len(out)+got {
					t.Fatalf("echo %d arrived when %d was due", i, round*len(out)+got)
				}
				if m.Addr != peerAddr {
					t.Fatalf("echo from %v, want %v", m.Addr, peerAddr)
				}
				got++
			}
		}
	}
	if s := a.Stats(); s.ShmTX != 9600 || s.ShmRX != 9600 || s.UDPTX != 0 {
		t.Fatalf("stats %+v: want all 9600 each way through the inboxes", s)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	time.Sleep(recheck + 100*time.Millisecond)
	if _, err := a.WriteBatch([]transport.Message{{Buf: datagram(1), Addr: peerAddr}}); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Peers != 0 || s.UDPTX != 1 {
		t.Errorf("after the peer died: %+v, want its address over UDP", s)
	}
	// The dead child left its inbox and FIFO; the next Listen sweeps them.
	left, _ := filepath.Glob(filepath.Join(dir, inboxName(netns.ID(), peerAddr)+"*"))
	if len(left) != 2 {
		t.Fatalf("the killed process left %q, want its inbox and FIFO", left)
	}
	listen(t, dir, Options{})
	if left, _ := filepath.Glob(filepath.Join(dir, inboxName(netns.ID(), peerAddr)+"*")); len(left) != 0 {
		t.Errorf("after a Listen: %q still there", left)
	}
	if live, _ := filepath.Glob(filepath.Join(dir, inboxName(netns.ID(), a.LocalAddr())+"*")); len(live) != 2 {
		t.Errorf("a live Conn's inbox and FIFO: %q", live)
	}
}

// TestEchoProcess is the child of TestAcrossProcesses.
func TestEchoProcess(t *testing.T) {
	dir := os.Getenv("SHM_ECHO_DIR")
	if dir == "" {
		t.Skip("run by TestAcrossProcesses")
	}
	c, err := Listen(loopback, Options{Dir: dir}, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(c.LocalAddr())
	in := make([]transport.Message, 64)
	for {
		n, err := c.ReadBatch(in, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range in[:n] {
			in[i].Buf = in[i].Buf[:in[i].N]
		}
		if _, err := c.WriteBatch(in[:n]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	a, b := listen(t, dir, Options{}), listen(t, dir, Options{})
	out := make([]transport.Message, 32)
	for i := range out {
		out[i] = transport.Message{Buf: make([]byte, 1024), Addr: b.LocalAddr()}
	}
	in := make([]transport.Message, 64)
	a.WriteBatch(out)
	b.TryReadBatch(in)
	allocs := testing.AllocsPerRun(200, func() {
		a.WriteBatch(out)
		if n, _ := b.TryReadBatch(in); n != len(out) {
			t.Fatalf("read %d of %d", n, len(out))
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per write and read", allocs)
	}
}

// TestUDPReadsDoNotWriteIntoTheInbox reads a datagram from the inbox, then
// one over UDP (receive offload off, so the socket reads into buffers)
// with the same messages: the inbox's slot must keep its bytes.
func TestUDPReadsDoNotWriteIntoTheInbox(t *testing.T) {
	dir := t.TempDir()
	a := listen(t, dir, Options{})
	b, err := Listen(loopback, Options{Dir: dir}, transport.Options{NoGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	u, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	want := datagram(3)
	if _, err := a.WriteBatch([]transport.Message{{Buf: want, Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	ms := make([]transport.Message, 4)
	if n, err := b.ReadBatch(ms, time.Now().Add(5*time.Second)); err != nil || n != 1 {
		t.Fatalf("inbox read: %d, %v", n, err)
	}
	slot := ms[0].Buf
	ms[0].Buf = ms[0].Buf[:cap(ms[0].Buf)] // as the lanes do
	if _, err := u.WriteBatch([]transport.Message{{Buf: bytesOf('x', len(want)), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReadBatch(ms, time.Now().Add(5*time.Second)); err != nil || n != 1 || string(ms[0].Buf[:ms[0].N]) != string(bytesOf('x', len(want))) {
		t.Fatalf("UDP read: %d, %v", n, err)
	}
	if string(slot) != string(want) {
		t.Fatal("the UDP read wrote into the inbox's slot")
	}
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

// allocated is the memory the file at path takes.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
