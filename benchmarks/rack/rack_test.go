package rack

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/internal/testenv"
)

func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped with -short: builds network namespaces")
	}
	testenv.NeedRoot(t, "to create network namespaces")
	testenv.NeedCommands(t, "ip", "tc")
}

// reach opens a TCP connection from namespace from to a listener in
// namespace to at ip, and sends a byte across.
func reach(t *testing.T, r *Rack, from, to, ip string) {
	t.Helper()
	var ln net.Listener
	if err := r.Do(to, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(ip, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(b); err == nil {
			got <- b[0]
		}
	}()
	err := r.Do(from, func() error {
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte{42})
		return err
	})
	if err != nil {
		t.Errorf("%s -> %s (%s): %v", from, to, ip, err)
		return
	}
	select {
	case b := <-got:
		if b != 42 {
			t.Errorf("%s -> %s: got byte %d", from, to, b)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s -> %s (%s): nothing arrived", from, to, ip)
	}
}

// testPrefix keeps concurrent test binaries from tearing down each other's racks.
func testPrefix(tag string) string {
	return fmt.Sprintf("rt%s%d", tag, os.Getpid()%10000)
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Workers: 0},
		{Workers: MaxWorkers + 1},
		{Workers: 2, Prefix: "Bad-Name"},
		{Workers: 2, Prefix: "muchtoolongprefix"},
		{Workers: 2, Subnet: "10.0.0.0/28"},
		{Workers: 2, Subnet: "fd00::/64"},
		{Workers: 2, RateMbit: -1},
		{Workers: 2, MTU: 100},
	} {
		if _, err := New(context.Background(), c); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", c)
		}
	}
}

func TestShaping(t *testing.T) {
	for _, rate := range []float64{10, 200, 1000, 10000} {
		burst, limit := Shaping(rate, 1500)
		if burst < 16*1514 || limit < burst+64*1514 {
			t.Errorf("Shaping(%v) = %d, %d: bucket or queue below the floor", rate, burst, limit)
		}
	}
	if b1, _ := Shaping(10000, 1500); b1 < 1_250_000 {
		t.Errorf("10 Gbit/s bucket %d below 1 ms of traffic", b1)
	}
}

