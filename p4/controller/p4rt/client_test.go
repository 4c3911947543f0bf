package p4rt

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/softswitch/softswitchtest"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testSlots = 64

// startSwitch runs a software switch's P4Runtime service on a loopback
// TCP listener until the test ends, and returns its address.
func startSwitch(t *testing.T) string {
	t.Helper()
	addr, _ := softswitchtest.Serve(t, softswitch.ServerConfig{DeviceID: 1, Pipeline: pipeline.Config{Slots: testSlots, MaxElements: 64, MaxWorkers: 32},
		Logger: slog.New(slog.DiscardHandler)})
	return addr
}

// testClient dials target as the given election id, with a context that
// ends with the test.
func testClient(t *testing.T, target string, election uint64) (context.Context, *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	c, err := Dial(ctx, ClientConfig{Target: target, ElectionID: election, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ctx, c
}

func sampleJob() switchjob.Placement {
	a := netip.MustParseAddrPort("127.0.0.1:40001")
	b := netip.MustParseAddrPort("127.0.0.2:40002")
	return switchjob.Placement{
		JobID: 3, PoolBase: 8, PoolSize: 4, Group: 5, World: 2,
		Workers: []switchjob.Lane{{Rank: 0, Addr: a}, {Rank: 1, Addr: b}},
		Replies: []switchjob.Lane{
			{Rank: 0, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addr: a},
			{Rank: 1, Addr: b},
		},
		Replicas: []switchjob.Replica{{EgressPort: 0, Instance: 0}, {EgressPort: 1, Instance: 1}},
	}
}

func TestClientReadsBackWhatItWrote(t *testing.T) {
	target := startSwitch(t)
	ctx, c := testClient(t, target, 5)
	if !c.Primary() {
		t.Fatal("sole controller is not primary")
	}
	if err := c.SetPipeline(ctx, nil, nil, 99); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.Pipeline(ctx)
	if err != nil || cfg.GetCookie().GetCookie() != 99 || cfg.GetP4Info().GetPkgInfo().GetArch() != "v1model" {
		t.Fatalf("pipeline read back: %v, %v", cfg.GetCookie(), err)
	}
	j := sampleJob()
	if err := c.InstallJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	found, err := c.ReadPlacements(ctx)
	if err != nil || !reflect.DeepEqual(found, []switchjob.Placement{j}) {
		t.Fatalf("placements read back = %+v, %v\nwrote %+v", found, err, j)
	}

	// Dirty a slot of the partition, reset it, read the registers back.
	idx := int64(1*testSlots + 9) // set 1, slot 9
	if err := c.Write(ctx, RegisterUpdate(p4info.RegisterPoolBitmapID, idx, 3), RegisterUpdate(p4info.RegisterPoolCountID, idx, 1),
		RegisterUpdate(p4info.RegisterPoolBitmapID, 20, 1)); err != nil {
		t.Fatal(err)
	}
	if v, err := c.ReadRegister(ctx, p4info.RegisterPoolBitmapID, int(idx), 1); err != nil || v[0] != 3 {
		t.Fatalf("bitmap before reset = %v, %v", v, err)
	}
	if err := c.ResetPool(ctx, 8, 4, testSlots); err != nil {
		t.Fatal(err)
	}
	for _, reg := range []uint32{p4info.RegisterPoolBitmapID, p4info.RegisterPoolCountID} {
		v, err := c.ReadRegister(ctx, reg, int(idx), 1)
		if err != nil || v[0] != 0 {
			t.Fatalf("register %#x after reset = %v, %v", reg, v, err)
		}
	}
	if v, _ := c.ReadRegister(ctx, p4info.RegisterPoolBitmapID, 20, 1); v[0] != 1 {
		t.Fatalf("reset of slots 8..11 touched slot 20: %v", v)
	}
	if err := c.ResetPool(ctx, 60, 8, testSlots); err == nil {
		t.Fatal("reset beyond the switch's slots accepted")
	}
	stats, err := c.ReadCounters(ctx)
	if err != nil || len(stats) != p4info.StatsSize {
		t.Fatalf("counters = %v, %v", stats, err)
	}
	if err := c.ResetCounters(ctx); err != nil {
		t.Fatal(err)
	}

	// Remove: everything gone, and removing again is not an error.
	if err := c.RemoveJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveJob(ctx, j); err != nil {
		t.Fatalf("second RemoveJob: %v", err)
	}
	workers, _ := c.ReadWorkers(ctx)
	groups, _ := c.ReadMulticastGroups(ctx)
	if len(workers) != 0 || len(groups) != 0 {
		t.Fatalf("after RemoveJob: %d workers, %d groups", len(workers), len(groups))
	}
}

func TestLowerElectionIDRefused(t *testing.T) {
	target := startSwitch(t)
	ctx, high := testClient(t, target, 10)
	if err := high.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	low, err := Dial(ctx, ClientConfig{Target: target, ElectionID: 4, Logger: slog.New(slog.DiscardHandler), YieldPrimary: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { low.Close() })
	if low.Primary() {
		t.Fatal("controller with the lower election id became primary")
	}
	err = low.InstallJob(ctx, sampleJob())
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("backup InstallJob = %v, want PERMISSION_DENIED", err)
	}
	if err := low.SetPipeline(ctx, nil, nil, 0); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("backup SetPipeline = %v, want PERMISSION_DENIED", err)
	}
	// Reads are open to backups.
	if _, err := low.ReadWorkers(ctx); err != nil {
		t.Fatalf("backup read: %v", err)
	}
	if err := high.InstallJob(ctx, sampleJob()); err != nil {
		t.Fatalf("primary InstallJob: %v", err)
	}
}

func TestMalformedWrites(t *testing.T) {
	target := startSwitch(t)
	ctx, c := testClient(t, target, 1)
	if err := c.Write(ctx, RegisterUpdate(p4info.RegisterPoolCountID, 0, 0)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("write before pipeline = %v, want FAILED_PRECONDITION", err)
	}
	if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := WorkerUpdate(p4info.DefaultIDs(), p4v1.Update_INSERT, netip.MustParseAddrPort("[::1]:5"), switchjob.Worker{}); err == nil {
		t.Fatal("IPv6 worker address accepted")
	}
	badRank := sampleJob()
	badRank.Workers[1].Rank = 7 // rank >= num_workers: the pipeline refuses it
	err := c.InstallJob(ctx, badRank)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "rank") {
		t.Fatalf("install with bad rank = %v, want INVALID_ARGUMENT naming the rank", err)
	}
	if ws, _ := c.ReadWorkers(ctx); len(ws) != 0 {
		t.Fatalf("failed install left %d worker entries", len(ws))
	}
	if gs, _ := c.ReadMulticastGroups(ctx); len(gs) != 0 {
		t.Fatalf("failed install left %d groups", len(gs))
	}
	err = c.Write(ctx, RegisterUpdate(p4info.RegisterPoolCountID, 0, 1<<20), RegisterUpdate(p4info.RegisterPoolCountID, 1, 1))
	var we *WriteError
	if !errors.As(err, &we) || len(we.Updates) != 2 || status.Code(we.Updates[0]) != codes.OutOfRange || we.Updates[1] != nil {
		t.Fatalf("batch with an over-wide value = %v", err)
	}
	if err := c.InstallJob(ctx, sampleJob()); err != nil {
		t.Fatal(err)
	}
	if err := c.InstallJob(ctx, sampleJob()); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second install = %v, want ALREADY_EXISTS", err)
	}
	if ws, _ := c.ReadWorkers(ctx); len(ws) != 2 {
		t.Fatalf("duplicate install's rollback removed the first install: %d workers left", len(ws))
	}
}

// TestPlacementRoundTrip: a placement the core made, written to a switch
// and read back as a restarted controller reads it, is the same placement
// (but for the lanes' MACs, which only the reply entries hold).
func TestPlacementRoundTrip(t *testing.T) {
	target := startSwitch(t)
	ctx, c := testClient(t, target, 1)
	if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	p := switchjob.Placement{JobID: 5, PoolBase: 8, PoolSize: 16, Group: 3, World: 2}
	for rank := range uint16(2) {
		for lane := range uint8(2) {
			p.Workers = append(p.Workers, switchjob.Lane{Rank: rank, Lane: lane, Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rank + 1)}), 30000+uint16(lane)), MAC: [6]byte{2, 0, 0, 0, 0, byte(rank)}})
		}
		p.Replicas = append(p.Replicas, switchjob.Replica{EgressPort: 7 + uint32(rank), Instance: rank})
	}
	p.Replies = p.Workers
	if err := c.InstallJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := p
	want.Workers = nil
	for _, l := range p.Workers {
		l.MAC = [6]byte{}
		want.Workers = append(want.Workers, l)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
}
