package softswitch_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/transport"
)

// tree is a spine and two leaf software switches on loopback addresses
// (127.0.1.1 and 127.0.2.1 for the leaves), with a controller programming
// them from a topology.
type tree struct {
	spine      *softswitch.Switch
	leaves     []*softswitch.Switch
	controller string
	// stop ends leaf k's switch (as a crash would, to its controller).
	stop   []context.CancelFunc
	stops  []chan struct{}
	runCtx context.Context
	wg     *sync.WaitGroup
}

func startTree(t *testing.T, ctx context.Context, faults transport.Faults) *tree {
	t.Helper()
	pc := pipeline.Config{Slots: 512, MaxElements: 256, MaxWorkers: 32}
	spine, err := softswitch.Listen(softswitch.Config{Dataplane: "127.0.0.1:0", Pipeline: pc, Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	tr := &tree{spine: spine}
	var leafJSON []string
	for l := 1; l <= 2; l++ {
		f := faults
		f.Seed += uint64(10 * l)
		leaf, err := softswitch.Listen(softswitch.Config{Dataplane: fmt.Sprintf("127.0.%d.1:0", l), Pipeline: pc, Faults: f, Parent: spine.DataplaneAddr()})
		if err != nil {
			t.Fatalf("leaf switch on 127.0.%d.1: %v", l, err)
		}
		tr.leaves = append(tr.leaves, leaf)
		leafJSON = append(leafJSON, fmt.Sprintf(`{"p4runtime": %q, "dataplane": %q, "workers": ["127.0.%d.0/24"]}`, leaf.P4RuntimeAddr(), leaf.DataplaneAddr(), l))
	}
	topo, err := controller.ParseTopology(strings.NewReader(fmt.Sprintf(`{"spine": {"p4runtime": %q, "dataplane": %q}, "leaves": [%s]}`,
		spine.P4RuntimeAddr(), spine.DataplaneAddr(), strings.Join(leafJSON, ","))))
	if err != nil {
		t.Fatal(err)
	}
	target, err := controller.TargetFor(controller.KindSoftswitch, pc.MaxElements)
	if err != nil {
		t.Fatal(err)
	}
	wg := &sync.WaitGroup{}
	runCtx, cancel := context.WithCancel(ctx)
	tr.runCtx, tr.wg = runCtx, wg
	wg.Go(func() { _ = spine.Serve(runCtx) })
	for _, sw := range tr.leaves {
		tr.serveLeaf(sw)
	}
	ready := make(chan string, 1)
	ctlErr := make(chan error, 1)
	wg.Go(func() {
		ctlErr <- controller.Run(runCtx, controller.Config{
			Topology: topo, Listen: "127.0.0.1:0", Slots: pc.Slots, Switch: target,
			Ready: func(a net.Addr) { ready <- a.String() },
		})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case tr.controller = <-ready:
	case err := <-ctlErr:
		t.Fatalf("controller of the tree stopped at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("controller of the tree not ready in 30 s")
	}
	return tr
}

// runJob runs n workers, ranks 0..n/2-1 under the first leaf and the rest
// under the second, through ops allreduces of size elements each, and
// checks every int32 sum exactly and every float32 sum within quantization
// error.
func runJob(t *testing.T, ctx context.Context, tr *tree, n, size, ops int, job string) {
	t.Helper()
	if err := tryJobOps(ctx, tr, n, size, ops, job); err != nil {
		t.Fatal(err)
	}
}

func tryJob(ctx context.Context, tr *tree, n, size int, job string) error {
	return tryJobOps(ctx, tr, n, size, 1, job)
}

func tryJobOps(ctx context.Context, tr *tree, n, size, ops int, job string) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Go(func() {
			leaf := 1 + r*2/n
			sess, err := switchml.Join(ctx, switchml.Config{
				Controller: tr.controller, Job: job, Rank: r, Workers: n, Bind: fmt.Sprintf("127.0.%d.%d", leaf, 10+r),
				Lanes: 2, Window: 16, PacketElements: 64, Timeout: 5 * time.Millisecond, Extended: true, JoinTimeout: 15 * time.Second,
			})
			if err != nil {
				errs[r] = fmt.Errorf("rank %d join: %w", r, err)
				return
			}
			defer sess.Close()
			for op := 0; op < ops; op++ {
				xi := make([]int32, size)
				xf := make([]float32, size)
				for i := range xi {
					xi[i] = int32(op*1000003 + i*(r+1))
					xf[i] = float32(r+1) * float32(i%97) / 8
				}
				if err := sess.AllReduceInt32(ctx, xi); err != nil {
					errs[r] = fmt.Errorf("rank %d op %d int32: %w", r, op, err)
					return
				}
				if err := sess.AllReduceFloat32(ctx, xf); err != nil {
					errs[r] = fmt.Errorf("rank %d op %d float32: %w", r, op, err)
					return
				}
				tri := int32(n * (n + 1) / 2)
				for i := range xi {
					if want := int32(n)*int32(op*1000003) + int32(i)*tri; xi[i] != want {
						errs[r] = fmt.Errorf("rank %d op %d: int32 sum [%d] = %d, want %d", r, op, i, xi[i], want)
						return
					}
					want := float64(tri) * float64(i%97) / 8
					if d := float64(xf[i]) - want; d > 1e-3 || d < -1e-3 {
						errs[r] = fmt.Errorf("rank %d op %d: float32 sum [%d] = %g, want %g", r, op, i, xf[i], want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestHierarchTreeOnLoopback runs 8 workers across two leaf software
// switches and a spine, over real UDP and P4Runtime: each leaf's counters
// show partial sums going up and results coming down, the spine's show one
// multicast per slot use, and every sum is exact.
func TestHierarchTreeOnLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr := startTree(t, ctx, transport.Faults{})
	runJob(t, ctx, tr, 8, 10000, 3, "tree")
	sc := tr.spine.Counters()
	if sc[switchjob.StatMulticast] == 0 || sc[switchjob.StatReplicas] != 2*sc[switchjob.StatMulticast] {
		t.Fatalf("spine: %d multicasts, %d replicas; want each slot use sent to both leaves", sc[switchjob.StatMulticast], sc[switchjob.StatReplicas])
	}
	for l, leaf := range tr.leaves {
		c := leaf.Counters()
		if c[switchjob.StatUpstream] != sc[switchjob.StatMulticast] || c[switchjob.StatFromParent] < c[switchjob.StatUpstream] {
			t.Fatalf("leaf %d: %d partial sums up, %d results from the spine; the spine completed %d uses", l, c[switchjob.StatUpstream], c[switchjob.StatFromParent], sc[switchjob.StatMulticast])
		}
	}
}

// TestHierarchTreeUnderLoss drops, duplicates and reorders packets at every
// switch of the tree (both hops, both directions): the sums stay exact.
func TestHierarchTreeUnderLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tr := startTree(t, ctx, transport.Faults{Drop: 0.02, Duplicate: 0.01, Reorder: 0.01, Seed: 7})
	runJob(t, ctx, tr, 4, 5000, 2, "lossy-tree")
	var resent uint64
	for _, leaf := range tr.leaves {
		resent += leaf.Counters()[switchjob.StatUpstreamResend]
	}
	// About 2% of some 1,300 packets on the trunks are lost: the leaves
	// must have asked the spine again.
	if resent == 0 {
		t.Fatal("no partial sums were sent up again: loss on the upper hop was not exercised")
	}
}

// serveLeaf runs a leaf switch until the tree stops or stop is called.
func (tr *tree) serveLeaf(sw *softswitch.Switch) {
	ctx, cancel := context.WithCancel(tr.runCtx)
	done := make(chan struct{})
	tr.stop = append(tr.stop, cancel)
	tr.stops = append(tr.stops, done)
	tr.wg.Go(func() { defer close(done); _ = sw.Serve(ctx) })
}

// TestHierarchLeafRestart stops a leaf mid-life: the controller aborts the
// tree's jobs and programs the tree again once a leaf answers at the same
// addresses, and the next job runs with exact sums.
func TestHierarchLeafRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr := startTree(t, ctx, transport.Faults{})
	runJob(t, ctx, tr, 4, 2000, 1, "before")
	old := tr.leaves[1]
	dp, p4rt := old.DataplaneAddr(), old.P4RuntimeAddr()
	tr.stop[1]()
	<-tr.stops[1]
	var leaf *softswitch.Switch
	var err error
	for i := 0; i < 50; i++ { // the ports are free once the old leaf closed them
		leaf, err = softswitch.Listen(softswitch.Config{Dataplane: dp, P4Runtime: p4rt, Pipeline: pipeline.Config{Slots: 512, MaxElements: 256, MaxWorkers: 32},
			Parent: tr.spine.DataplaneAddr()})
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("leaf back at %s: %v", dp, err)
	}
	tr.leaves[1] = leaf
	tr.serveLeaf(leaf)
	// Joins fail while the controller programs the tree again; retry the
	// job until it runs. Each attempt has a deadline of its own: the
	// controller may learn of the old leaf's loss while an attempt's ranks
	// register, aborting the ranks registered by then, and the ranks that
	// register after that wait for peers that gave up.
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 0; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		err := tryJob(actx, tr, 4, 2000, fmt.Sprintf("after-%d", attempt))
		acancel()
		if err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no job ran on the tree within 60 s of the leaf's restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c := leaf.Counters(); c[switchjob.StatUpstream] == 0 || c[switchjob.StatFromParent] == 0 {
		t.Fatalf("the restarted leaf sent %d partial sums up and took %d results: the job did not go through it", c[switchjob.StatUpstream], c[switchjob.StatFromParent])
	}
}
