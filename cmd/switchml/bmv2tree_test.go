package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/p4/bmv2"
	"github.com/switchml/switchml-go/p4/controller"
)

// bmv2Tree is a two-level tree of BMv2 switches running the v1model
// program: two leaves, each cabled to two worker hosts (ports 1 and 2) and
// by its port 9 to the spine (ports 1 and 2). The three switches, the
// controller and a management bridge share namespace sw; each worker
// namespace has eth0 (data, cabled to its leaf) and mgmt0 (the bridge).
type bmv2Tree struct {
	tag, sw    string
	workers    int
	json       string
	portMap    string
	topology   string
	controller string
}

const treeWorkersPerLeaf = 2

func (r *bmv2Tree) workerNS(rank int) string { return fmt.Sprintf("%sw%d", r.tag, rank) }

// dataIP is rank's address on its leaf's segment 10.77.(leaf+1).0/24.
func (r *bmv2Tree) dataIP(rank int) string {
	return fmt.Sprintf("10.77.%d.%d", rank/treeWorkersPerLeaf+1, 10+rank)
}

func newBMv2Tree(t *testing.T) *bmv2Tree {
	t.Helper()
	tools, jsonPath := compileForBMv2Rack(t, "starts three BMv2 switches and processes")
	dir := t.TempDir()
	const leaves = 2
	r := &bmv2Tree{tag: fmt.Sprintf("smt%d", os.Getpid()%100000), workers: leaves * treeWorkersPerLeaf, json: jsonPath}
	r.sw = r.tag + "s"
	run := netnsRunner(t)
	t.Cleanup(func() {
		for w := 0; w < r.workers; w++ {
			exec.Command("ip", "netns", "del", r.workerNS(w)).Run()
		}
		exec.Command("ip", "netns", "del", r.sw).Run()
	})
	run("ip", "netns", "add", r.sw)
	run("ip", "-n", r.sw, "link", "set", "lo", "up")
	run("ip", "netns", "exec", r.sw, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	run("ip", "-n", r.sw, "link", "add", "br0", "type", "bridge")
	run("ip", "-n", r.sw, "addr", "add", "10.76.0.1/24", "dev", "br0")
	run("ip", "-n", r.sw, "link", "set", "br0", "up")
	leafPorts := []map[uint32]string{{}, {}}
	spinePorts := map[uint32]string{}
	var portMap strings.Builder
	for w := 0; w < r.workers; w++ {
		ns, leaf := r.workerNS(w), w/treeWorkersPerLeaf
		addBMv2Worker(run, r.tag, r.sw, ns, w, r.dataIP(w), fmt.Sprintf("10.76.0.%d", 10+w))
		port := uint32(w%treeWorkersPerLeaf + 1)
		leafPorts[leaf][port] = fmt.Sprintf("d%d", w)
		fmt.Fprintf(&portMap, "%s %d\n", r.dataIP(w), port)
	}
	// Trunks: leaf l's port 9 <-> the spine's port l+1.
	const uplinkPort = 9
	for l := 0; l < leaves; l++ {
		up, down := fmt.Sprintf("u%d", l), fmt.Sprintf("t%d", l)
		run("ip", "-n", r.sw, "link", "add", up, "type", "veth", "peer", "name", down)
		run("ip", "-n", r.sw, "link", "set", up, "up")
		run("ip", "-n", r.sw, "link", "set", down, "up")
		leafPorts[l][uplinkPort] = up
		spinePorts[uint32(l+1)] = down
	}
	r.portMap = filepath.Join(dir, "ports.txt")
	if err := os.WriteFile(r.portMap, []byte(portMap.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	topo := controller.Topology{Spine: controller.TopologySwitch{P4Runtime: "127.0.0.1:9559", Dataplane: "10.77.0.254:48864", Thrift: "127.0.0.1:9090"}}
	all := []map[uint32]string{spinePorts, leafPorts[0], leafPorts[1]}
	for l := 0; l < leaves; l++ {
		topo.Leaves = append(topo.Leaves, controller.TopologySwitch{
			P4Runtime: fmt.Sprintf("127.0.0.1:%d", 9560+l), Dataplane: fmt.Sprintf("10.77.%d.254:48864", l+1), Thrift: fmt.Sprintf("127.0.0.1:%d", 9091+l),
			Workers: []string{fmt.Sprintf("10.77.%d.0/24", l+1)}, UplinkPort: uplinkPort, Port: uint32(l + 1), MAC: bmv2SwitchMAC,
		})
	}
	b, err := json.Marshal(topo)
	if err != nil {
		t.Fatal(err)
	}
	r.topology = filepath.Join(dir, "topology.json")
	if err := os.WriteFile(r.topology, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, ports := range all {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		sw, err := bmv2.Start(sctx, tools, bmv2.Options{Ports: ports, GRPCAddr: fmt.Sprintf("127.0.0.1:%d", 9559+i), ThriftPort: 9090 + i, NetNS: r.sw})
		scancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sw.Stop()
			if t.Failed() {
				t.Logf("simple_switch_grpc %d output:\n%s", i, sw.Output())
			}
		})
	}
	r.controller = "10.76.0.1:50051"
	return r
}

// startController runs `switchml controller --topology` for the BMv2 tree
// with extra flags, and waits until it serves.
func (r *bmv2Tree) startController(t *testing.T, extra ...string) *proc {
	t.Helper()
	args := append([]string{"controller", "--target-kind", "bmv2", "--topology", r.topology,
		"--device-config", r.json, "--port-map", r.portMap, "--switch-mac", bmv2SwitchMAC,
		"--listen", r.controller, "--allow-open-jobs",
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

// job runs one job's ranks, one per worker namespace, and checks every
// rank's verified result; it returns the retransmissions of all ranks.
func (r *bmv2Tree) job(t *testing.T, js jobSpec) (reps []benchmarks.WorkerReport, retx uint64) {
	t.Helper()
	js.workers = r.workers
	js.bind = make([]string, r.workers)
	for w := range js.bind {
		js.bind[w] = r.dataIP(w)
	}
	reps = runJob(t, switchSide{controller: r.controller}, func(rank int) []string { return []string{"ip", "netns", "exec", r.workerNS(rank)} }, js)
	for _, rep := range reps {
		retx += rep.Retransmits
	}
	t.Logf("%s: %d workers x %d %s, %d iterations verified on every rank; %d retransmissions", js.name, js.workers, js.elements, js.dtype, js.iters, retx)
	return reps, retx
}

// treeJob is a job of TestBMv2Tree and the width its ranks must use.
type treeJob struct {
	js   jobSpec
	bits int
}

// treeJobs are the jobs TestBMv2Tree runs, clean and under loss: exact
// int32 and float32 at 32 bits, and on the 16-bit wire bfloat16 (its
// default) and float32 asked for it, whose pair words the leaves' partial
// sums carry as they carry any word.
func treeJobs(name string, extra []string) []treeJob {
	var jobs []treeJob
	for _, c := range []struct {
		dtype string
		bits  int
		args  []string
	}{
		{"int32", 32, nil},
		{"float32", 32, nil},
		{"bfloat16", 16, nil},
		{"float32", 16, []string{"--wire-bits", "16"}},
	} {
		jobs = append(jobs, treeJob{jobSpec{name: fmt.Sprintf("%s-%s-%d", name, c.dtype, c.bits), dtype: c.dtype, elements: 6_000, iters: 2,
			lanes: 2, window: 8, pe: 64, extra: append(slices.Clone(c.args), extra...)}, c.bits})
	}
	return jobs
}

// TestBMv2Tree runs jobs through a tree of three BMv2 switches, programmed
// by `switchml controller --target-kind bmv2 --topology`: two leaves that
// run the v1model program's leaf role, each aggregating two workers and
// sending the partial sums up, and a spine whose workers are the leaves.
// Every rank checks every result, at 32 bits and on the 16-bit wire. Under loss, each switch's drop simulator
// drops 2% of what arrives (contributions, partial sums, the spine's
// results at the leaves) and of the result copies it sends, and each
// worker drops 2% of what it sends.
func TestBMv2Tree(t *testing.T) {
	r := newBMv2Tree(t)
	// Two switch hops each way: a timeout above BMv2's round trip through
	// three switches.
	slow := []string{"--timeout", "80ms", "--give-up", "90s"}
	t.Run("clean", func(t *testing.T) {
		ctl := r.startController(t)
		defer func() {
			ctl.Cmd().Process.Signal(os.Interrupt)
			ctl.wait(t, 10*time.Second)
		}()
		for _, c := range treeJobs("tree", slow) {
			reps, _ := r.job(t, c.js)
			wantWidth(t, c.js.name, reps, c.bits)
		}
	})
	t.Run("loss", func(t *testing.T) {
		ctl := r.startController(t, "--simulate-loss-in", "0.02", "--simulate-loss-out", "0.02")
		defer func() {
			ctl.Cmd().Process.Signal(os.Interrupt)
			ctl.wait(t, 10*time.Second)
		}()
		for _, c := range treeJobs("tree-loss", append([]string{"--drop", "0.02"}, slow...)) {
			reps, retx := r.job(t, c.js)
			wantWidth(t, c.js.name, reps, c.bits)
			if retx == 0 {
				t.Errorf("%s: no retransmissions under loss on every hop: nothing was dropped", c.js.name)
			}
		}
	})
}
