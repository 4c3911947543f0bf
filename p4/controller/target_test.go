package controller

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
)

func bmv2Target(t *testing.T, ports map[netip.Addr]uint32) Target {
	t.Helper()
	tg, err := TargetFor(KindBMv2, 0)
	if err != nil {
		t.Fatal(err)
	}
	tg.Ports = ports
	return tg
}

// p4Req is a registration as a worker on a P4 switch sends it: 64 values,
// lanes on one address, the worker's MAC.
func p4Req(job string, rank, world uint32) *jobpb.RegisterRequest {
	r := regReq(job, rank, world, 2, 4, 0)
	r.Mac = []byte{0x02, 0, 0, 0, 0, byte(0x10 + rank)}
	return r
}

// TestP4TargetProgramsPortsAndMACs: replicas go to the ports of the port
// map, results to the MACs the workers reported.
func TestP4TargetProgramsPortsAndMACs(t *testing.T) {
	ports := map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 7, netip.MustParseAddr("127.0.0.2"): 3}
	h := newJobHarnessFor(t, testSlots, bmv2Target(t, ports))
	ctx := testCtx(t)
	resps, errs := h.registerAll(ctx, p4Req("p4", 0, 2), p4Req("p4", 1, 2))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	groups, err := h.sw.ReadMulticastGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 {
		t.Fatalf("groups %v, want one", groups)
	}
	for _, reps := range groups {
		slices.SortFunc(reps, func(a, b switchjob.Replica) int { return int(a.Instance) - int(b.Instance) })
		if want := []switchjob.Replica{{EgressPort: 7, Instance: 0}, {EgressPort: 3, Instance: 1}}; !slices.Equal(reps, want) {
			t.Errorf("replicas %v, want %v (ports from the port map)", reps, want)
		}
	}
	replies, err := h.sw.ReadReplies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(replies) != 4 {
		t.Fatalf("%d reply entries, want 4", len(replies))
	}
	for _, r := range replies {
		if want := [6]byte{2, 0, 0, 0, 0, byte(0x10 + r.Rank)}; r.MAC != want || r.JobID != resps[0].GetJobId() {
			t.Errorf("reply entry %+v: want MAC %x of job %d", r, want, resps[0].GetJobId())
		}
	}
}

func TestTargetRefusesWhatTheSwitchCannotTake(t *testing.T) {
	ports := map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 1}
	h := newJobHarnessFor(t, testSlots, bmv2Target(t, ports))
	ctx := testCtx(t)
	for _, c := range []struct {
		name   string
		mutate func(*jobpb.RegisterRequest)
		want   string
	}{
		{"packet size", func(r *jobpb.RegisterRequest) { r.Elements = 256 }, "256 values per packet: the bmv2 switch aggregates 64"},
		{"extended header", func(r *jobpb.RegisterRequest) { r.Format = jobpb.Format_FORMAT_EXTENDED }, "takes only the compatible header"},
		{"no MAC", func(r *jobpb.RegisterRequest) { r.Mac = nil }, "sent no Ethernet address"},
		{"not in port map", func(r *jobpb.RegisterRequest) {
			r.LaneAddresses = []string{"127.0.9.9:1000", "127.0.9.9:1001"}
		}, "127.0.9.9 is not in the controller's port map"},
		{"lanes on two addresses", func(r *jobpb.RegisterRequest) { r.LaneAddresses[1] = "127.0.0.2:1001" }, "differs from lane 0's"},
		{"too many workers", func(r *jobpb.RegisterRequest) { r.WorldSize = 33 }, "at most 32 workers"},
	} {
		r := p4Req("refused", 0, 1)
		c.mutate(r)
		_, err := h.jobs.Register(ctx, r)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want InvalidArgument containing %q", c.name, err, c.want)
		}
	}
	// Nothing was programmed for the refused registrations.
	if ws, err := h.sw.ReadWorkers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workers table after refusals: %v, %v; want empty", ws, err)
	}
	// The same worker with what the switch takes joins.
	if _, err := h.jobs.Register(ctx, p4Req("accepted", 0, 1)); err != nil {
		t.Errorf("a registration the switch takes: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	ctx := testCtx(t)
	soft := newJobHarness(t, testSlots)
	d, err := soft.jobs.Describe(ctx, &jobpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetTargetKind() != KindSoftswitch || !slices.Equal(d.GetPacketElements(), []uint32{32, 64, 128, 256}) ||
		d.GetMaxExtendedElements() != DefaultSoftswitchMaxElements || d.GetSlots() != testSlots || d.GetNeedsMac() {
		t.Errorf("software switch described as %v", d)
	}
	p4 := newJobHarnessFor(t, testSlots, bmv2Target(t, map[netip.Addr]uint32{netip.MustParseAddr("10.0.0.1"): 1}))
	d, err = p4.jobs.Describe(ctx, &jobpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetTargetKind() != KindBMv2 || !slices.Equal(d.GetPacketElements(), []uint32{64}) || d.GetMaxExtendedElements() != 0 ||
		d.GetMaxWorkers() != 32 || !d.GetNeedsMac() {
		t.Errorf("bmv2 described as %v", d)
	}
	if _, err := TargetFor("tofino2", 0); err == nil {
		t.Error("an unknown target kind was accepted")
	}
	if _, err := NewJobService(p4.sw, ServiceConfig{Dataplane: netip.MustParseAddrPort("10.0.0.254:48864"), Target: Target{Kind: KindTofino}}); err == nil ||
		!strings.Contains(err.Error(), "port map") {
		t.Errorf("a tofino target without a port map: %v, want an error naming the port map", err)
	}
}

func TestParsePortMap(t *testing.T) {
	m, err := ParsePortMap(strings.NewReader("# worker hosts\n10.0.0.1 1\n\n10.0.0.2\t2  # rack B\n10.0.0.3 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]uint32{netip.MustParseAddr("10.0.0.1"): 1, netip.MustParseAddr("10.0.0.2"): 2, netip.MustParseAddr("10.0.0.3"): 2}
	if len(m) != len(want) {
		t.Fatalf("got %v, want %v", m, want)
	}
	for a, p := range want {
		if m[a] != p {
			t.Errorf("%v -> %d, want %d", a, m[a], p)
		}
	}
	for _, c := range []struct{ text, want string }{
		{"10.0.0.1\n", "line 1"},
		{"10.0.0.1 one\n", "port \"one\" is not a number"},
		{"fe80::1 1\n", "not an IPv4 address"},
		{"10.0.0.1 1\n10.0.0.1 2\n", "appears twice"},
		{"# nothing\n", "empty"},
		{"10.0.0.1 1 extra\n", "line 1"},
	} {
		if _, err := ParsePortMap(strings.NewReader(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePortMap(%q): %v, want an error containing %q", c.text, err, c.want)
		}
	}
}
