package afxdp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/switchml/switchml-go/transport"
)

// requireAFXDP skips the test unless AF_XDP sockets and XDP programs can
// be used here.
func requireAFXDP(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped with -short: builds network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("AF_XDP unavailable: the test creates network namespaces and attaches XDP programs, which needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("AF_XDP test needs the ip command (iproute2): ", err)
	}
	if err := Supported(); err != nil {
		t.Skip("AF_XDP unavailable: ", err)
	}
}

var nsCounter atomic.Int32

// nsPrefix starts the names of this process's namespaces; leftovers of
// earlier runs whose process is gone are deleted.
const nsPrefix = "smlx-"

func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// removeLeftovers deletes namespaces of earlier test processes that are no
// longer running.
func removeLeftovers() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(f[0], nsPrefix), "-")
		pid, err := strconv.Atoi(parts[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

// newNamespaces creates two namespaces with fresh names, removed when the
// test ends.
func newNamespaces(t *testing.T) (a, b string) {
	t.Helper()
	removeLeftovers()
	n := nsCounter.Add(1)
	a = fmt.Sprintf("%s%d-%d-a", nsPrefix, os.Getpid(), n)
	b = fmt.Sprintf("%s%d-%d-b", nsPrefix, os.Getpid(), n)
	for _, ns := range []string{a, b} {
		ipCmd(t, "netns", "add", ns)
		ns := ns
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	return a, b
}

// vethPair links namespace a (device va, address ipA) and b (vb, ipB).
func vethPair(t *testing.T, a, b string, mtu int, ipA, ipB string) {
	t.Helper()
	ipCmd(t, "-n", a, "link", "add", "va", "mtu", strconv.Itoa(mtu), "type", "veth", "peer", "name", "vb", "netns", b)
	ipCmd(t, "-n", b, "link", "set", "vb", "mtu", strconv.Itoa(mtu))
	ipCmd(t, "-n", a, "addr", "add", ipA+"/24", "dev", "va")
	ipCmd(t, "-n", b, "addr", "add", ipB+"/24", "dev", "vb")
	ipCmd(t, "-n", a, "link", "set", "va", "up")
	ipCmd(t, "-n", b, "link", "set", "vb", "up")
}

// inNS runs f on a thread that has entered the named network namespace;
// sockets created there stay in it when used from other threads. The
// thread is discarded afterwards.
func inNS(t *testing.T, ns string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with the goroutine.
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("open namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter namespace %s: %w", ns, err)
			return
		}
		done <- f()
	}()
	return <-done
}

func mustInNS(t *testing.T, ns string, f func() error) {
	t.Helper()
	if err := inNS(t, ns, f); err != nil {
		t.Fatal(err)
	}
}

func listenIn(t *testing.T, ns string, addr string, opts Options) *Conn {
	t.Helper()
	var c *Conn
	mustInNS(t, ns, func() (err error) {
		c, err = Listen(netip.MustParseAddrPort(addr), opts)
		return err
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func udpIn(t *testing.T, ns string, addr string) *net.UDPConn {
	t.Helper()
	var u *net.UDPConn
	mustInNS(t, ns, func() (err error) {
		u, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		if err == nil {
			_ = u.SetReadBuffer(4 << 20)
			_ = u.SetWriteBuffer(4 << 20)
		}
		return err
	})
	t.Cleanup(func() { u.Close() })
	return u
}

// xdpOn reports the XDP program attached to dev in namespace ns, read over
// route netlink there.
func xdpOn(t *testing.T, ns, dev string) xdpState {
	t.Helper()
	var st xdpState
	mustInNS(t, ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		nl, err := openRTNL()
		if err != nil {
			return err
		}
		defer nl.close()
		st, err = nl.linkXDP(ifc.Index)
		return err
	})
	return st
}

// Datagram contents: a sequence number, a direction byte and bytes that
// depend on both and on their position.
func fillPayload(b []byte, seq uint32, dir byte) {
	binary.BigEndian.PutUint32(b, seq)
	b[4] = dir
	for i := 5; i < len(b); i++ {
		b[i] = byte(uint32(i)*7 + seq*31 + uint32(dir)*13)
	}
}

func checkPayload(b []byte, dir byte, size func(uint32) int) (uint32, error) {
	if len(b) < 5 {
		return 0, fmt.Errorf("datagram of %d bytes", len(b))
	}
	seq := binary.BigEndian.Uint32(b)
	if b[4] != dir {
		return seq, fmt.Errorf("seq %d: direction %d, want %d", seq, b[4], dir)
	}
	if want := size(seq); len(b) != want {
		return seq, fmt.Errorf("seq %d: %d bytes, want %d", seq, len(b), want)
	}
	for i := 5; i < len(b); i++ {
		if b[i] != byte(uint32(i)*7+seq*31+uint32(dir)*13) {
			return seq, fmt.Errorf("seq %d: byte %d is %#x, want %#x", seq, i, b[i], byte(uint32(i)*7+seq*31+uint32(dir)*13))
		}
	}
	return seq, nil
}

// exchange sizes: 64..maxFast bytes, and now and then a datagram larger
// than the MTU, which the kernel fragments (both directions take the slow
// path for those).
type sizes struct{ maxFast, over int }

func (s sizes) req(seq uint32) int {
	if s.over > 0 && seq%997 == 500 {
		return s.over
	}
	return 64 + int(seq*97)%(s.maxFast-64+1)
}

func (s sizes) resp(seq uint32) int {
	if s.over > 0 && seq%991 == 300 {
		return s.over - 100
	}
	return 64 + int(seq*61)%(s.maxFast-64+1)
}

func (s sizes) overCount(n int, f func(uint32) int) int {
	k := 0
	for i := 0; i < n; i++ {
		if f(uint32(i)) > s.maxFast {
			k++
		}
	}
	return k
}

// echo answers every request that arrives on u with the response of the
// same sequence number, checking each request, until stop is closed.
func echo(t *testing.T, u *net.UDPConn, from netip.AddrPort, sz sizes, stop <-chan struct{}, count *atomic.Int64) {
	buf := make([]byte, 65536)
	out := make([]byte, 65536)
	for {
		select {
		case <-stop:
			return
		default:
		}
		_ = u.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, src, err := u.ReadFromUDPAddrPort(buf)
		if err != nil {
			if transport.IsTimeout(err) {
				continue
			}
			t.Errorf("echo read: %v", err)
			return
		}
		if src.Addr().Unmap() != from.Addr() || src.Port() != from.Port() {
			t.Errorf("echo: request from %v, want %v", src, from)
			continue
		}
		seq, err := checkPayload(buf[:n], 0, sz.req)
		if err != nil {
			t.Errorf("echo: request: %v", err)
			continue
		}
		count.Add(1)
		r := out[:sz.resp(seq)]
		fillPayload(r, seq, 1)
		if _, err := u.WriteToUDPAddrPort(r, src); err != nil {
			t.Errorf("echo write: %v", err)
			return
		}
	}
}

// pingPong sends n requests from c to peer in windows of w and waits for
// all responses of a window before the next, checking each response's
// source and contents. Nothing can be lost: at most w datagrams are in
// flight per direction.
func pingPong(c *Conn, peer netip.AddrPort, sz sizes, n, w int) error {
	bufs := make([][]byte, w)
	for i := range bufs {
		bufs[i] = make([]byte, max(sz.over, sz.maxFast))
	}
	out := make([]transport.Message, w)
	in := make([]transport.Message, c.Batch())
	for base := 0; base < n; base += w {
		k := min(w, n-base)
		for j := 0; j < k; j++ {
			seq := uint32(base + j)
			b := bufs[j][:sz.req(seq)]
			fillPayload(b, seq, 0)
			out[j] = transport.Message{Buf: b, Addr: peer}
		}
		if sent, err := c.WriteBatch(out[:k]); sent != k || err != nil {
			return fmt.Errorf("WriteBatch of window %d: sent %d of %d: %v", base, sent, k, err)
		}
		seen := make([]bool, k)
		for got := 0; got < k; {
			m, err := c.ReadBatch(in, time.Now().Add(5*time.Second))
			if err != nil {
				return fmt.Errorf("window at %d: %d of %d responses, then %v", base, got, k, err)
			}
			for i := 0; i < m; i++ {
				if in[i].Addr != peer {
					return fmt.Errorf("response from %v, want %v", in[i].Addr, peer)
				}
				seq, err := checkPayload(in[i].Buf[:in[i].N], 1, sz.resp)
				if err != nil {
					return fmt.Errorf("response: %v", err)
				}
				if seq < uint32(base) || seq >= uint32(base+k) || seen[seq-uint32(base)] {
					return fmt.Errorf("response seq %d outside window %d..%d or repeated", seq, base, base+k-1)
				}
				seen[seq-uint32(base)] = true
				got++
			}
		}
	}
	return nil
}

// runExchange runs pingPong on each Conn against its own kernel socket in
// namespace b, all at once, and checks the counts and paths.
func runExchange(t *testing.T, conns []*Conn, peers []*net.UDPConn, sz sizes, n int) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	counts := make([]atomic.Int64, len(conns))
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			echo(t, peers[i], conns[i].LocalAddr(), sz, stop, &counts[i])
		}()
	}
	errs := make([]error, len(conns))
	var pw sync.WaitGroup
	for i, c := range conns {
		pw.Add(1)
		go func() {
			defer pw.Done()
			errs[i] = pingPong(c, peers[i].LocalAddr().(*net.UDPAddr).AddrPort(), sz, n, 32)
		}()
	}
	pw.Wait()
	close(stop)
	wg.Wait()
	for i, c := range conns {
		if errs[i] != nil {
			t.Fatalf("conn %v: %v", c.LocalAddr(), errs[i])
		}
		if got := counts[i].Load(); got != int64(n) {
			t.Errorf("conn %v: peer received %d requests, want %d", c.LocalAddr(), got, n)
		}
		s := c.Stats()
		t.Logf("conn %v (%s, %s mode, zero-copy %v): %+v", c.LocalAddr(), c.Interface(), c.Mode(), c.ZeroCopy(), s)
		overReq, overResp := sz.overCount(n, sz.req), sz.overCount(n, sz.resp)
		if s.TX+s.SlowTX != uint64(n) || s.RX+s.SlowRX != uint64(n) {
			t.Errorf("conn %v: sent %d+%d and received %d+%d, want %d each", c.LocalAddr(), s.TX, s.SlowTX, s.RX, s.SlowRX, n)
		}
		// Only the datagrams over the MTU and those sent before the
		// neighbour was known may leave through the kernel; the bound is
		// loose because how many windows pass before the neighbour is
		// read again depends on the machine's speed.
		if s.SlowTX > uint64(overReq+n/10) || s.SlowTX < uint64(overReq) {
			t.Errorf("conn %v: %d sends through the kernel, want the %d over-MTU ones and few others", c.LocalAddr(), s.SlowTX, overReq)
		}
		// Received through the kernel: the fragmented datagrams, and in
		// generic mode the rare datagram whose complete checksum happens
		// to equal an unfinished one (one in 65536).
		slack := uint64(0)
		if c.Mode() == Generic {
			slack = 8
		}
		if s.SlowRX < uint64(overResp) || s.SlowRX > uint64(overResp)+slack {
			t.Errorf("conn %v: %d receipts through the kernel, want the %d fragmented ones", c.LocalAddr(), s.SlowRX, overResp)
		}
		// Now that the neighbour is known, a batch leaves through the
		// socket as a whole.
		before := c.Stats().TX
		final := make([]transport.Message, 32)
		for j := range final {
			final[j] = transport.Message{Buf: make([]byte, 100), Addr: peers[i].LocalAddr().(*net.UDPAddr).AddrPort()}
		}
		if k, err := c.WriteBatch(final); k != len(final) || err != nil {
			t.Fatalf("final batch: %d, %v", k, err)
		}
		if got := c.Stats().TX - before; got != uint64(len(final)) {
			t.Errorf("conn %v: %d of a final batch of %d left through the AF_XDP socket", c.LocalAddr(), got, len(final))
		}
		if s.Dropped != 0 {
			t.Errorf("conn %v: %d dropped from a full hand-off queue", c.LocalAddr(), s.Dropped)
		}
	}
}

