package bmv2

import (
	"context"
	"net"
	"net/netip"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/p4tools"
)

func TestStartNeedsAddress(t *testing.T) {
	if _, err := Start(context.Background(), &p4tools.Tools{}, Options{}); err == nil || !strings.Contains(err.Error(), "GRPCAddr") {
		t.Fatalf("Start without GRPCAddr: %v, want an error naming GRPCAddr", err)
	}
}

func TestStartRefusesBusyAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Start(context.Background(), &p4tools.Tools{}, Options{GRPCAddr: l.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "already listens") {
		t.Fatalf("Start on a busy address: %v, want an error saying so", err)
	}
}

// TestStartReportsEarlyExit: a switch that cannot start is reported with
// its output, not waited for until the deadline.
func TestStartReportsEarlyExit(t *testing.T) {
	tools := p4tools.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Start(ctx, tools, Options{GRPCAddr: freeAddr(t), Args: []string{"--no-such-option"}})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "Error while parsing command line") {
		t.Fatalf("Start with a bad option: %v, want an early exit with BMv2's message", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Start waited for its deadline")
	}
}

func TestCompileReportsCompilerMessage(t *testing.T) {
	tools := p4tools.ForTest(t)
	dir := t.TempDir()
	src := dir + "/broken.p4"
	if err := os.WriteFile(src, []byte("#include <v1model.p4>\ncontrol C() { apply { undefined_thing(); } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := Compile(context.Background(), tools, src, dir)
	if err == nil || !strings.Contains(err.Error(), "undefined_thing") {
		t.Fatalf("Compile of a broken program: %v, want the compiler's message naming undefined_thing", err)
	}
}

// TestSwitchRoundTrip starts BMv2 on two veth pairs, pushes the compiled
// SwitchML program with the P4Info p4c wrote, and reads back a worker entry,
// a reply entry and a multicast group written through the controller.
func TestSwitchRoundTrip(t *testing.T) {
	tools := needSwitch(t)
	jsonPath, p4infoPath := compiled(t, tools)
	for i := 1; i <= 2; i++ {
		vethPair(t, ifName("a", i), ifName("b", i))
	}
	sw := startSwitch(t, tools, map[uint32]string{1: ifName("b", 1), 2: ifName("b", 2)}, "info")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := controller.Dial(ctx, controller.ClientConfig{Target: sw.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if !cl.Primary() {
		t.Fatal("the only controller is not primary")
	}
	text, err := os.ReadFile(p4infoPath)
	if err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.SetPipeline(ctx, loadP4Info(t, text), js, 0); err != nil {
		t.Fatal(err)
	}

	job := controller.JobEntries{
		MulticastGroup: 7,
		Replicas:       []controller.Replica{{Port: 1, Instance: 0}, {Port: 2, Instance: 1}},
		Workers: []controller.WorkerEntry{
			{Addr: netip.MustParseAddrPort("10.9.0.1:5000"), Job: 3, Rank: 0, NumWorkers: 2, MulticastGroup: 7, PoolBase: 16, PoolSize: 32},
			{Addr: netip.MustParseAddrPort("10.9.0.2:5001"), Job: 3, Rank: 1, NumWorkers: 2, MulticastGroup: 7, PoolBase: 16, PoolSize: 32},
		},
		Replies: []controller.ReplyEntry{
			{Job: 3, Rank: 0, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addr: netip.MustParseAddrPort("10.9.0.1:5000")},
			{Job: 3, Rank: 1, MAC: [6]byte{2, 0, 0, 0, 0, 2}, Addr: netip.MustParseAddrPort("10.9.0.2:5001")},
		},
	}
	if err := cl.InstallJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	workers, err := cl.ReadWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(workers, job.Workers) {
		t.Errorf("workers read back:\n%+v\nwant\n%+v", workers, job.Workers)
	}
	replies, err := cl.ReadReplies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(replies, job.Replies) {
		t.Errorf("replies read back:\n%+v\nwant\n%+v", replies, job.Replies)
	}
	groups, err := cl.ReadMulticastGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Replicas are a set: the order BMv2 returns them in means nothing.
	for _, reps := range groups {
		sort.Slice(reps, func(i, j int) bool { return reps[i].Instance < reps[j].Instance })
	}
	if !reflect.DeepEqual(groups, map[uint16][]controller.Replica{7: job.Replicas}) {
		t.Errorf("multicast groups read back: %+v, want group 7 = %+v", groups, job.Replicas)
	}

	if err := cl.RemoveJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if workers, err := cl.ReadWorkers(ctx); err != nil || len(workers) != 0 {
		t.Errorf("after RemoveJob: workers %+v, %v; want none", workers, err)
	}
}
