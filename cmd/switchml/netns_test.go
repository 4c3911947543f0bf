package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/internal/testenv"
	"github.com/switchml/switchml-go/transport/afxdp"
)

// TestNetworkNamespaces runs a job across network namespaces: one per
// worker and one for the switch, joined by veth pairs to a bridge in the
// switch's namespace, as separate hosts on a rack would be.
func TestNetworkNamespaces(t *testing.T) {
	const workers = 3
	sw, prefix := netnsRack(t, workers, 77)
	f := startFabric(t, []string{"ip", "netns", "exec", sw}, "10.77.0.1")
	for _, js := range []jobSpec{
		{name: "ns-int32", dtype: "int32", workers: workers, elements: 100_000, iters: 2},
		{name: "ns-float32", dtype: "float32", workers: workers, elements: 100_000, iters: 2, lanes: 4},
	} {
		t.Run(js.name, func(t *testing.T) { runJob(t, f, prefix, js) })
	}
}

// TestNetworkNamespacesAFXDP runs jobs across network namespaces with the
// workers and the switch on AF_XDP sockets (--transport afxdp): the
// workers' veth ports and the switch's bridge each get the XDP program,
// and every rank's sums are checked exactly (int32) or against the bound
// (float32), with every socket on AF_XDP, none fallen back to UDP.
func TestNetworkNamespacesAFXDP(t *testing.T) {
	const workers = 3
	if err := afxdp.Supported(); err != nil {
		t.Skipf("AF_XDP unavailable: %v", err)
	}
	sw, prefix := netnsRack(t, workers, 78)
	f := startFabric(t, []string{"ip", "netns", "exec", sw}, "10.78.0.1", "--transport", "afxdp")
	if logs := f.fab.Logs()["switch"]; !strings.Contains(logs, "transport=afxdp") {
		t.Fatalf("the switch is not serving on AF_XDP; its log:\n%s", logs)
	}
	for _, js := range []jobSpec{
		{name: "xdp-int32", dtype: "int32", workers: workers, elements: 300_000, iters: 3, extra: []string{"--transport", "afxdp"}},
		{name: "xdp-float32", dtype: "float32", workers: workers, elements: 300_000, iters: 3, lanes: 4, pe: 256, extra: []string{"--transport", "afxdp"}},
	} {
		t.Run(js.name, func(t *testing.T) {
			for _, rep := range runJob(t, f, prefix, js) {
				if rep.Transport != "afxdp" {
					t.Errorf("rank %d ran on %q, want afxdp", rep.Rank, rep.Transport)
				}
			}
		})
	}
}

// netnsRack builds a namespace per worker and one for the switch, the
// workers' veth ports joined to a bridge at 10.<net>.0.1 in the switch's
// namespace, as separate hosts on a rack would be; worker r is
// 10.<net>.0.(10+r). It returns the switch's namespace and each worker's
// command prefix, and removes them all when the test ends.
func netnsRack(t *testing.T, workers, net int) (string, func(int) []string) {
	t.Helper()
	needProcesses(t)
	testenv.NeedNetns(t)
	tag := fmt.Sprintf("smlt%d%d", net, os.Getpid()%10000)
	sw := tag + "s"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for r := 0; r < workers; r++ {
			exec.Command("ip", "netns", "del", fmt.Sprintf("%sw%d", tag, r)).Run()
		}
		exec.Command("ip", "netns", "del", sw).Run()
	})
	run("ip", "netns", "add", sw)
	run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	run("ip", "-n", sw, "addr", "add", fmt.Sprintf("10.%d.0.1/24", net), "dev", "br0")
	run("ip", "-n", sw, "link", "set", "br0", "up")
	run("ip", "-n", sw, "link", "set", "lo", "up")
	for r := 0; r < workers; r++ {
		ns := fmt.Sprintf("%sw%d", tag, r)
		run("ip", "netns", "add", ns)
		run("ip", "link", "add", fmt.Sprintf("%sv%d", tag, r), "netns", ns, "type", "veth", "peer", "name", fmt.Sprintf("p%d", r), "netns", sw)
		run("ip", "-n", ns, "link", "set", fmt.Sprintf("%sv%d", tag, r), "name", "eth0")
		run("ip", "-n", ns, "addr", "add", fmt.Sprintf("10.%d.0.%d/24", net, 10+r), "dev", "eth0")
		run("ip", "-n", ns, "link", "set", "eth0", "up")
		run("ip", "-n", ns, "link", "set", "lo", "up")
		run("ip", "-n", sw, "link", "set", fmt.Sprintf("p%d", r), "master", "br0")
		run("ip", "-n", sw, "link", "set", fmt.Sprintf("p%d", r), "up")
	}
	return sw, func(r int) []string { return []string{"ip", "netns", "exec", fmt.Sprintf("%sw%d", tag, r)} }
}
