package switchml_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
)

// TestShardedSwitch runs two jobs at once on a switch with two data-plane
// shards: every lane is served by one shard, both shards carry traffic, no
// packet reaches a shard that does not serve its slot, and every int32 sum
// is exact.
func TestShardedSwitch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{Slots: 512, Shards: 2})
	sw := fab.Switch()
	if sw.Shards() != 2 || len(sw.DataplaneAddrs()) != 2 {
		t.Fatalf("switch has %d shards at %v, want 2", sw.Shards(), sw.DataplaneAddrs())
	}
	const workers, elements, calls = 3, 50_000, 3
	jobs := []struct {
		name  string
		lanes int
	}{{"four-lanes", 4}, {"one-lane", 1}}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs)*workers)
	for j, job := range jobs {
		for r := range workers {
			wg.Go(func() {
				errs[j*workers+r] = runShardJob(ctx, fab.ControllerAddr(), job.name, r, workers, job.lanes, elements, calls)
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for k := range sw.Shards() {
		if n := sw.ShardStats(k).Received.Load(); n == 0 {
			t.Errorf("shard %d received nothing: lanes were not spread", k)
		}
	}
	c := fab.Counters()
	if c[switchjob.StatDropWrongShard] != 0 {
		t.Errorf("%d packets reached a shard that does not serve their slot", c[switchjob.StatDropWrongShard])
	}
	if c[switchjob.StatMulticast] == 0 {
		t.Error("no slot completed")
	}
}

func runShardJob(ctx context.Context, controller, job string, rank, workers, lanes, elements, calls int) error {
	s, err := switchml.Join(ctx, switchml.Config{Controller: controller, Job: job, Rank: rank, Workers: workers, Lanes: lanes, Window: 16})
	if err != nil {
		return err
	}
	defer s.Close()
	x := make([]int32, elements)
	for call := range calls {
		for i := range x {
			x[i] = int32(rank*7 + i + call)
		}
		if err := s.AllReduceInt32(ctx, x); err != nil {
			return err
		}
		for i, v := range x {
			// sum over ranks of rank*7 + i + call
			if want := int32(7*workers*(workers-1)/2 + workers*(i+call)); v != want {
				return errors.New(job + ": wrong sum")
			}
		}
	}
	return nil
}
