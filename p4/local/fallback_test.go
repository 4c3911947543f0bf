package local_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
)

// joinEach joins every config concurrently, and returns each one's
// session or error.
func joinEach(ctx context.Context, cfgs []switchml.Config) ([]*switchml.Session, []error) {
	sess := make([]*switchml.Session, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess[i], errs[i] = switchml.Join(ctx, c)
		}()
	}
	wg.Wait()
	return sess, errs
}

// joinAll joins every config concurrently; it fails the test unless all
// joined.
func joinAll(t *testing.T, ctx context.Context, cfgs []switchml.Config) []*switchml.Session {
	t.Helper()
	sess, errs := joinEach(ctx, cfgs)
	for i, err := range errs {
		if err != nil {
			for _, s := range sess {
				if s != nil {
					s.Close()
				}
			}
			t.Fatalf("rank %d: join: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range sess {
			s.Close()
		}
	})
	return sess
}

func jobConfigs(controller, job string, n, lanes, window int, fallback string) []switchml.Config {
	cfgs := make([]switchml.Config, n)
	for r := range cfgs {
		cfgs[r] = switchml.Config{Controller: controller, Job: job, Rank: r, Workers: n, Lanes: lanes, Window: window,
			Fallback: fallback, JoinTimeout: 30 * time.Second}
	}
	return cfgs
}

// inputOf is rank r's value at index i of call k: large enough that a
// sum is exact only if nothing is lost, rounded or counted twice.
func inputOf(k, r, i int) int32 { return int32(k*1_000_003 + r*7_919 + i*31 - 1<<30) }

// int32Round runs call k on every rank at once with elements values and
// checks each rank's sums against the exact ones; it returns the ranks'
// errors. during, if set, runs once the calls are made.
func int32Round(t *testing.T, ctx context.Context, sess []*switchml.Session, k, elements int, during ...func()) []error {
	t.Helper()
	errs := make([]error, len(sess))
	bufs := make([][]int32, len(sess))
	var wg sync.WaitGroup
	for r, s := range sess {
		bufs[r] = make([]int32, elements)
		for i := range bufs[r] {
			bufs[r][i] = inputOf(k, r, i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = s.AllReduceInt32(ctx, bufs[r])
		}()
	}
	for _, f := range during {
		f()
	}
	wg.Wait()
	for r := range sess {
		if errs[r] != nil {
			continue
		}
		for i, got := range bufs[r] {
			var want int32
			for q := range sess {
				want += inputOf(k, q, i)
			}
			if got != want {
				t.Fatalf("call %d rank %d element %d = %d, want %d", k, r, i, got, want)
			}
		}
	}
	return errs
}

func mustRound(t *testing.T, ctx context.Context, sess []*switchml.Session, k, elements int, during ...func()) {
	t.Helper()
	for r, err := range int32Round(t, ctx, sess, k, elements, during...) {
		if err != nil {
			t.Fatalf("call %d rank %d: %v", k, r, err)
		}
	}
}

func wantRing(t *testing.T, sess []*switchml.Session, reason string) {
	t.Helper()
	for r, s := range sess {
		active, why := s.Fallback()
		if !active || !strings.Contains(why, reason) {
			t.Fatalf("rank %d: Fallback() = %v, %q, want the ring because %q", r, active, why, reason)
		}
	}
}

// TestFallbackFullPool: a second job that finds no room in the switch's
// pool runs over the ring, exactly, while the first keeps the switch.
func TestFallbackFullPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{Slots: 32, MaxSlotsPerClient: -1}) // the first job takes the whole pool
	first := joinAll(t, ctx, jobConfigs(fab.ControllerAddr(), "first", 2, 2, 16, switchml.FallbackRing))
	second := joinAll(t, ctx, jobConfigs(fab.ControllerAddr(), "second", 3, 2, 8, switchml.FallbackRing))
	for r, s := range first {
		if active, why := s.Fallback(); active {
			t.Fatalf("first job rank %d on the ring (%s), want the switch", r, why)
		}
	}
	wantRing(t, second, "switch has no room")
	var wg sync.WaitGroup
	for _, job := range [][]*switchml.Session{first, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 4 {
				mustRound(t, ctx, job, k, 10_000+k)
			}
		}()
	}
	wg.Wait()
	for r, s := range second {
		if st := s.Stats(); st.Ring != 4 || st.AllReduces != 4 || st.Packets != 0 {
			t.Fatalf("second job rank %d: stats %+v, want 4 calls over the ring and no packet", r, st)
		}
	}
	// Barrier and Broadcast run over the ring too.
	errs := make([]error, len(second))
	got := make([][]byte, len(second))
	for r, s := range second {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = s.Barrier(ctx, "b"); errs[r] == nil {
				got[r], errs[r] = s.Broadcast(ctx, "x", 1, []byte(fmt.Sprintf("from rank %d", r)))
			}
		}()
	}
	wg.Wait()
	for r := range second {
		if errs[r] != nil || string(got[r]) != "from rank 1" {
			t.Fatalf("rank %d: broadcast got %q, %v; want \"from rank 1\"", r, got[r], errs[r])
		}
	}
	// Without the fallback the same job is refused.
	cfgs := jobConfigs(fab.ControllerAddr(), "refused", 1, 2, 8, "")
	if s, err := switchml.Join(ctx, cfgs[0]); err == nil || !strings.Contains(err.Error(), "no room") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("join without fallback into a full pool: %v, want no room", err)
	}
}

// freeAddrs returns n loopback TCP addresses that were free a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	return addrs
}

