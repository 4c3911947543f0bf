package bmv2

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4tools"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/v1model"
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
	if !errors.Is(err, ErrAddrInUse) {
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
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "Error while parsing command line") {
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
	cl, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.Addr()})
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
	info := loadP4Info(t, text)
	if err := cl.VerifyPipeline(ctx, info, js); err != nil {
		t.Fatalf("VerifyPipeline: %v", err)
	}
	if err := cl.SetPipeline(ctx, info, js, 77); err != nil {
		t.Fatal(err)
	}
	if pc, err := cl.Pipeline(ctx); err != nil || pc.GetCookie().GetCookie() != 77 || !bytes.Equal(pc.GetP4DeviceConfig(), js) {
		t.Errorf("Pipeline after SetPipeline: cookie %v, %d bytes of device config (pushed %d), %v; want cookie 77 and the JSON",
			pc.GetCookie(), len(pc.GetP4DeviceConfig()), len(js), err)
	}

	job := switchjob.Placement{
		JobID: 3, PoolBase: 16, PoolSize: 32, Group: 7, World: 2,
		Replicas: []switchjob.Replica{{EgressPort: 1, Instance: 0}, {EgressPort: 2, Instance: 1}},
		Workers: []switchjob.Lane{
			{Rank: 0, Addr: netip.MustParseAddrPort("10.9.0.1:5000")},
			{Rank: 1, Addr: netip.MustParseAddrPort("10.9.0.2:5001")},
		},
		Replies: []switchjob.Lane{
			{Rank: 0, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addr: netip.MustParseAddrPort("10.9.0.1:5000")},
			{Rank: 1, MAC: [6]byte{2, 0, 0, 0, 0, 2}, Addr: netip.MustParseAddrPort("10.9.0.2:5001")},
		},
	}
	if err := cl.InstallJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	found, err := cl.ReadPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Replicas are a set: the order BMv2 returns them in means nothing.
	for _, p := range found {
		sort.Slice(p.Replicas, func(i, j int) bool { return p.Replicas[i].Instance < p.Replicas[j].Instance })
	}
	if !reflect.DeepEqual(found, []switchjob.Placement{job}) {
		t.Errorf("jobs read back:\n%+v\nwant\n%+v", found, job)
	}

	if err := cl.RemoveJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if workers, err := cl.ReadWorkers(ctx); err != nil || len(workers) != 0 {
		t.Errorf("after RemoveJob: workers %+v, %v; want none", workers, err)
	}
}

// TestThriftRegisters reads and writes registers through the Thrift
// runtime client, and shows that BMv2's P4Runtime server refuses the same
// operations (which is why the client exists).
func TestThriftRegisters(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: starts BMv2")
	}
	tools := p4tools.ForTest(t)
	jsonPath, p4infoPath := compiled(t, tools)
	sw := startSwitch(t, tools, nil, "info")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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

	th, err := sw.Thrift(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	const count = "SwitchMLIngress.pool_count"
	const exponent = "SwitchMLIngress.pool_exponent"
	if err := th.RegisterWrite(ctx, count, 7, 0xbeef); err != nil {
		t.Fatal(err)
	}
	if v, err := th.RegisterRead(ctx, count, 7); err != nil || v != 0xbeef {
		t.Fatalf("pool_count[7] = %#x, %v; want 0xbeef", v, err)
	}
	// A negative exponent is stored as its 8 low bits.
	if err := th.RegisterWrite(ctx, exponent, 3, uint64(0xfd)); err != nil {
		t.Fatal(err)
	}
	if v, err := th.RegisterRead(ctx, exponent, 3); err != nil || int8(v) != -3 {
		t.Fatalf("pool_exponent[3] = %#x, %v; want -3", v, err)
	}
	if err := th.RegisterWriteRange(ctx, count, 10, 20, 5); err != nil {
		t.Fatal(err)
	}
	all, err := th.RegisterReadAll(ctx, count)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 16384 {
		t.Fatalf("pool_count has %d cells, want 16384", len(all))
	}
	for i := 8; i < 22; i++ {
		want := uint64(0)
		if i >= 10 && i < 20 {
			want = 5
		}
		if all[i] != want {
			t.Errorf("after writing 5 to [10, 20): pool_count[%d] = %d, want %d", i, all[i], want)
		}
	}
	if err := th.RegisterReset(ctx, count); err != nil {
		t.Fatal(err)
	}
	if v, err := th.RegisterRead(ctx, count, 7); err != nil || v != 0 {
		t.Fatalf("after reset: pool_count[7] = %d, %v; want 0", v, err)
	}
	var te *ThriftError
	if _, err := th.RegisterRead(ctx, "no.such_register", 0); !errors.As(err, &te) || te.Code != 1 {
		t.Errorf("read of an unknown register: %v, want an invalid-name ThriftError", err)
	}
	if _, err := th.RegisterRead(ctx, count, 1<<20); !errors.As(err, &te) || te.Code != 2 {
		t.Errorf("read past the end: %v, want an invalid-index ThriftError", err)
	}
	// The connection survives the errors above.
	if _, err := th.RegisterRead(ctx, count, 0); err != nil {
		t.Errorf("read after errors: %v", err)
	}
}

