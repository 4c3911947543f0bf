package main

import (
	"bytes"
	"crypto/rand"
	byteorder "encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchml/switchml-go/internal/testenv"
	"github.com/switchml/switchml-go/transport/afxdp"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/wire"
)

// The forgery of a local process that can send with any source address
// (root, a raw socket): it watches rank 0's packets on loopback, learns the
// job's sequence numbers, slots and packet ids from them, and sends packets
// with rank 0's address for rank 0's next allreduce before rank 0 does.
// The switch takes such a packet as rank 0's contribution and every rank
// gets the same wrong sum, unless the switch checks tags (--auth).

const (
	forgeWindow   = 8  // --window: packets per use of the lane's slots
	forgeElements = 64 // --packet-elements
	// forgeTotal is the packets of one allreduce: two uses of every slot,
	// so every call starts on set 0 of its slots.
	forgeTotal  = 2 * forgeWindow
	forgeValues = forgeTotal * forgeElements
	// forgeMark, the first value of a forged payload, tells the watcher
	// the forger's own packets from rank 0's.
	forgeMark = 0x0badf00d
)

// forgedRank0 is rank 0's --bind: its packets are the ones from there.
var forgedRank0 = netip.MustParseAddr("127.0.0.2")

// TestHostileForgedPackets runs a job while a forger sends packets with
// rank 0's address, job, slots and next packet ids but without the job's
// key (untagged, and with a random tag): with --auth the switch drops every
// one of them as a bad tag and every rank's sums verify; without --auth the
// same forgery corrupts a sum, which only the CLI's check notices.
func TestHostileForgedPackets(t *testing.T) {
	testenv.NeedRoot(t, "to forge rank 0's source address (raw sockets, CAP_NET_RAW)")
	t.Run("auth", func(t *testing.T) {
		sent, reps := forgeryRun(t, true)
		for r, rep := range reps {
			if rep.err != nil || !rep.Verified {
				t.Errorf("rank %d under forgery with --auth: verified %v, %v", r, rep.Verified, rep.err)
			}
		}
		m, err := scrape(reps[0].metrics)
		if err != nil {
			t.Fatal(err)
		}
		bad := m[`switchml_switch_drops_total{reason="bad_tag"}`]
		t.Logf("forged %d packets; the switch dropped %v as bad tags", sent, bad)
		if sent == 0 || bad == 0 || bad > float64(sent) {
			t.Fatalf("%d forged packets sent, %v dropped as bad tags: want them dropped as bad tags", sent, bad)
		}
	})
	t.Run("without auth", func(t *testing.T) {
		sent, reps := forgeryRun(t, false)
		corrupted := 0
		for _, rep := range reps {
			if !rep.Verified {
				corrupted++
			}
		}
		t.Logf("forged %d packets; %d of %d ranks saw a wrong sum", sent, corrupted, len(reps))
		if corrupted == 0 {
			t.Fatalf("%d forged packets and every rank verified: the forgery did not land, so it shows nothing about --auth", sent)
		}
	})
}

type forgeReport struct {
	benchmarks.WorkerReport
	err     error
	metrics string // the switch's metrics address
}

// forgeryRun runs a 3-rank job on a switch (with --auth or not) under
// forgery and returns how many packets were forged and the ranks' reports.
func forgeryRun(t *testing.T, auth bool) (int64, []forgeReport) {
	swM := freeAddr(t)
	swArgs, ctlArgs := []string{"--metrics", swM}, []string(nil)
	if auth {
		swArgs, ctlArgs = append(swArgs, "--auth"), []string{"--auth"}
	}
	f := startFabricWith(t, nil, "", swArgs, ctlArgs)
	dp := netip.MustParseAddrPort(f.dataplane)

	w, err := newWatcher(dp, auth)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	fg, err := newForger(dp)
	if err != nil {
		t.Fatal(err)
	}
	defer fg.close()

	const workers, iters = 3, 400
	ps := make([]*proc, workers)
	for r := range ps {
		bind := "127.0.0.1"
		if r == 0 {
			bind = forgedRank0.String()
		}
		args := []string{"allreduce", "--controller", f.controller, "--job", "forged", "--rank", fmt.Sprint(r), "--workers", fmt.Sprint(workers),
			"--dtype", "int32", "--elements", fmt.Sprint(forgeValues), "--iters", fmt.Sprint(iters), "--lanes", "1",
			"--window", fmt.Sprint(forgeWindow), "--packet-elements", fmt.Sprint(forgeElements), "--extended", "--bind", bind,
			"--give-up", "2m", "--json"}
		if auth {
			args = append(args, "--auth")
		}
		ps[r] = spawn(t, nil, args...)
	}

	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { w.run(stop) })
	wg.Go(func() { fg.run(stop, w, auth, &sent) })

	reps := make([]forgeReport, workers)
	for r, p := range ps {
		select {
		case <-p.Done():
		case <-time.After(4 * time.Minute):
			p.Cmd().Process.Kill()
			<-p.Done()
		}
		reps[r].metrics = swM
		if err := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &reps[r].WorkerReport); err != nil {
			reps[r].err = fmt.Errorf("no JSON report (%v): exit %v, stderr:\n%s", err, p.Wait(), p.Logs())
			continue
		}
		if err := p.Wait(); err != nil {
			reps[r].err = fmt.Errorf("exit %v: %s", err, reps[r].Error)
		}
	}
	close(stop)
	wg.Wait()
	if w.seen.Load() == 0 {
		t.Fatal("the watcher saw none of rank 0's packets")
	}
	return sent.Load(), reps
}

