package local_test

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

// startFabric starts an embedded switch and controller for one test, with
// a context bounding the test.
func startFabric(t *testing.T) (context.Context, *local.Fabric) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	fab := local.ForTest(t, local.Options{})
	return ctx, fab
}

// TestPeerLostMidAllReduce: two ranks are inside an allreduce that the
// third will never contribute to; when the third's connection to the
// controller ends (its process died), both calls fail with ErrAborted
// naming it, although the switch's give-up is an hour away.
func TestPeerLostMidAllReduce(t *testing.T) {
	ctx, fab := startFabric(t)
	const n, lanes, window = 3, 2, 8

	// Rank 2 registers and holds its lease like a worker, then dies.
	conn, err := grpc.NewClient(fab.ControllerAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := jobpb.NewJobServiceClient(conn)
	var laneAddrs []string
	for range lanes {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		laneAddrs = append(laneAddrs, c.LocalAddr().String())
	}
	dead := make(chan error, 1)
	leaseCtx, die := context.WithCancel(ctx)
	defer die()
	go func() {
		resp, err := jobs.Register(ctx, &jobpb.RegisterRequest{Job: "lost", Rank: 2, WorldSize: n, Lanes: lanes, Window: window,
			Elements: switchml.DefaultPacketElements, LaneAddresses: laneAddrs}, grpc.WaitForReady(true))
		if err != nil {
			dead <- err
			return
		}
		st, err := jobs.Watch(leaseCtx, &jobpb.WatchRequest{Job: "lost", Rank: 2, SessionId: resp.GetSessionId(), RankSecret: resp.GetRankSecret()})
		if err == nil {
			_, err = st.Recv()
		}
		dead <- err
	}()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	inCall := make(chan struct{}, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: "lost", Rank: r, Workers: n,
				Lanes: lanes, Window: window, GiveUp: time.Hour})
			if err != nil {
				errs[r] = err
				inCall <- struct{}{}
				return
			}
			defer sess.Close()
			inCall <- struct{}{}
			errs[r] = sess.AllReduceFloat32(ctx, make([]float32, 100_000))
		}()
	}
	if err := <-dead; err != nil {
		t.Fatalf("rank 2's registration or lease: %v", err)
	}
	<-inCall
	<-inCall
	// Both ranks are waiting for rank 2's contributions once the switch
	// holds every lane's first window of each.
	if err := waitCounter(ctx, fab, switchjob.StatAggregated, 2*lanes*window); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	die()
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, switchml.ErrAborted) || !strings.Contains(err.Error(), "rank 2 lost its connection") {
			t.Errorf("rank %d: %v, want ErrAborted naming rank 2", r, err)
		}
	}
	t.Logf("both ranks failed %v after rank 2's connection ended", time.Since(killed).Round(time.Millisecond))
}

// TestBrokenRankTellsItsPeers: a rank whose call is cancelled mid-allreduce
// cannot go on (its lanes stopped out of step); it reports this, and its
// peer's call fails with the reason instead of waiting for the switch.
func TestBrokenRankTellsItsPeers(t *testing.T) {
	ctx, fab := startFabric(t)
	const lanes, window = 1, 8
	var wg sync.WaitGroup
	errs := make([]error, 2)
	joined := make(chan struct{}, 2)
	callCtx, stop := context.WithCancel(ctx)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: "broken", Rank: r, Workers: 3,
				Lanes: lanes, Window: window, GiveUp: time.Hour})
			joined <- struct{}{}
			if err != nil {
				errs[r] = err
				return
			}
			defer sess.Close()
			c := ctx
			if r == 1 {
				c = callCtx // rank 1's application gives up on the call
			}
			errs[r] = sess.AllReduceInt32(c, make([]int32, 50_000))
		}()
	}
	// Rank 2 never calls: the job cannot complete; rank 1 is cancelled.
	go func() {
		sess, err := switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: "broken", Rank: 2, Workers: 3,
			Lanes: lanes, Window: window, GiveUp: time.Hour})
		if err == nil {
			<-ctx.Done()
			sess.Close()
		}
	}()
	<-joined
	<-joined
	// Ranks 0 and 1 are inside the call (their first windows reached the
	// switch) when rank 1's application gives up.
	if err := waitCounter(ctx, fab, switchjob.StatAggregated, 2*lanes*window); err != nil {
		t.Fatal(err)
	}
	stop()
	wg.Wait()
	if !errors.Is(errs[1], context.Canceled) {
		t.Errorf("rank 1: %v, want its own cancellation", errs[1])
	}
	if !errors.Is(errs[0], switchml.ErrAborted) || !strings.Contains(errs[0].Error(), "aborted by rank 1") || !strings.Contains(errs[0].Error(), "interrupted: its allreduce was cancelled") {
		t.Errorf("rank 0: %v, want ErrAborted with rank 1's reason", errs[0])
	}
}

// TestNaNRankTellsItsPeers: a rank whose input holds a NaN fails the call
// (its lanes find it as they build packets), naming the first bad element;
// its peers, already inside the allreduce, fail with the reason instead of
// waiting for its share. Every float type, one job each.
func TestNaNRankTellsItsPeers(t *testing.T) {
	for _, c := range dtype.All() {
		if c.Scaled() {
			t.Run(c.Name(), func(t *testing.T) { nanRank(t, c) })
		}
	}
}

func nanRank(t *testing.T, c dtype.Codec) {
	ctx, fab := startFabric(t)
	const n, lanes, window = 3, 2, 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: "nan-" + c.Name(), Rank: r, Workers: n,
				Lanes: lanes, Window: window, GiveUp: time.Hour})
			if err != nil {
				errs[r] = err
				return
			}
			defer sess.Close()
			x := dtype.New(c, 100_000)
			if r == 1 {
				// The others are inside the call: the switch holds
				// every lane's first window of both.
				if err := waitCounter(ctx, fab, switchjob.StatAggregated, 2*lanes*window); err != nil {
					errs[r] = err
					return
				}
				// One bad value in each lane's share, the second lane's
				// nearer its start, so that it is found first: the
				// tensor's first is named all the same.
				c.Set(x, 45_000, math.NaN())
				c.Set(x, 60_000, math.NaN())
			}
			errs[r] = sess.AllReduce(ctx, c, x)
		}()
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "not finite") || !strings.Contains(errs[1].Error(), "index 45000") {
		t.Errorf("rank 1: %v, want its input refused, naming element 45000", errs[1])
	}
	for _, r := range []int{0, 2} {
		if !errors.Is(errs[r], switchml.ErrAborted) || !strings.Contains(errs[r].Error(), "aborted by rank 1") || !strings.Contains(errs[r].Error(), "index 45000") {
			t.Errorf("rank %d: %v, want ErrAborted with rank 1's reason", r, errs[r])
		}
	}
}