// TestFallbackDeadSwitchAtJoin: with no controller (nor switch) to be
// reached, ranks that were given each other's ring addresses run over
// the ring; ranks that were not get an error that says to give them.
func TestFallbackDeadSwitchAtJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dead := freeAddrs(t, 1)[0]
	cfgs := jobConfigs(dead, "orphan", 3, 2, 8, switchml.FallbackRing)
	cfg := cfgs[0]
	cfg.Workers = 1
	if _, err := switchml.Join(ctx, cfg); !errors.Is(err, switchml.ErrControllerUnreachable) || !strings.Contains(err.Error(), "FallbackPeers") {
		t.Fatalf("join without a controller or peers: %v, want ErrControllerUnreachable naming FallbackPeers", err)
	}
	peers := freeAddrs(t, len(cfgs))
	for r := range cfgs {
		cfgs[r].FallbackPeers = peers
	}
	sess := joinAll(t, ctx, cfgs)
	wantRing(t, sess, "controller is unreachable")
	for k := range 3 {
		mustRound(t, ctx, sess, k, 1000*k+1)
	}
}

// waitCounter waits until the switch's counter c reaches at least n: the
// event a test acts on (ranks inside a call, results coming back).
func waitCounter(ctx context.Context, fab interface {
	Counters() [switchjob.NumStats]uint64
}, c switchjob.Stat, n uint64) error {
	for fab.Counters()[c] < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the switch's %s counter stayed at %d, want %d: %w", c, fab.Counters()[c], n, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// lossRig is a job on an embedded switch that the test then takes away
// (the switch and its controller together, as in one `switchml switch`
// process).
func lossRig(t *testing.T, onLoss bool) (context.Context, *local.Fabric, []*switchml.Session, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	fab, err := local.Start(ctx, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			if err := fab.Close(); err != nil {
				t.Errorf("closing the switch: %v", err)
			}
		})
	}
	t.Cleanup(kill)
	cfgs := jobConfigs(fab.ControllerAddr(), "lossy", 3, 2, 16, "")
	for r := range cfgs {
		if onLoss {
			cfgs[r].Fallback, cfgs[r].FallbackOnLoss = switchml.FallbackRing, true
		}
		// The switch is declared lost after GiveUp without an answer, and
		// so it is, spuriously, while a rank is that late to a call: keep
		// it well above what a loaded machine delays a goroutine by. It
		// bounds the ring's stalls after a move too.
		cfgs[r].GiveUp = 5 * time.Second
	}
	return ctx, fab, joinAll(t, ctx, cfgs), kill
}

// TestFallbackOnLossBetweenCalls: the switch dies between two calls; the
// next call moves to the ring and every later sum is exact, barriers and
// broadcasts included.
func TestFallbackOnLossBetweenCalls(t *testing.T) {
	ctx, _, sess, kill := lossRig(t, true)
	for k := range 3 {
		mustRound(t, ctx, sess, k, 5000)
	}
	for r, s := range sess {
		if active, _ := s.Fallback(); active || s.Stats().Ring != 0 {
			t.Fatalf("rank %d on the ring before the switch died", r)
		}
	}
	kill()
	start := time.Now()
	mustRound(t, ctx, sess, 3, 5000)
	t.Logf("first call after the switch died took %v", time.Since(start))
	wantRing(t, sess, "switch was lost")
	for k := 4; k < 7; k++ {
		mustRound(t, ctx, sess, k, 3000+k)
	}
	for r, s := range sess {
		if st := s.Stats(); st.AllReduces != 7 || st.Ring != 4 {
			t.Fatalf("rank %d: stats %+v, want 7 calls, the last 4 over the ring", r, st)
		}
	}
}

// TestFallbackOnLossDuringCall: the switch dies while a large call is in
// flight; that call completes (on the switch or over the ring) with the
// exact sums, and so do the next ones.
func TestFallbackOnLossDuringCall(t *testing.T) {
	ctx, fab, sess, kill := lossRig(t, true)
	mustRound(t, ctx, sess, 0, 1000)
	done := fab.Counters()[switchjob.StatMulticast]
	mustRound(t, ctx, sess, 1, 1<<20, func() {
		// Mid-call: the switch has sent the call's first results (of
		// thousands per lane).
		if err := waitCounter(ctx, fab, switchjob.StatMulticast, done+1); err != nil {
			t.Error(err)
		}
		kill()
	})
	for k := 2; k < 5; k++ {
		mustRound(t, ctx, sess, k, 1<<16)
	}
	wantRing(t, sess, "switch was lost")
}

// TestFallbackLossWithoutOption: without FallbackOnLoss, a lost switch
// fails the call with an error that names what happened and the option:
// the ranks' give-up, or the controller's word if it saw the switch go
// before it stopped itself.
func TestFallbackLossWithoutOption(t *testing.T) {
	ctx, _, sess, kill := lossRig(t, false)
	mustRound(t, ctx, sess, 0, 1000)
	kill()
	for r, err := range int32Round(t, ctx, sess, 1, 1000) {
		lost := errors.Is(err, switchml.ErrTimeoutBudget) || errors.Is(err, switchml.ErrSwitchLost)
		if !lost || !strings.Contains(err.Error(), "FallbackOnLoss") {
			t.Fatalf("rank %d: %v, want ErrTimeoutBudget or ErrSwitchLost naming FallbackOnLoss", r, err)
		}
	}
	for r, s := range sess {
		if active, _ := s.Fallback(); active {
			t.Fatalf("rank %d moved to the ring without FallbackOnLoss", r)
		}
	}
}