// otherTrafficReachesKernel checks that traffic the XDP program does not
// claim still reaches namespace a's kernel: UDP to another port, TCP, and
// ICMP.
func otherTrafficReachesKernel(t *testing.T, a, b string, ipA string) {
	t.Helper()
	u := udpIn(t, a, ipA+":0")
	ub := udpIn(t, b, "0.0.0.0:0")
	if _, err := ub.WriteToUDPAddrPort([]byte("to the kernel"), u.LocalAddr().(*net.UDPAddr).AddrPort()); err != nil {
		t.Fatalf("UDP send to an unregistered port: %v", err)
	}
	_ = u.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, _, err := u.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "to the kernel" {
		t.Fatalf("UDP to an unregistered port did not reach the kernel socket: %q, %v", buf[:n], err)
	}

	var ln net.Listener
	mustInNS(t, a, func() (err error) {
		ln, err = net.Listen("tcp4", ipA+":0")
		return err
	})
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hello" {
			accepted <- fmt.Errorf("read %q: %v", b, err)
			return
		}
		_, err = c.Write([]byte("world"))
		accepted <- err
	}()
	var conn net.Conn
	mustInNS(t, b, func() (err error) {
		conn, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	})
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatalf("TCP write: %v", err)
	}
	reply := make([]byte, 5)
	if _, err := io.ReadFull(conn, reply); err != nil || string(reply) != "world" {
		t.Fatalf("TCP reply %q: %v", reply, err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("TCP server side: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "exec", b, "ping", "-c", "1", "-W", "5", ipA).CombinedOutput(); err != nil {
		if _, lerr := exec.LookPath("ping"); lerr == nil {
			t.Fatalf("ping %s from %s: %v\n%s", ipA, b, err, out)
		}
	}
}

func TestVethExchange(t *testing.T) {
	requireAFXDP(t)
	for _, mode := range []Mode{Auto, Generic} {
		t.Run(mode.String(), func(t *testing.T) {
			a, b := newNamespaces(t)
			vethPair(t, a, b, 1500, "10.219.1.1", "10.219.1.2")
			c1 := listenIn(t, a, "10.219.1.1:0", Options{Mode: mode})
			c2 := listenIn(t, a, "10.219.1.1:0", Options{Mode: mode})
			if c1.dev != c2.dev {
				t.Fatalf("two Conns on one interface and queue do not share the socket")
			}
			if mode == Auto && c1.Mode() != Native {
				t.Logf("veth took the program in %s mode, not native", c1.Mode())
			}
			if mode == Generic && c1.Mode() != Generic {
				t.Fatalf("mode %s, want generic", c1.Mode())
			}
			if st := xdpOn(t, a, "va"); st.attached == 0 {
				t.Fatalf("no XDP program on va while Conns are open")
			}
			if out := ipCmd(t, "-n", a, "link", "show", "dev", "va"); !strings.Contains(out, "xdp") {
				t.Fatalf("ip link show does not list the XDP program:\n%s", out)
			}
			if c1.Mode() == Generic {
				// Datagrams from this host's own stack carry unfinished
				// checksums, which generic mode leaves to the kernel;
				// with checksum offload off the peer finishes them and
				// its datagrams take the fast path.
				noTxOffload(t, b, "vb")
			}
			p1 := udpIn(t, b, "10.219.1.2:0")
			p2 := udpIn(t, b, "10.219.1.2:0")
			runExchange(t, []*Conn{c1, c2}, []*net.UDPConn{p1, p2}, sizes{maxFast: 1472, over: 3000}, 20000)
			otherTrafficReachesKernel(t, a, b, "10.219.1.1")

			// Two Conns on one host talk through the kernel (the route
			// is local), and both directions arrive.
			localPingPong(t, c1, c2)

			c1.Close()
			if st := xdpOn(t, a, "va"); st.attached == 0 {
				t.Fatalf("XDP program detached while a Conn is still open")
			}
			c2.Close()
			if st := xdpOn(t, a, "va"); st.attached != 0 {
				t.Fatalf("XDP program (id %d, %s) still attached after the last Close", st.progID, st.mode())
			}
			if out := ipCmd(t, "-n", a, "link", "show", "dev", "va"); strings.Contains(out, "xdp") {
				t.Fatalf("ip link show still lists an XDP program after the last Close:\n%s", out)
			}
		})
	}
}

// noTxOffload turns off checksum (and so segmentation) offload on dev in
// namespace ns.
func noTxOffload(t *testing.T, ns, dev string) {
	t.Helper()
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Skip("the test needs ethtool to turn off checksum offload: ", err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off").CombinedOutput(); err != nil {
		t.Fatalf("ethtool -K %s tx off: %v\n%s", dev, err, out)
	}
}

// TestVethSegmentedSends has the peer send runs of equal datagrams with
// UDP segmentation offload, which cross the veth as one super-packet:
// every datagram must still arrive whole and on its own, in both modes.
func TestVethSegmentedSends(t *testing.T) {
	requireAFXDP(t)
	for _, mode := range []Mode{Native, Generic} {
		t.Run(mode.String(), func(t *testing.T) {
			a, b := newNamespaces(t)
			vethPair(t, a, b, 1500, "10.219.5.1", "10.219.5.2")
			c := listenIn(t, a, "10.219.5.1:0", Options{Mode: mode})
			var u *transport.Conn
			mustInNS(t, b, func() (err error) {
				u, err = transport.Listen("10.219.5.2:0", transport.Options{})
				return err
			})
			defer u.Close()
			from := u.LocalAddr()
			in := make([]transport.Message, 64)
			seq := uint32(0)
			for _, size := range []int{100, 200, 1000, 1472} {
				for _, run := range []int{2, 8, 40} {
					out := make([]transport.Message, run)
					first := seq
					for i := range out {
						b := make([]byte, size)
						fillPayload(b, seq, 0)
						seq++
						out[i] = transport.Message{Buf: b, Addr: c.LocalAddr()}
					}
					if n, err := u.WriteBatch(out); n != run || err != nil {
						t.Fatalf("peer WriteBatch: %d of %d, %v", n, run, err)
					}
					seen := make(map[uint32]bool)
					for len(seen) < run {
						n, err := c.ReadBatch(in, time.Now().Add(5*time.Second))
						if err != nil {
							t.Fatalf("size %d run %d: %d datagrams arrived, then %v (stats %+v)", size, run, len(seen), err, c.Stats())
						}
						for i := 0; i < n; i++ {
							s, err := checkPayload(in[i].Buf[:in[i].N], 0, func(uint32) int { return size })
							if err != nil {
								t.Fatalf("size %d run %d: %v", size, run, err)
							}
							if in[i].Addr != from || s < first || s >= first+uint32(run) || seen[s] {
								t.Fatalf("size %d run %d: seq %d from %v", size, run, s, in[i].Addr)
							}
							seen[s] = true
						}
					}
				}
			}
			t.Logf("%s mode: %+v", c.Mode(), c.Stats())
		})
	}
}

// TestVethNoAllocs checks that steady-state reads and writes on the fast
// path allocate nothing.
func TestVethNoAllocs(t *testing.T) {
	requireAFXDP(t)
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	a, b := newNamespaces(t)
	vethPair(t, a, b, 1500, "10.219.6.1", "10.219.6.2")
	c := listenIn(t, a, "10.219.6.1:0", Options{})
	p := udpIn(t, b, "10.219.6.2:0")
	peer := p.LocalAddr().(*net.UDPAddr).AddrPort()

	// A short exchange first, then wait until the neighbour is known.
	stop := make(chan struct{})
	var count atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		echo(t, p, c.LocalAddr(), sizes{maxFast: 200}, stop, &count)
	}()
	if err := pingPong(c, peer, sizes{maxFast: 200}, 64, 32); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	waitFastPath(t, c, peer)

	out := make([]transport.Message, 64)
	for i := range out {
		out[i] = transport.Message{Buf: make([]byte, 512), Addr: peer}
	}
	c.WriteBatch(out) // warm the next-hop cache
	if allocs := testing.AllocsPerRun(100, func() {
		if n, err := c.WriteBatch(out); n != len(out) || err != nil {
			t.Fatalf("WriteBatch: %d, %v", n, err)
		}
	}); allocs != 0 {
		t.Errorf("WriteBatch allocates %.1f times per batch", allocs)
	}
	if s := c.Stats(); s.TX < 100*64 {
		t.Fatalf("the batches did not take the fast path: %+v", s)
	}

	// Fill the receive ring from the peer, then read it back.
	msg := make([]byte, 300)
	for i := 0; i < 1024; i++ {
		if _, err := p.WriteToUDPAddrPort(msg, c.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	in := make([]transport.Message, 64)
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	if allocs := testing.AllocsPerRun(10, func() {
		n, err := c.ReadBatch(in, deadline)
		if err != nil {
			t.Fatalf("ReadBatch after %d: %v", got, err)
		}
		got += n
	}); allocs != 0 {
		t.Errorf("ReadBatch allocates %.1f times per batch", allocs)
	}
	if allocs := testing.AllocsPerRun(10, func() {
		n, _ := c.TryReadBatch(in)
		got += n
	}); allocs != 0 {
		t.Errorf("TryReadBatch allocates %.1f times per batch", allocs)
	}
	if got == 0 {
		t.Fatalf("nothing read")
	}
}

// TestVethListenCloseCycles opens and closes Conns on one interface from
// two goroutines at once: the shared socket and program come and go with
// the first and last Conn, and a Listen never trips over a teardown.
func TestVethListenCloseCycles(t *testing.T) {
	requireAFXDP(t)
	a, b := newNamespaces(t)
	vethPair(t, a, b, 1500, "10.219.8.1", "10.219.8.2")
	p := udpIn(t, b, "10.219.8.2:0")
	peer := p.LocalAddr().(*net.UDPAddr).AddrPort()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				var c *Conn
				if err := inNS(t, a, func() (err error) {
					c, err = Listen(netip.MustParseAddrPort("10.219.8.1:0"), Options{Frames: 256})
					return err
				}); err != nil {
					errs <- fmt.Errorf("cycle %d: %v", i, err)
					return
				}
				if _, err := c.WriteBatch([]transport.Message{{Buf: []byte("cycle"), Addr: peer}}); err != nil {
					errs <- fmt.Errorf("cycle %d: write: %v", i, err)
					c.Close()
					return
				}
				if err := c.Close(); err != nil {
					errs <- fmt.Errorf("cycle %d: close: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := xdpOn(t, a, "va"); st.attached != 0 {
		t.Fatalf("XDP program attached after every Conn closed")
	}
}

// waitFastPath sends single datagrams to peer until one leaves through the
// AF_XDP socket: the kernel has resolved the neighbour and the Conn has
// read it.
func waitFastPath(t *testing.T, c *Conn, peer netip.AddrPort) {
	t.Helper()
	msg := []transport.Message{{Buf: []byte("probe"), Addr: peer}}
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
		before := c.Stats().TX
		if _, err := c.WriteBatch(msg); err != nil {
			t.Fatal(err)
		}
		if c.Stats().TX > before {
			return
		}
	}
	t.Fatalf("the neighbour %v never became known: %+v", peer.Addr(), c.Stats())
}

func localPingPong(t *testing.T, c1, c2 *Conn) {
	t.Helper()
	before1, before2 := c1.Stats(), c2.Stats()
	msg := []transport.Message{{Buf: []byte("local"), Addr: c2.LocalAddr()}}
	if n, err := c1.WriteBatch(msg); n != 1 || err != nil {
		t.Fatalf("local send: %d, %v", n, err)
	}
	in := make([]transport.Message, 4)
	n, err := c2.ReadBatch(in, time.Now().Add(5*time.Second))
	if err != nil || n != 1 || string(in[0].Buf[:in[0].N]) != "local" || in[0].Addr != c1.LocalAddr() {
		t.Fatalf("local receive: %d, %v", n, err)
	}
	after1, after2 := c1.Stats(), c2.Stats()
	if after1.SlowTX != before1.SlowTX+1 || after2.SlowRX != before2.SlowRX+1 {
		t.Fatalf("a datagram to a local address did not take the kernel path: %+v -> %+v, %+v -> %+v", before1, after1, before2, after2)
	}
}

func TestVethDeadlineAndClose(t *testing.T) {
	requireAFXDP(t)
	a, b := newNamespaces(t)
	vethPair(t, a, b, 1500, "10.219.2.1", "10.219.2.2")
	c := listenIn(t, a, "10.219.2.1:0", Options{})
	in := make([]transport.Message, 8)

	// A deadline given to ReadBatch expires.
	if n, err := c.ReadBatch(in, time.Now().Add(20*time.Millisecond)); n != 0 || !transport.IsTimeout(err) {
		t.Fatalf("ReadBatch with a short deadline = %d, %v; want a timeout", n, err)
	}

	// SetReadDeadline from another goroutine wakes a read blocked
	// without a deadline. It is set again until the read returns, so the
	// check does not depend on which happens first.
	res := make(chan error, 1)
	go func() {
		_, err := c.ReadBatch(in, time.Time{})
		res <- err
	}()
	var err error
	func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		limit := time.After(10 * time.Second)
		for {
			if serr := c.SetReadDeadline(time.Now().Add(-time.Second)); serr != nil {
				t.Fatalf("SetReadDeadline: %v", serr)
			}
			select {
			case err = <-res:
				return
			case <-tick.C:
			case <-limit:
				t.Fatalf("SetReadDeadline did not wake the blocked ReadBatch")
			}
		}
	}()
	if !transport.IsTimeout(err) {
		t.Fatalf("woken ReadBatch returned %v, want a timeout", err)
	}

	// Close wakes a blocked read with net.ErrClosed.
	go func() {
		_, err := c.ReadBatch(in, time.Time{})
		res <- err
	}()
	time.Sleep(20 * time.Millisecond) // either order gives net.ErrClosed
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked ReadBatch after Close returned %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Close did not wake the blocked ReadBatch")
	}
	if _, err := c.ReadBatch(in, time.Time{}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadBatch after Close = %v, want net.ErrClosed", err)
	}
	if _, err := c.TryReadBatch(in); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("TryReadBatch after Close = %v, want net.ErrClosed", err)
	}
	if _, err := c.WriteBatch([]transport.Message{{Buf: []byte("x"), Addr: netip.MustParseAddrPort("10.219.2.2:9")}}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteBatch after Close = %v, want net.ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close = %v, want net.ErrClosed", err)
	}
	if st := xdpOn(t, a, "va"); st.attached != 0 {
		t.Fatalf("XDP program still attached after Close")
	}
}

