package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/internal/testenv"
	"github.com/switchml/switchml-go/p4/bmv2"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4tools"
	"github.com/switchml/switchml-go/p4/v1model"
)

// bmv2Rack is BMv2 running the v1model SwitchML program, with one port per
// worker host: namespace sw holds BMv2, the controller and a management
// bridge; each worker namespace has eth0 (data, cabled to a BMv2 port) and
// mgmt0 (to the bridge, for the controller's job service).
type bmv2Rack struct {
	tag, sw    string
	workers    int
	tools      *p4tools.Tools
	json       string
	portMap    string
	controller string // job service address
}

const (
	bmv2SwitchIP  = "10.78.0.254"
	bmv2SwitchMAC = "02:53:4d:4c:00:fe"
)

func (r *bmv2Rack) workerNS(rank int) string { return fmt.Sprintf("%sw%d", r.tag, rank) }
func (r *bmv2Rack) dataIP(rank int) string   { return fmt.Sprintf("10.78.0.%d", 10+rank) }

// compileForBMv2Rack skips where BMv2 jobs in network namespaces cannot
// run (in -short, which skips what starts, not root, no ip command, no
// toolchain) and compiles the v1model program for BMv2.
func compileForBMv2Rack(t *testing.T, starts string) (*p4tools.Tools, string) {
	t.Helper()
	if testing.Short() {
		t.Skip(starts + "; skipped in -short")
	}
	testenv.NeedNetns(t)
	tools := p4tools.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jsonPath, _, err := bmv2.Compile(ctx, tools, filepath.Join("..", "..", "p4", "v1model", "switchml.p4"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return tools, jsonPath
}

// netnsRunner runs the commands that build a rack's namespaces, failing
// the test on the first that fails.
func netnsRunner(t *testing.T) func(args ...string) {
	return func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// addBMv2Worker makes worker w's namespace ns beside the switch's
// namespace sw: its data port eth0 (dataIP/24) cabled to dW in sw, which
// BMv2 takes as a port, and its management port mgmt0 (mgmtIP/24) on sw's
// bridge br0.
func addBMv2Worker(run func(args ...string), tag, sw, ns string, w int, dataIP, mgmtIP string) {
	run("ip", "netns", "add", ns)
	run("ip", "-n", ns, "link", "set", "lo", "up")
	run("ip", "link", "add", fmt.Sprintf("%sd%d", tag, w), "netns", ns, "type", "veth", "peer", "name", fmt.Sprintf("d%d", w), "netns", sw)
	run("ip", "-n", ns, "link", "set", fmt.Sprintf("%sd%d", tag, w), "name", "eth0")
	run("ip", "-n", ns, "addr", "add", dataIP+"/24", "dev", "eth0")
	run("ip", "-n", ns, "link", "set", "eth0", "up")
	run("ip", "-n", sw, "link", "set", fmt.Sprintf("d%d", w), "up")
	// BMv2 reads frames as the sender's kernel hands them to the veth:
	// with UDP segmentation offload on, a run of datagrams arrives as
	// one oversized frame, of which the program takes the first
	// datagram (every job then fails: checked). Turning the offload
	// off makes the kernel cut runs into datagrams, as a NIC does on
	// the wire.
	run("ip", "netns", "exec", ns, "ethtool", "-K", "eth0", "tx-udp-segmentation", "off")
	run("ip", "link", "add", fmt.Sprintf("%sm%d", tag, w), "netns", ns, "type", "veth", "peer", "name", fmt.Sprintf("m%d", w), "netns", sw)
	run("ip", "-n", ns, "link", "set", fmt.Sprintf("%sm%d", tag, w), "name", "mgmt0")
	run("ip", "-n", ns, "addr", "add", mgmtIP+"/24", "dev", "mgmt0")
	run("ip", "-n", ns, "link", "set", "mgmt0", "up")
	run("ip", "-n", sw, "link", "set", fmt.Sprintf("m%d", w), "master", "br0")
	run("ip", "-n", sw, "link", "set", fmt.Sprintf("m%d", w), "up")
}

// newBMv2Rack builds the namespaces and starts BMv2 with the compiled
// program's JSON (not yet pushed: the controller pushes it).
func newBMv2Rack(t *testing.T, workers int) *bmv2Rack {
	t.Helper()
	tools, jsonPath := compileForBMv2Rack(t, "starts BMv2 and processes")
	dir := t.TempDir()
	r := &bmv2Rack{tag: fmt.Sprintf("smb%d", os.Getpid()%100000), workers: workers, tools: tools, json: jsonPath}
	r.sw = r.tag + "s"
	run := netnsRunner(t)
	t.Cleanup(func() {
		for w := 0; w < workers; w++ {
			exec.Command("ip", "netns", "del", r.workerNS(w)).Run()
		}
		exec.Command("ip", "netns", "del", r.sw).Run()
	})
	run("ip", "netns", "add", r.sw)
	run("ip", "-n", r.sw, "link", "set", "lo", "up")
	run("ip", "-n", r.sw, "link", "add", "br0", "type", "bridge")
	run("ip", "-n", r.sw, "addr", "add", "10.79.0.1/24", "dev", "br0")
	run("ip", "-n", r.sw, "link", "set", "br0", "up")
	var portMap strings.Builder
	ports := map[uint32]string{}
	for w := 0; w < workers; w++ {
		ns := r.workerNS(w)
		addBMv2Worker(run, r.tag, r.sw, ns, w, r.dataIP(w), fmt.Sprintf("10.79.0.%d", 10+w))
		ports[uint32(w+1)] = fmt.Sprintf("d%d", w)
		fmt.Fprintf(&portMap, "%s %d\n", r.dataIP(w), w+1)
	}
	r.portMap = filepath.Join(dir, "ports.txt")
	if err := os.WriteFile(r.portMap, []byte(portMap.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	sw, err := bmv2.Start(sctx, tools, bmv2.Options{Ports: ports, GRPCAddr: "127.0.0.1:9559", ThriftPort: 9090, NetNS: r.sw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sw.Stop()
		if t.Failed() {
			t.Logf("simple_switch_grpc output:\n%s", sw.Output())
		}
	})
	r.controller = "10.79.0.1:50051"
	return r
}

// startController runs `switchml controller` for BMv2 in the switch's
// namespace with extra flags, and waits until it serves.
func (r *bmv2Rack) startController(t *testing.T, extra ...string) *proc {
	t.Helper()
	args := append([]string{"controller", "--target", "127.0.0.1:9559", "--target-kind", "bmv2",
		"--device-config", r.json, "--port-map", r.portMap, "--switch-mac", bmv2SwitchMAC,
		"--dataplane", bmv2SwitchIP + ":48864", "--listen", r.controller, "--allow-open-jobs",
		// Workers reach the controller on the management network and the
		// switch on the data network.
		"--allow-lane-address-mismatch"}, extra...)
	p := spawn(t, []string{"ip", "netns", "exec", r.sw}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-p.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := harness.WaitReady(ctx, r.controller, rack.DialIn(r.sw), nil); err != nil {
		t.Fatalf("controller not ready (%v):\n%s", err, p.Logs())
	}
	return p
}

func (r *bmv2Rack) stopController(t *testing.T, p *proc) {
	t.Helper()
	p.Cmd().Process.Signal(os.Interrupt)
	p.wait(t, 10*time.Second)
}

// job runs one job's ranks, one per worker namespace, bound to the data
// interface, and checks every rank's verified result.
func (r *bmv2Rack) job(t *testing.T, js jobSpec) []benchmarks.WorkerReport {
	t.Helper()
	js.workers = r.workers
	prefixes := func(rank int) []string { return []string{"ip", "netns", "exec", r.workerNS(rank)} }
	binds := make([]string, r.workers)
	for w := range binds {
		binds[w] = r.dataIP(w)
	}
	js.bind = binds
	start := time.Now()
	reps := runJob(t, switchSide{controller: r.controller}, prefixes, js)
	var retx uint64
	var tat float64
	for _, rep := range reps {
		retx += rep.Retransmits
		tat = max(tat, rep.MedianTAT)
	}
	t.Logf("%s: %d workers x %d %s, %d values per packet, %d iterations verified; median TAT %.3f s (slowest rank), %d retransmissions, %.1f s with start-up",
		js.name, js.workers, js.elements, js.dtype, reps[0].PacketElements, js.iters, tat, retx, time.Since(start).Seconds())
	return reps
}

// TestBMv2 runs SwitchML jobs through BMv2 executing the compiled v1model
// program, programmed by `switchml controller --target-kind bmv2`: three
// worker hosts, each its own namespace cabled to a BMv2 port.
func TestBMv2(t *testing.T) {
	r := newBMv2Rack(t, 3)
	// BMv2 forwards thousands of packets a second and its queues are
	// short: a small window, and a timeout above its round trip.
	slow := []string{"--timeout", "40ms", "--give-up", "60s"}
	t.Run("bad-input", func(t *testing.T) { r.badInput(t) })
	ctl := r.startController(t)
	t.Run("refused-workers", func(t *testing.T) { r.refusedWorkers(t) })
	t.Run("int32", func(t *testing.T) {
		r.job(t, jobSpec{name: "bmv2-int32", dtype: "int32", elements: 12_000, iters: 2, lanes: 2, window: 8, pe: 64, extra: slow})
	})
	t.Run("float32", func(t *testing.T) {
		// 512-element runs of magnitude 2^-8..2^7 that differ by rank:
		// exponents mostly negative and different across the ranks of a
		// block.
		// No --packet-elements: the workers take what the controller
		// describes.
		reps := r.job(t, jobSpec{name: "bmv2-float32", dtype: "float32", elements: 16_384, iters: 2, lanes: 2, window: 8, pe: -1, extra: slow})
		for _, rep := range reps {
			if rep.PacketElements != 64 {
				t.Errorf("rank %d chose %d values per packet, want the 64 the controller described", rep.Rank, rep.PacketElements)
			}
		}
	})
	t.Run("two-jobs", func(t *testing.T) {
		// Parallel subtests: both jobs run at once on the same switch.
		for _, js := range []jobSpec{
			{name: "bmv2-a", dtype: "int32", elements: 6_000, iters: 2, lanes: 1, window: 8, extra: append([]string{"--seed", "3"}, slow...)},
			{name: "bmv2-b", dtype: "float32", elements: 6_000, iters: 2, lanes: 2, window: 4, extra: append([]string{"--seed", "4"}, slow...)},
		} {
			t.Run(js.name, func(t *testing.T) {
				t.Parallel()
				r.job(t, js)
			})
		}
	})
	r.stopController(t, ctl)

	t.Run("loss", func(t *testing.T) {
		// The program's drop_simulator drops 2% of contributions on
		// arrival and 2% of result copies on departure.
		ctl := r.startController(t, "--simulate-loss-in", "0.02", "--simulate-loss-out", "0.02")
		defer r.stopController(t, ctl)
		for _, dtype := range []string{"int32", "float32"} {
			reps := r.job(t, jobSpec{name: "bmv2-loss-" + dtype, dtype: dtype, elements: 8_000, iters: 2, lanes: 2, window: 8, pe: 64, extra: slow})
			var retx uint64
			for _, rep := range reps {
				retx += rep.Retransmits
			}
			if retx == 0 {
				t.Errorf("%s: no retransmissions under 2%% loss each way: the switch dropped nothing", dtype)
			}
			t.Logf("%s under loss: %d retransmissions across %d workers", dtype, retx, len(reps))
		}
	})
}

// badInput: a controller given what BMv2 cannot run exits with an error that
// names the problem, before serving any worker.
func (r *bmv2Rack) badInput(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.json")
	if err := os.WriteFile(garbage, []byte(`{"this is": "not a BMv2 program"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	mainInfo := filepath.Join(dir, "main.p4info.txtpb")
	if err := os.WriteFile(mainInfo, p4info.Text(), 0o644); err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(dir, "renamed.p4info.txtpb")
	if err := os.WriteFile(renamed, bytes.ReplaceAll(v1model.P4InfoText, []byte(`"SwitchMLEgress.reply_address"`), []byte(`"SwitchMLEgress.reply_to"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"device config that is no BMv2 program", []string{"--device-config", garbage}, "not a BMv2 JSON program"},
		{"P4Info of another program", []string{"--p4info", mainInfo}, "the P4Info does not match the program"},
		{"P4Info without the controller's table", []string{"--p4info", renamed}, "SwitchMLEgress.reply_address is not in the P4Info"},
		{"wrong target kind", []string{"--target-kind", "softswitch"}, "the software switch runs no compiled program"},
		{"no port map", []string{"--port-map", ""}, "needs --port-map"},
	} {
		args := append([]string{"controller", "--target", "127.0.0.1:9559", "--target-kind", "bmv2",
			"--device-config", r.json, "--port-map", r.portMap, "--listen", r.controller, "--allow-open-jobs", "--connect-timeout", "20s"}, c.args...)
		p := spawn(t, []string{"ip", "netns", "exec", r.sw}, args...)
		err := p.wait(t, time.Minute)
		if err == nil || !strings.Contains(p.Logs(), c.want) {
			t.Errorf("%s: exit %v, stderr:\n%s\nwant a failure naming %q", c.name, err, p.Logs(), c.want)
		}
		if strings.Contains(p.Logs(), "controller ready") {
			t.Errorf("%s: the controller served workers", c.name)
		}
	}
}

// refusedWorkers: a worker the switch cannot serve fails at join with an
// error that says why, instead of timing out.
func (r *bmv2Rack) refusedWorkers(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"packet size", []string{"--bind", r.dataIP(0), "--packet-elements", "256"}, "the bmv2 switch aggregates 64 with the compatible header"},
		{"extended header", []string{"--bind", r.dataIP(0), "--extended"}, "takes only the compatible header"},
		// The management address is not cabled to the switch.
		{"address not in the port map", []string{"--bind", "10.79.0.10"}, "10.79.0.10 is not in the controller's port map"},
	} {
		args := append([]string{"allreduce", "--controller", r.controller, "--job", "refused", "--rank", "0", "--workers", "1",
			"--elements", "64", "--join-timeout", "30s"}, c.args...)
		p := spawn(t, []string{"ip", "netns", "exec", r.workerNS(0)}, args...)
		err := p.wait(t, time.Minute)
		if err == nil || !strings.Contains(p.Logs(), c.want) {
			t.Errorf("%s: exit %v, stderr:\n%s\nwant a failure naming %q", c.name, err, p.Logs(), c.want)
		}
	}
}