func TestRack(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("a")
	ctx := context.Background()
	r, err := New(ctx, Config{Workers: 3, RateMbit: 200, Prefix: prefix, Subnet: "10.214.7.0/24", MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })

	got := strings.Join(Namespaces(prefix), " ")
	for _, ns := range []string{r.SwitchNS(), r.WorkerNS(0), r.WorkerNS(1), r.WorkerNS(2)} {
		if !strings.Contains(" "+got+" ", " "+ns+" ") {
			t.Errorf("namespace %s missing from %q", ns, got)
		}
	}
	if r.SwitchIP() != "10.214.7.1" || r.WorkerIP(2) != "10.214.7.12" {
		t.Errorf("addresses: switch %s, worker 2 %s", r.SwitchIP(), r.WorkerIP(2))
	}
	reach(t, r, r.WorkerNS(0), r.SwitchNS(), r.SwitchIP())
	reach(t, r, r.WorkerNS(0), r.WorkerNS(2), r.WorkerIP(2))
	reach(t, r, r.SwitchNS(), r.WorkerNS(1), r.WorkerIP(1))
	out, err := r.Command(ctx, r.WorkerNS(1), "ip", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), r.WorkerIP(1)+"/24") {
		t.Errorf("Command in worker 1: %v: %s", err, out)
	}

	stats, err := r.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 6 {
		t.Fatalf("%d shaped ports, want 6", len(stats))
	}
	for _, s := range stats {
		if s.Up && s.Worker == 0 && s.Packets == 0 {
			t.Errorf("worker 0's upload port counted no packets after traffic: %+v", s)
		}
	}
	if rate, burst, limit := r.Shape(); rate != 200 || burst == 0 || limit <= burst {
		t.Errorf("Shape() = %v, %d, %d", rate, burst, limit)
	}

	// The shaper's rate, for the record (timings are not asserted).
	p, err := r.MeasureUDP(ctx, 0, 1024+10, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("UDP through a 200 Mbit/s port: %.1f Mbit/s of frames (%d packets in %.2f s, %d sent)", p.FrameMbit, p.Packets, p.Seconds, p.SentPackets)

	if err := r.SetRate(0); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRate(100); err != nil {
		t.Fatal(err)
	}
	reach(t, r, r.WorkerNS(1), r.WorkerNS(2), r.WorkerIP(2))

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if left := Namespaces(prefix); len(left) > 0 {
		t.Errorf("namespaces left after Close: %v", left)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCleanupLeftovers builds a rack, "crashes" with a process still running
// in a namespace, and checks that the next New with the prefix removes it all.
func TestCleanupLeftovers(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("b")
	ctx := context.Background()
	cfg := Config{Workers: 2, Prefix: prefix, Subnet: "10.214.8.0/24"}
	r1, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := r1.Command(ctx, r1.WorkerNS(1), "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	t.Cleanup(func() { sleeper.Process.Kill() })
	// ip netns exec enters the namespace after it starts: wait until the
	// sleeper is in it, or the cleanup below could run first and miss it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "pids", r1.WorkerNS(1)).Output()
		if slices.Contains(strings.Fields(string(out)), strconv.Itoa(sleeper.Process.Pid)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeper never showed in its namespace")
		}
	}

	r2, err := New(ctx, cfg) // r1 was never closed
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("process left in the old rack still runs")
	}
	reach(t, r2, r2.WorkerNS(0), r2.WorkerNS(1), r2.WorkerIP(1))
	if err := Cleanup(prefix); err != nil {
		t.Fatal(err)
	}
	if left := Namespaces(prefix); len(left) > 0 {
		t.Errorf("namespaces left after Cleanup: %v", left)
	}
	if out, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(out), prefix) {
		t.Errorf("interfaces named %s left in the root namespace", prefix)
	}
}

// TestRackTree builds a rack of two leaves: workers reach the spine, their
// leaf and a worker under the other leaf; the trunks are shaped at the leaf's
// worker count times the port rate, and Close removes the leaves too.
func TestRackTree(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("t")
	ctx := context.Background()
	r, err := New(ctx, Config{Workers: 4, RateMbit: 100, Prefix: prefix, Subnet: "10.214.9.0/24", Leaves: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if r.Leaves() != 2 || r.LeafOf(1) != 1 || r.LeafOf(2) != 0 || r.TrunkRatio() != 2 || r.LeafIP(1) != "10.214.9.3" {
		t.Fatalf("leaves %d, worker 1 under %d, worker 2 under %d, trunk ratio %g, leaf 1 at %s",
			r.Leaves(), r.LeafOf(1), r.LeafOf(2), r.TrunkRatio(), r.LeafIP(1))
	}
	reach(t, r, r.WorkerNS(0), r.SwitchNS(), r.SwitchIP())
	reach(t, r, r.WorkerNS(2), r.LeafNS(0), r.LeafIP(0))
	reach(t, r, r.WorkerNS(0), r.WorkerNS(3), r.WorkerIP(3))
	reach(t, r, r.SwitchNS(), r.LeafNS(1), r.LeafIP(1))
	trunks := 0
	for _, p := range r.Ports() {
		if !p.Trunk() {
			continue
		}
		trunks++
		out, err := exec.Command("tc", "-n", p.NS, "qdisc", "show", "dev", p.Dev, "root").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "rate 200Mbit") {
			t.Errorf("trunk %s/%s: %v: %s, want a 200Mbit tbf (2 workers x 100)", p.NS, p.Dev, err, out)
		}
	}
	if trunks != 4 {
		t.Errorf("%d trunk ports, want 4 (2 leaves, both ways)", trunks)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if left := Namespaces(prefix); len(left) > 0 {
		t.Errorf("namespaces left after Close: %v", left)
	}
}