func TestVethRefusals(t *testing.T) {
	requireAFXDP(t)
	a, b := newNamespaces(t)
	vethPair(t, a, b, 1500, "10.219.3.1", "10.219.3.2")

	// Someone else's XDP program on the interface: Listen refuses and
	// says so, and ListenOrUDP falls back.
	mustInNS(t, a, func() error {
		ifc, err := net.InterfaceByName("va")
		if err != nil {
			return err
		}
		o, err := newProgObjects(1)
		if err != nil {
			return err
		}
		defer o.close()
		if err := o.load(progConfig{maxLen: 1500}); err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: o.prog, Interface: ifc.Index, Flags: link.XDPGenericMode})
		if err != nil {
			return err
		}
		defer l.Close()
		_, err = Listen(netip.MustParseAddrPort("10.219.3.1:0"), Options{})
		if !errors.Is(err, ErrXDPAttached) {
			return fmt.Errorf("Listen with another XDP program attached: %v", err)
		}
		t.Logf("refused: %v", err)
		return nil
	})

	// An MTU too large for the frames: refused with the MTU to use, and
	// ListenOrUDP falls back to a UDP socket and logs why.
	ipCmd(t, "-n", a, "link", "set", "va", "mtu", "9000")
	var logs []string
	var pc transport.PacketConn
	mustInNS(t, a, func() (err error) {
		pc, err = ListenOrUDP(netip.MustParseAddrPort("10.219.3.1:0"), Options{}, transport.Options{}, func(f string, args ...any) {
			logs = append(logs, fmt.Sprintf(f, args...))
		})
		return err
	})
	defer pc.Close()
	if _, ok := pc.(*transport.Conn); !ok {
		t.Fatalf("ListenOrUDP returned %T, want the UDP fallback", pc)
	}
	if len(logs) != 1 || !strings.HasPrefix(logs[0], "afxdp: ") || !strings.Contains(logs[0], "MTU 9000") || !strings.HasSuffix(logs[0], "; using UDP sockets") {
		t.Fatalf("fallback log = %q", logs)
	}
	t.Logf("fallback logged: %s", logs[0])
	if st := xdpOn(t, a, "va"); st.attached != 0 {
		t.Fatalf("a refused Listen left an XDP program attached")
	}

	// An address on no interface.
	mustInNS(t, a, func() error {
		_, err := Listen(netip.MustParseAddrPort("10.219.99.1:0"), Options{})
		if !errors.Is(err, ErrNoInterface) {
			return fmt.Errorf("Listen on an absent address: %v", err)
		}
		return nil
	})
}

