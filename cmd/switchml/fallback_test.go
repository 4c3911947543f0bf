package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestFallbackCLI: `switchml allreduce --fallback ring` runs a job the
// switch has no room for over the ring, and verifies it; with the
// controller unreachable, --fallback-peers lets the ranks meet.
func TestFallbackCLI(t *testing.T) {
	needProcesses(t)
	f := startFabricWith(t, nil, "", []string{"--slots", "16"}, []string{"--slots", "16"})
	for _, dtype := range []string{"int32", "float16"} {
		reps := runJob(t, f, nil, jobSpec{name: "full-" + dtype, dtype: dtype, workers: 3, elements: 50_001, iters: 2,
			extra: []string{"--fallback", "ring"}})
		for r, rep := range reps {
			if !strings.Contains(rep.Fallback, "no room") || rep.RingCalls == 0 {
				t.Fatalf("rank %d: fallback %q after %d ring calls, want the ring for want of room", r, rep.Fallback, rep.RingCalls)
			}
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	var peers []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, ln.Addr().String())
		ln.Close()
	}
	reps := runJob(t, switchSide{controller: dead}, nil, jobSpec{name: "orphan", dtype: "float32", workers: 3, elements: 10_000, iters: 2,
		extra: []string{"--fallback", "ring", "--fallback-peers", strings.Join(peers, ",")}})
	for r, rep := range reps {
		if !strings.Contains(rep.Fallback, "unreachable") {
			t.Fatalf("rank %d: fallback %q, want the ring for an unreachable controller", r, rep.Fallback)
		}
	}
}

// TestFallbackOnLossCLI: the switch process dies mid-job while its
// controller lives on; the controller reports the switch lost, and the
// ranks (--fallback-on-loss) finish every iteration over the ring, with
// verified sums.
func TestFallbackOnLossCLI(t *testing.T) {
	needProcesses(t)
	metrics := freeAddr(t)
	f := startFabric(t, nil, "", "--metrics", metrics)
	crashed := make(chan error, 1)
	go func() {
		// The switch dies once it has served the job's first calls (a
		// call of 200,000 values is 3,125 results at 64 a packet), long
		// before the last of 40.
		const served = 3 * 200_000 / 64
		deadline := time.Now().Add(2 * time.Minute)
		for {
			m, err := scrape(metrics)
			if err == nil && m["switchml_switch_results_multicast_total"] >= served {
				break
			}
			if time.Now().After(deadline) {
				crashed <- fmt.Errorf("the switch never served %d results (%v)", served, err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		crashed <- f.fab.Crash("switch")
	}()
	reps := runJob(t, f, nil, jobSpec{name: "lossy", dtype: "int32", workers: 3, elements: 200_000, iters: 40,
		extra: []string{"--fallback", "ring", "--fallback-on-loss", "--give-up", "5s"}})
	if err := <-crashed; err != nil {
		t.Fatal(err)
	}
	for r, rep := range reps {
		if !strings.Contains(rep.Fallback, "switch was lost") || rep.RingCalls == 0 {
			t.Fatalf("rank %d: fallback %q after %d ring calls, want a move to the ring", r, rep.Fallback, rep.RingCalls)
		}
		t.Logf("rank %d: %d calls over the ring (barriers included), median TAT %.4f s: %s", r, rep.RingCalls, rep.MedianTAT, rep.Fallback)
	}
}

// TestFallbackSwitchDownAtJoinCLI: the switch process is gone and its
// controller lives on; a job that may fall back gathers at the controller
// and runs over the ring instead of waiting for the switch.
func TestFallbackSwitchDownAtJoinCLI(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	if err := f.fab.Crash("switch"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(f.ctl.Logs(), "controller: lost the switch") {
		if time.Now().After(deadline) {
			t.Fatalf("the controller never noticed the switch had gone:\n%s", f.ctl.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	reps := runJob(t, f, nil, jobSpec{name: "switchless", dtype: "bfloat16", workers: 3, elements: 20_000, iters: 2,
		extra: []string{"--fallback", "ring", "--join-timeout", "20s"}})
	for r, rep := range reps {
		if !strings.Contains(rep.Fallback, "switch is offline") {
			t.Fatalf("rank %d: fallback %q, want the ring for an offline switch", r, rep.Fallback)
		}
	}
}
