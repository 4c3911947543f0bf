package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/wirebytes"
	"github.com/switchml/switchml-go/internal/testenv"
)

// TestWireBytesWire16 runs `switchml wire-bytes` small: three workers,
// each case one job, its packets captured on loopback. The 16-bit cases
// put at most 0.6 of float32's bytes per element on the wire, counted
// from the capture (first transmissions, so that retransmissions on a
// busy machine change nothing); bfloat16 at 32 bits puts the same as
// float32; every sum is verified, and the capture holds every byte the
// workers say they sent.
func TestWireBytesWire16(t *testing.T) {
	needProcesses(t)
	testenv.NeedRoot(t, "to capture packets (an AF_PACKET socket)")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// 2 lanes of 16 packets: the exponent round (a window per lane)
	// stays small beside the 1024 data packets of a float32 call.
	out, err := exec.CommandContext(ctx, binary, "wire-bytes", "--workers", "3", "--elements", "262144", "--warmup", "1", "--iters", "2",
		"--lanes", "2", "--window", "16", "--out", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("wire-bytes: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	b, err := os.ReadFile(filepath.Join(dir, wirebytes.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var res wirebytes.Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Cases) != len(wirebytes.DefaultCases) || res.Reference() != 0 {
		t.Fatalf("%d cases, reference %d: want the %d default ones, float32 first", len(res.Cases), res.Reference(), len(wirebytes.DefaultCases))
	}
	median := func(v []float64) float64 { return benchmarks.Median(slices.Sorted(slices.Values(v))) }
	ref := median(res.PerElement(0, false))
	for i, c := range res.Cases {
		want := 32
		if c.Name() == "bfloat16" || c.WireBitsFlag == 16 {
			want = 16
		}
		if c.WireBits != want || !c.Verified {
			t.Errorf("%s: %d bits, verified %v; want %d bits, verified", c.Name(), c.WireBits, c.Verified, want)
		}
		if got := res.Captured(i); got != c.ReportedBytes {
			t.Errorf("%s: captured %d payload bytes, the workers sent %d", c.Name(), got, c.ReportedBytes)
		}
		payload, frames := median(res.PerElement(i, false)), median(res.PerElement(i, true))
		refFrames := median(res.PerElement(0, true))
		switch {
		case want == 16 && (payload > 0.6*ref || frames > 0.6*refFrames):
			t.Errorf("%s: %.3f bytes per element (%.3f with headers), float32 %.3f (%.3f): want at most 0.6 of them", c.Name(), payload, frames, ref, refFrames)
		case want == 32 && payload != ref:
			t.Errorf("%s: %.3f bytes per element on the 32-bit wire, float32 %.3f", c.Name(), payload, ref)
		}
	}
	summary, err := os.ReadFile(filepath.Join(dir, wirebytes.SummaryFile))
	if err != nil || string(summary) != res.Summary() {
		t.Errorf("summary.md is not the summary of capture.json (%v)", err)
	}
}