// TestBridgeExchange puts the AF_XDP socket on a Linux bridge's address,
// as a software switch on a bridge would: the program runs in generic
// mode on the bridge device.
func TestBridgeExchange(t *testing.T) {
	requireAFXDP(t)
	a, b := newNamespaces(t)
	ipCmd(t, "-n", a, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b)
	ipCmd(t, "-n", a, "link", "set", "va", "master", "br0")
	ipCmd(t, "-n", a, "addr", "add", "10.219.4.1/24", "dev", "br0")
	ipCmd(t, "-n", b, "addr", "add", "10.219.4.2/24", "dev", "vb")
	for _, d := range []string{"br0", "va"} {
		ipCmd(t, "-n", a, "link", "set", d, "up")
	}
	ipCmd(t, "-n", b, "link", "set", "vb", "up")
	noTxOffload(t, b, "vb")

	c1 := listenIn(t, a, "10.219.4.1:0", Options{})
	c2 := listenIn(t, a, "10.219.4.1:0", Options{})
	if c1.Interface() != "br0" {
		t.Fatalf("Conn on interface %s, want br0", c1.Interface())
	}
	t.Logf("bridge: %s mode", c1.Mode())
	p1 := udpIn(t, b, "10.219.4.2:0")
	p2 := udpIn(t, b, "10.219.4.2:0")
	runExchange(t, []*Conn{c1, c2}, []*net.UDPConn{p1, p2}, sizes{maxFast: 1472, over: 3000}, 20000)
	otherTrafficReachesKernel(t, a, b, "10.219.4.1")
	c1.Close()
	c2.Close()
	if st := xdpOn(t, a, "br0"); st.attached != 0 {
		t.Fatalf("XDP program still attached to br0 after the last Close")
	}
}