// programmedSwitch starts BMv2 without ports and pushes the compiled
// program through the controller's client.
func programmedSwitch(t *testing.T) (*Switch, *p4rt.Client, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped in -short mode: starts BMv2")
	}
	tools := p4tools.ForTest(t)
	jsonPath, _ := compiled(t, tools)
	sw := startSwitch(t, tools, nil, "info")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cl, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	js, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.SetPipeline(ctx, loadP4Info(t, v1model.P4InfoText), js, 0); err != nil {
		t.Fatal(err)
	}
	return sw, cl, ctx
}

// TestControllerResetPool checks that the controller can make a partition
// idle on BMv2, as its job service does before every job
// (p4rt.Client.ResetPool, called from JobService.activate): the
// worker bitmaps and countdowns of both sets must end up zero.
func TestControllerResetPool(t *testing.T) {
	sw, cl, ctx := programmedSwitch(t)
	th, err := sw.Thrift(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()

	// What a finished job leaves behind: complete sets (all bits, count 0)
	// and sets still counting down.
	const base, size, slots = 40, 8, 8192
	const bitmap, count = "SwitchMLIngress.pool_bitmap", "SwitchMLIngress.pool_count"
	for set := 0; set < 2; set++ {
		first := set*slots + base
		if err := th.RegisterWriteRange(ctx, bitmap, first, first+size, 0b111); err != nil {
			t.Fatal(err)
		}
		if err := th.RegisterWriteRange(ctx, count, first, first+size, 1); err != nil {
			t.Fatal(err)
		}
	}

	cl.SetRegisterBackend(th)
	if err := cl.ResetPool(ctx, base, size, slots); err != nil {
		t.Errorf("p4rt.ResetPool on BMv2 through its Thrift server: %v", err)
	}
	for set := 0; set < 2; set++ {
		for slot := base; slot < base+size; slot++ {
			idx := set*slots + slot
			b, err1 := th.RegisterRead(ctx, bitmap, idx)
			c, err2 := th.RegisterRead(ctx, count, idx)
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			if b != 0 || c != 0 {
				t.Errorf("after ResetPool: set %d slot %d: bitmap %#b, count %d; want both 0", set, slot, b, c)
				return
			}
		}
	}
}

// TestControllerResetCounters checks that the controller can zero the stats
// counter on BMv2 (p4rt.Client.ResetCounters).
func TestControllerResetCounters(t *testing.T) {
	_, cl, ctx := programmedSwitch(t)
	// Counts to clear, written one index at a time (which BMv2 takes).
	var ups []*p4v1.Update
	for i := 0; i < 32; i++ {
		ups = append(ups, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{
			CounterEntry: &p4v1.CounterEntry{CounterId: p4info.CounterStatsID, Index: &p4v1.Index{Index: int64(i)},
				Data: &p4v1.CounterData{PacketCount: int64(i + 1)}}}}})
	}
	if err := cl.Write(ctx, ups...); err != nil {
		t.Fatal(err)
	}
	if st, err := cl.ReadCounters(ctx); err != nil || len(st) != 32 || st[31] != 32 {
		t.Fatalf("counters after writing 1..32: %v, %v", st, err)
	}
	if err := cl.ResetCounters(ctx); err != nil {
		t.Errorf("p4rt.ResetCounters on BMv2: %v\n"+
			"BMv2's P4Runtime server refuses a counter write without an index (UNIMPLEMENTED, \"Wildcard write is not "+
			"supported for indirect counters yet\"); one MODIFY per index, as above, works.", err)
	}
	st, err := cl.ReadCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range st {
		if v != 0 {
			t.Errorf("after ResetCounters: counters %v, want all 0", st)
			break
		}
	}
}
