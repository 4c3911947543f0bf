package main

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml"
)

func measureJoin(t *testing.T, ctl string, job string, n int, peers []string) (time.Duration, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess := make([]*switchml.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess[r], errs[r] = switchml.Join(ctx, switchml.Config{Controller: ctl, Job: job, Rank: r, Workers: n, Fallback: "ring", FallbackPeers: peers})
		}()
	}
	wg.Wait()
	d := time.Since(start)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	_, why := sess[0].Fallback()
	for _, s := range sess {
		s.Close()
	}
	return d, why
}

// The fallback's timings, for docs/performance.md: run them with
//
//	SWITCHML_MEASURE=fallback go test -count=1 -v -run MeasureFallback ./cmd/switchml/
//
// They log times and fail only on wrong behaviour; without the variable
// they are skipped (they measure, they do not test).
func measuring(t *testing.T) {
	if os.Getenv("SWITCHML_MEASURE") != "fallback" {
		t.Skip("a measurement: set SWITCHML_MEASURE=fallback to run it")
	}
}

func TestMeasureFallbackJoin(t *testing.T) {
	measuring(t)
	f := startFabric(t, nil, "")
	full := startFabricWith(t, nil, "", []string{"--slots", "16"}, []string{"--slots", "16"})
	for range 5 {
		d, _ := measureJoin(t, f.controller, "m-switch", 4, nil)
		t.Logf("join on the switch: %v", d)
		d, why := measureJoin(t, full.controller, "m-full", 4, nil)
		t.Logf("join, pool full, ring: %v (%.40s)", d, why)
		var peers []string
		for range 4 {
			peers = append(peers, freeAddr(t))
		}
		dead := freeAddr(t) // nothing listens there
		d, why = measureJoin(t, dead, "m-dead", 4, peers)
		t.Logf("join, controller unreachable, ring: %v (%.40s)", d, why)
	}
}

func measureLoss(t *testing.T, both bool) {
	f := startFabric(t, nil, "")
	const n, elems = 4, 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess := make([]*switchml.Session, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			sess[r], err = switchml.Join(ctx, switchml.Config{Controller: f.controller, Job: "m-loss", Rank: r, Workers: n, Fallback: "ring", FallbackOnLoss: true, GiveUp: 5 * time.Second})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var killAt time.Time
	var mu sync.Mutex
	firstRing := make([]time.Time, n)
	stop := make(chan struct{})
	for r, s := range sess {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]float32, elems)
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.AllReduceFloat32(ctx, x); err != nil {
					t.Errorf("rank %d call %d: %v", r, k, err)
					return
				}
				if s.Stats().Ring > 0 && firstRing[r].IsZero() {
					mu.Lock()
					firstRing[r] = time.Now()
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(time.Second)
	mu.Lock()
	killAt = time.Now()
	mu.Unlock()
	if both {
		f.fab.Crash("controller")
	}
	f.fab.Crash("switch")
	time.Sleep(3 * time.Second)
	if both {
		time.Sleep(5 * time.Second)
	}
	close(stop)
	wg.Wait()
	for r := range n {
		t.Logf("both=%v rank %d: first call done over the ring %v after the kill; ring calls %d", both, r, firstRing[r].Sub(killAt), sess[r].Stats().Ring)
		sess[r].Close()
	}
}

func TestMeasureFallbackLossSwitch(t *testing.T) { measuring(t); measureLoss(t, false) }
func TestMeasureFallbackLossBoth(t *testing.T)   { measuring(t); measureLoss(t, true) }
