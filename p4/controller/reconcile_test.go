package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// refusingDeletes is a switch whose removals fail while refusing is set,
// as a switch that answers writes with an error would; failed hears each
// refusal.
type refusingDeletes struct {
	Switch
	mu       sync.Mutex
	refusing bool
	failed   chan struct{}
}

func (f *refusingDeletes) RemoveJob(ctx context.Context, p switchjob.Placement) error {
	f.mu.Lock()
	refusing := f.refusing
	f.mu.Unlock()
	if refusing {
		select {
		case f.failed <- struct{}{}:
		default:
		}
		return status.Error(codes.Unavailable, "the switch refuses the delete")
	}
	return f.Switch.RemoveJob(ctx, p)
}

func (f *refusingDeletes) refuse(on bool) {
	f.mu.Lock()
	f.refusing = on
	f.mu.Unlock()
}

// harnessOver serves a job service that programs sw, a switch in front of
// the software switch c reaches.
func harnessOver(t *testing.T, sw Switch, c *p4rt.Client) *jobHarness {
	t.Helper()
	svc, err := NewJobService(sw, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: testSlots, Logger: quiet, JobLimits: harnessLimits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.stop)
	return &jobHarness{svc: svc, jobs: serveJobs(t, svc), sw: c, secrets: map[string][]byte{}}
}

// freshSwitch is a software switch with its pipeline pushed, and a client
// of it.
func freshSwitch(t *testing.T, ctx context.Context) *p4rt.Client {
	t.Helper()
	target, _ := startSwitch(t)
	c := dial(t, ctx, target, 1)
	if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	return c
}

func overlap(a, b *jobpb.RegisterResponse) bool {
	return a.GetPoolBase() < b.GetPoolBase()+b.GetPoolSize() && b.GetPoolBase() < a.GetPoolBase()+a.GetPoolSize()
}

// placementOf is the switch's placement of switch job id, if it holds one.
func placementOf(held []switchjob.Placement, id uint32) (switchjob.Placement, bool) {
	i := slices.IndexFunc(held, func(p switchjob.Placement) bool { return p.JobID == id })
	if i < 0 {
		return switchjob.Placement{}, false
	}
	return held[i], true
}

// TestFailedRemovalQuarantinesTheRoom: the switch refuses to delete an
// ended job's entries. Its slots, multicast group and switch job id stay
// out of placement while the entries are there: the next job is placed
// beside them at once, and its install meets none of them. Once the switch
// takes deletes again, the removal is tried again and the entries go.
func TestFailedRemovalQuarantinesTheRoom(t *testing.T) {
	ctx := testCtx(t)
	c := freshSwitch(t, ctx)
	sw := &refusingDeletes{Switch: c, refusing: true, failed: make(chan struct{}, 1)}
	h := harnessOver(t, sw, c)

	streams, cancels, ended := joinedAll(t, h, "ended", 2)
	cancels[0]() // rank 0 dies: the job ends, and its removal is refused
	abortedWith(t, streams[1])
	<-sw.failed

	_, _, next := joinedAll(t, h, "next", 2)
	if overlap(next[0], ended[0]) || next[0].GetJobId() == ended[0].GetJobId() {
		t.Fatalf("the next job got slots [%d, +%d) and switch job %d; the ended job, whose entries the switch kept, holds [%d, +%d) and %d",
			next[0].GetPoolBase(), next[0].GetPoolSize(), next[0].GetJobId(), ended[0].GetPoolBase(), ended[0].GetPoolSize(), ended[0].GetJobId())
	}
	held, err := c.ReadPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, ok := placementOf(held, ended[0].GetJobId())
	if !ok {
		t.Fatalf("the switch no longer holds the ended job's entries (%+v): the refusal did not happen", held)
	}
	now, ok := placementOf(held, next[0].GetJobId())
	if !ok || now.Group == old.Group {
		t.Fatalf("the next job on the switch: %+v (found %v), beside the ended job's group %d", now, ok, old.Group)
	}

	sw.refuse(false)
	<-h.svc.Drained()
	held, err = c.ReadPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := placementOf(held, ended[0].GetJobId()); ok || len(held) != 1 {
		t.Fatalf("after the switch took deletes again it holds %+v; want only the next job, %d", held, next[0].GetJobId())
	}
}

// holdSwitchWork makes the first install or removal of op that the core
// decides wait, after the decision and before it reaches the switch, until
// release is closed; entered hears that it waits, done that its outcome
// reached the core.
func holdSwitchWork(svc *JobService, op string) (entered chan struct{}, release chan struct{}, done chan struct{}) {
	entered, release, done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	svc.beforeSwitch = func(what string) func() {
		if what != op {
			return nil
		}
		held := false
		once.Do(func() { held = true })
		if !held {
			return nil
		}
		close(entered)
		<-release
		return func() { close(done) }
	}
	return entered, release, done
}