// watcher reads every IPv4 packet on loopback (an AF_PACKET socket) and
// keeps what the forger needs from rank 0's packets to the switch.
type watcher struct {
	fd     int
	dp     netip.AddrPort
	segLen int // length of one of rank 0's datagrams
	mu     sync.Mutex
	port   uint16 // rank 0's lane port
	seq0   uint32 // sequence number of the allreduce whose packet ids start at 0
	base   uint32 // the lane's first slot
	op     int    // the latest allreduce rank 0 was seen in
	seen   atomic.Int64
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func newWatcher(dp netip.AddrPort, auth bool) (*watcher, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_IP)))
	if err != nil {
		return nil, fmt.Errorf("watcher: AF_PACKET socket: %w", err)
	}
	lo, err := netInterfaceIndex("lo")
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: lo}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watcher: bind to lo: %w", err)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, err
	}
	h := wire.Header{Format: wire.FormatExtended, Elements: forgeElements, Tagged: auth}
	return &watcher{fd: fd, dp: dp, segLen: h.PacketLen(), op: -1}, nil
}

func netInterfaceIndex(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, fmt.Errorf("watcher: %w", err)
	}
	return ifi.Index, nil
}

func (w *watcher) close() { unix.Close(w.fd) }

// run reads until stop is closed.
func (w *watcher) run(stop <-chan struct{}) {
	buf := make([]byte, 65536)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(w.fd, buf, 0)
		if err != nil {
			continue // the receive timeout: look at stop again
		}
		w.look(buf[:n])
	}
}

// look notes an IPv4 packet if it is one of rank 0's to the switch. The
// lanes send with UDP segmentation offload, so on loopback one IPv4 packet
// may carry several datagrams of segLen bytes.
func (w *watcher) look(pkt []byte) {
	if len(pkt) < 28 || pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_UDP {
		return
	}
	ihl := int(pkt[0]&0x0f) * 4
	if len(pkt) < ihl+8 {
		return
	}
	src, dst := netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20]))
	udp := pkt[ihl:]
	sport, dport := byteorder.BigEndian.Uint16(udp[0:2]), byteorder.BigEndian.Uint16(udp[2:4])
	if src != forgedRank0 || netip.AddrPortFrom(dst, dport) != w.dp {
		return
	}
	for seg := udp[8:]; len(seg) > 0; {
		n := min(len(seg), w.segLen)
		w.note(sport, seg[:n])
		seg = seg[n:]
	}
}

// note takes one datagram of rank 0's.
func (w *watcher) note(sport uint16, dgram []byte) {
	h, payload, err := wire.Parse(dgram)
	if err != nil || h.Elements != forgeElements || byteorder.BigEndian.Uint32(payload) == forgeMark {
		return
	}
	op := int(h.PacketID / forgeTotal)
	w.mu.Lock()
	w.port, w.seq0 = sport, h.Seq-uint32(op)
	w.base = h.Slot - h.PacketID%forgeTotal%forgeWindow
	w.op = max(w.op, op)
	w.mu.Unlock()
	w.seen.Add(1)
}

