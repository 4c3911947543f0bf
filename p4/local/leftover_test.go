package local_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// TestSkipPipelineControllerReadsWhatTheSwitchHolds: an earlier controller
// left a job on the switch (slots 0 to 31, multicast group 1), whose rank
// goes on sending, and a multicast group of no job. A controller started
// with --skip-pipeline, and no claim for that job, reads the switch before
// it places anything: the next job gets slots and a group apart from the
// left job, the group of no job is gone, and the next job's sums are exact
// while the left job's rank keeps sending.
func TestSkipPipelineControllerReadsWhatTheSwitchHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const slots, window, elements = 64, 16, 4096
	sw, target := smallSwitch(t, slots)
	serveSwitch(t, sw)
	lane, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lane.Close()

	// The earlier controller: it pushed the pipeline, placed a job of one
	// rank on half the pool, and left a group behind.
	earlier, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.P4RuntimeAddr(), ElectionID: 9, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	left := switchjob.Placement{JobID: 1, PoolBase: 0, PoolSize: slots / 2, Group: 1, World: 1,
		Replicas: []switchjob.Replica{{EgressPort: 0, Instance: 0}}}
	l := switchjob.Lane{Addr: netip.MustParseAddrPort(lane.LocalAddr().String())}
	left.Workers, left.Replies = []switchjob.Lane{l}, []switchjob.Lane{l}
	err = earlier.SetPipeline(ctx, nil, nil, 0)
	if err == nil {
		err = earlier.InstallJob(ctx, left)
	}
	if err == nil {
		err = earlier.Write(ctx, p4rt.GroupUpdate(p4v1.Update_INSERT, 2, left.Replicas))
	}
	earlier.Close()
	if err != nil {
		t.Fatal(err)
	}
	dp := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(sw.DataplaneAddr()))
	stopSpray := sprayOn(ctx, lane, dp, slots)
	defer stopSpray()

	// The grace outlasts the test: the left job's room stays taken
	// throughout.
	ctl := runController(t, controller.Config{Target: sw.P4RuntimeAddr(), ElectionID: 5, Listen: "127.0.0.1:0", Dataplane: sw.DataplaneAddr(), Slots: slots,
		SkipPipeline: true, AdoptGrace: time.Hour, Switch: target, Logger: quiet, JobLimits: controller.JobLimits{MaxSlotsPerClient: -1}})
	next := joinAll(t, ctx, jobConfigs(ctl, "next", 2, 1, window, ""))

	var base, size uint32
	var found bool
	for _, j := range controllerStatus(t, ctx, ctl, false).GetJobs() {
		if j.GetName() == "next" {
			base, size, found = j.GetPoolBase(), j.GetPoolSize(), true
		}
	}
	if !found || base < left.PoolBase+left.PoolSize && left.PoolBase < base+size {
		t.Fatalf("the next job got slots [%d, %d) (found %v); the left job holds [%d, %d)", base, base+size, found, left.PoolBase, left.PoolBase+left.PoolSize)
	}
	reader, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: sw.P4RuntimeAddr(), ElectionID: 2, YieldPrimary: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	groups, err := reader.ReadMulticastGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[left.Group] == nil {
		t.Fatalf("multicast groups on the switch %v: want the left job's %d and the next job's, and no other", groups, left.Group)
	}

	for k := 1; k <= 4; k++ {
		mustRound(t, ctx, next, k, elements)
	}
	if err := stopSpray(); err != nil {
		t.Fatalf("sending from the left job's lane: %v", err)
	}
}