// reconnected plays the controller losing the switch and coming back to
// it: the live jobs end, the switch's job entries are cleared (as the
// reconnect clears them, or a restarted switch lost them), and the switch
// is handed back.
func reconnected(t *testing.T, ctx context.Context, h *jobHarness) {
	t.Helper()
	h.svc.SwitchLost("aborted: the controller lost the switch")
	if err := h.sw.ClearJobs(ctx); err != nil {
		t.Fatal(err)
	}
	h.svc.SwitchBack(h.sw)
}

// TestStaleInstallDoesNotRunAfterReconnect: an install decided before the
// link to the switch was lost, still waiting for the switch when it came
// back, does not program the job (which ended with the link) on the new
// connection.
func TestStaleInstallDoesNotRunAfterReconnect(t *testing.T) {
	ctx := testCtx(t)
	c := freshSwitch(t, ctx)
	h := harnessOver(t, c, c)
	entered, release, done := holdSwitchWork(h.svc, "install")
	registered := make(chan error, 1)
	go func() {
		_, err := h.jobs.Register(ctx, regReq("stale", 0, 1, 1, 4, 3))
		registered <- err
	}()
	<-entered
	reconnected(t, ctx, h)
	if err := <-registered; status.Code(err) != codes.Aborted {
		t.Fatalf("the registration whose job ended with the link: %v, want Aborted", err)
	}
	close(release)
	<-done
	if ws, err := c.ReadWorkers(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("workers on the switch after the stale install: %v, %v; want none", ws, err)
	}
}

// TestStaleRemovalSparesTheNextJob: a removal decided before the link to
// the switch was lost, still waiting for the switch when it came back,
// does not delete the entries of the job placed since on the same room,
// with the same lane addresses.
func TestStaleRemovalSparesTheNextJob(t *testing.T) {
	ctx := testCtx(t)
	c := freshSwitch(t, ctx)
	h := harnessOver(t, c, c)
	entered, release, done := holdSwitchWork(h.svc, "remove")
	_, cancels, old := joinedAll(t, h, "same", 1)
	cancels[0]() // its only rank dies: the job ends, and its removal waits
	<-entered
	reconnected(t, ctx, h)
	_, _, next := joinedAll(t, h, "same", 1)
	if next[0].GetPoolBase() != old[0].GetPoolBase() {
		t.Logf("the next job got slots at %d, the old one's were at %d", next[0].GetPoolBase(), old[0].GetPoolBase())
	}
	close(release)
	<-done
	held, err := c.ReadPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := placementOf(held, next[0].GetJobId())
	if !ok || len(p.Workers) != 1 {
		t.Fatalf("the next job's entries after the stale removal: %+v (found %v), want its one lane", p, ok)
	}
	groups, err := c.ReadMulticastGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := groups[p.Group]; !ok {
		t.Fatalf("the next job's multicast group %d is gone after the stale removal (groups %v)", p.Group, groups)
	}
}

// TestTreeClearsWhatItsSwitchesHold: a tree's controller started with
// --skip-pipeline, on switches that hold an earlier controller's job
// entries, removes them before it serves: it takes no job over, and a job
// it placed would meet them.
func TestTreeClearsWhatItsSwitchesHold(t *testing.T) {
	ctx := testCtx(t)
	spineDP := netip.MustParseAddrPort("127.0.0.1:48990")
	var targets []string
	for range 3 {
		target, _ := startSwitch(t)
		earlier, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: target, ElectionID: 9, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		err = earlier.SetPipeline(ctx, nil, nil, 0)
		if err == nil {
			err = earlier.InstallJob(ctx, keyedJob())
		}
		earlier.Close()
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, target)
	}
	topo := parseTopology(t, fmt.Sprintf(`{"spine": {"p4runtime": %q, "dataplane": %q},
		"leaves": [{"p4runtime": %q, "dataplane": "127.0.1.254:48991", "workers": ["127.0.1.0/24"]},
		           {"p4runtime": %q, "dataplane": "127.0.2.254:48992", "workers": ["127.0.2.0/24"]}]}`,
		targets[0], spineDP, targets[1], targets[2]))
	cfg, err := Config{Topology: topo, SkipPipeline: true, ElectionID: 10, Slots: testSlots, Logger: quiet}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	_, clients, err := dialTree(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i, c := range clients {
		held, err := c.ReadPlacements(ctx)
		if err != nil || len(held) != 0 {
			t.Errorf("%s holds %+v (%v) after the tree's controller started; want nothing", treeName(topo, i), held, err)
		}
	}
}