// next returns what the forger needs for rank 0's next allreduce.
func (w *watcher) next() (port uint16, seq, firstPID, base uint32, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.op < 0 {
		return 0, 0, 0, 0, false
	}
	op := uint32(w.op + 1)
	return w.port, w.seq0 + op, op * forgeTotal, w.base, true
}

// forger sends IPv4 packets with any source address (a raw socket).
type forger struct {
	fd int
	dp netip.AddrPort
}

func newForger(dp netip.AddrPort) (*forger, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("forger: raw socket: %w", err)
	}
	return &forger{fd: fd, dp: dp}, nil
}

func (f *forger) close() { unix.Close(f.fd) }

// run sends, until stop is closed, rank 0's first window of its next
// allreduce, again and again: a copy that comes before the slots are free
// is dropped as stale, one that comes after rank 0's own is a duplicate,
// and one in between is taken as rank 0's contribution unless its tag is
// checked. With tags, half the copies carry a random tag.
func (f *forger) run(stop <-chan struct{}, w *watcher, auth bool, sent *atomic.Int64) {
	pkt := make([]byte, 0, 28+wire.MaxPacket)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if sent.Load() >= 50_000 {
			return
		}
		port, seq, pid, base, ok := w.next()
		if ok {
			for j := uint32(0); j < forgeWindow; j++ {
				tagged := auth && (i+int(j))%2 == 1
				h := wire.Header{Format: wire.FormatExtended, Seq: seq, PacketID: pid + j, Slot: base + j, Elements: forgeElements, Tagged: tagged}
				body, err := h.Append(pkt[:28])
				if err != nil {
					panic(err) // the header is built from valid fields
				}
				vals := make([]int32, forgeElements)
				for k := range vals {
					vals[k] = 1 << 20
				}
				vals[0] = forgeMark
				body = wire.AppendPayload(body, vals)
				if tagged {
					var tag [wire.TagLen]byte
					_, _ = rand.Read(tag[:])
					body = append(body, tag[:]...)
				}
				if f.send(body, port) == nil {
					sent.Add(1)
				}
			}
		}
		time.Sleep(200 * time.Microsecond) // pacing, not synchronisation
	}
}

// send fills in the IPv4 and UDP headers in b[:28] (rank 0's address and
// port to the switch) and sends b.
func (f *forger) send(b []byte, sport uint16) error {
	ip := b[:20]
	clear(ip)
	ip[0] = 0x45
	byteorder.BigEndian.PutUint16(ip[2:4], uint16(len(b)))
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	src, dst := forgedRank0.As4(), f.dp.Addr().As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	udp := b[20:28]
	byteorder.BigEndian.PutUint16(udp[0:2], sport)
	byteorder.BigEndian.PutUint16(udp[2:4], f.dp.Port())
	byteorder.BigEndian.PutUint16(udp[4:6], uint16(len(b)-20))
	byteorder.BigEndian.PutUint16(udp[6:8], 0) // no UDP checksum, as IPv4 allows
	return unix.Sendto(f.fd, b, 0, &unix.SockaddrInet4{Addr: dst})
}

// TestAuthOverAFXDP runs a job with --auth across network namespaces with
// the workers and the switch on AF_XDP sockets: tags are added and checked
// above the transport, so they work there as over UDP and shared memory.
func TestAuthOverAFXDP(t *testing.T) {
	const workers = 3
	if err := afxdp.Supported(); err != nil {
		t.Skipf("AF_XDP unavailable: %v", err)
	}
	sw, prefix := netnsRack(t, workers, 79)
	f := startFabricWith(t, []string{"ip", "netns", "exec", sw}, "10.79.0.1", []string{"--transport", "afxdp", "--auth"}, []string{"--auth", "--insecure-auth-over-plaintext"})
	if logs := f.fab.Logs()["switch"]; !strings.Contains(logs, "transport=afxdp") || !strings.Contains(logs, "auth=true") {
		t.Fatalf("the switch is not checking tags on AF_XDP; its log:\n%s", logs)
	}
	js := jobSpec{name: "xdp-auth", dtype: "int32", workers: workers, elements: 300_000, iters: 3, pe: 256,
		extra: []string{"--transport", "afxdp", "--auth", "--extended"}}
	// The switch drops untagged packets and the workers drop untagged
	// results, so verified sums mean the tags went both ways.
	for _, rep := range runJob(t, f, prefix, js) {
		if rep.Transport != "afxdp" {
			t.Errorf("rank %d ran on %q, want afxdp", rep.Rank, rep.Transport)
		}
	}
}