// TestRouteNetlink asks route netlink, opened in a namespace and asked
// from another thread, what the fast path needs there: the route to a
// peer on the link, through a gateway and to a local address; the MAC
// address of a usable neighbour, and none for a failed or absent one; and
// what is attached at the XDP hook.
func TestRouteNetlink(t *testing.T) {
	requireAFXDP(t)
	a, b := newNamespaces(t)
	vethPair(t, a, b, 1500, "10.219.5.1", "10.219.5.2")
	ipCmd(t, "-n", a, "route", "add", "10.219.6.0/24", "via", "10.219.5.2")
	ipCmd(t, "-n", a, "neigh", "replace", "10.219.5.2", "lladdr", "02:00:00:00:05:02", "dev", "va", "nud", "permanent")
	ipCmd(t, "-n", a, "neigh", "replace", "10.219.5.3", "lladdr", "02:00:00:00:05:03", "dev", "va", "nud", "failed")
	var nl *rtnl
	var va int
	mustInNS(t, a, func() (err error) {
		ifc, err := net.InterfaceByName("va")
		if err != nil {
			return err
		}
		va = ifc.Index
		nl, err = openRTNL()
		return err
	})
	defer nl.close()

	for _, c := range []struct {
		dst  [4]byte
		want route
	}{
		{[4]byte{10, 219, 5, 2}, route{typ: unix.RTN_UNICAST, oif: va}},
		{[4]byte{10, 219, 6, 7}, route{typ: unix.RTN_UNICAST, oif: va, gw: [4]byte{10, 219, 5, 2}, via: true}},
		{[4]byte{10, 219, 5, 1}, route{typ: unix.RTN_LOCAL, oif: 1}}, // through lo
	} {
		got, err := nl.routeTo(c.dst)
		if err != nil || got != c.want {
			t.Errorf("route to %v: %+v, %v; want %+v", netip.AddrFrom4(c.dst), got, err, c.want)
		}
	}
	if _, err := nl.routeTo([4]byte{192, 0, 2, 1}); err == nil {
		t.Errorf("route to 192.0.2.1, where the namespace has no route: no error")
	}

	for _, c := range []struct {
		ip  [4]byte
		mac [6]byte
		ok  bool
	}{
		{[4]byte{10, 219, 5, 2}, [6]byte{2, 0, 0, 0, 5, 2}, true},
		{[4]byte{10, 219, 5, 3}, [6]byte{}, false}, // failed
		{[4]byte{10, 219, 5, 4}, [6]byte{}, false}, // unknown
	} {
		mac, ok, err := nl.neighbour(va, c.ip)
		if err != nil || mac != c.mac || ok != c.ok {
			t.Errorf("neighbour %v: %v, %v, %v; want %v, %v", netip.AddrFrom4(c.ip), net.HardwareAddr(mac[:]), ok, err, net.HardwareAddr(c.mac[:]), c.ok)
		}
	}

	if st, err := nl.linkXDP(va); err != nil || st.attached != 0 {
		t.Errorf("XDP on va before any Listen: %+v, %v; want nothing attached", st, err)
	}
	c := listenIn(t, a, "10.219.5.1:0", Options{Mode: Generic})
	st, err := nl.linkXDP(va)
	if err != nil || st.attached != 2 || st.progID == 0 || st.mode() != "generic" {
		t.Errorf("XDP on va with a generic-mode Conn: %+v (%s), %v; want a generic-mode program", st, st.mode(), err)
	}
	c.Close()
	if st, err := nl.linkXDP(va); err != nil || st.attached != 0 {
		t.Errorf("XDP on va after the last Close: %+v, %v; want nothing attached", st, err)
	}
}
