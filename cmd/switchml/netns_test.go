package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNetworkNamespaces runs a job across network namespaces: one per
// worker and one for the switch, joined by veth pairs to a bridge in the
// switch's namespace, as separate hosts on a rack would be.
func TestNetworkNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (run the tests as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip command: apt-get install iproute2")
	}
	const workers = 3
	tag := fmt.Sprintf("smlt%d", os.Getpid()%100000)
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
	run("ip", "-n", sw, "addr", "add", "10.77.0.1/24", "dev", "br0")
	run("ip", "-n", sw, "link", "set", "br0", "up")
	run("ip", "-n", sw, "link", "set", "lo", "up")
	for r := 0; r < workers; r++ {
		ns := fmt.Sprintf("%sw%d", tag, r)
		run("ip", "netns", "add", ns)
		run("ip", "link", "add", fmt.Sprintf("%sv%d", tag, r), "netns", ns, "type", "veth", "peer", "name", fmt.Sprintf("p%d", r), "netns", sw)
		run("ip", "-n", ns, "link", "set", fmt.Sprintf("%sv%d", tag, r), "name", "eth0")
		run("ip", "-n", ns, "addr", "add", fmt.Sprintf("10.77.0.%d/24", 10+r), "dev", "eth0")
		run("ip", "-n", ns, "link", "set", "eth0", "up")
		run("ip", "-n", ns, "link", "set", "lo", "up")
		run("ip", "-n", sw, "link", "set", fmt.Sprintf("p%d", r), "master", "br0")
		run("ip", "-n", sw, "link", "set", fmt.Sprintf("p%d", r), "up")
	}
	f := startFabric(t, []string{"ip", "netns", "exec", sw}, "10.77.0.1")
	prefix := func(r int) []string { return []string{"ip", "netns", "exec", fmt.Sprintf("%sw%d", tag, r)} }
	for _, js := range []jobSpec{
		{name: "ns-int32", dtype: "int32", workers: workers, elements: 100_000, iters: 2},
		{name: "ns-float32", dtype: "float32", workers: workers, elements: 100_000, iters: 2, lanes: 4},
	} {
		t.Run(js.name, func(t *testing.T) { runJob(t, f, prefix, js) })
	}
}
