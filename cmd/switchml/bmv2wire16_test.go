package main

import (
	le "encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchml/switchml-go/benchmarks"
)

// TestBMv2Wire16 runs jobs on the 16-bit wire through BMv2 executing the
// compiled v1model program, unchanged: the program adds 32-bit words, and
// each word carries two 16-bit values whose halves it sums without
// knowing. TestBMv2's rack with four worker hosts: at four workers the
// largest values of a block round up past the 16-bit wire's headroom and
// are clamped back (headroom-edge). Every rank verifies its sums
// within the 16-bit wire's bound and reports the width it used; beside
// them, 32-bit jobs run on the same switch.
func TestBMv2Wire16(t *testing.T) {
	r := newBMv2Rack(t, 4)
	slow := []string{"--timeout", "40ms", "--give-up", "60s"}
	ctl := r.startController(t)
	defer r.stopController(t, ctl)
	// firstSent is the packets a job's rank 0 sent once, whatever the
	// load made it resend.
	firstSent := func(reps []benchmarks.WorkerReport) uint64 { return reps[0].Packets - reps[0].Retransmits }

	t.Run("bfloat16-beside-float32", func(t *testing.T) {
		// Both jobs at once on the switch: bfloat16 at its default
		// 16 bits, float32 at 32.
		for _, c := range []struct {
			js   jobSpec
			bits int
		}{
			{jobSpec{name: "bmv2-w16-bf16", dtype: "bfloat16", elements: 12_000, iters: 2, lanes: 2, window: 8, pe: -1, extra: append([]string{"--seed", "5"}, slow...)}, 16},
			{jobSpec{name: "bmv2-w16-f32", dtype: "float32", elements: 12_000, iters: 2, lanes: 2, window: 8, pe: -1, extra: append([]string{"--seed", "6"}, slow...)}, 32},
		} {
			t.Run(c.js.name, func(t *testing.T) {
				t.Parallel()
				wantWidth(t, c.js.name, r.job(t, c.js), c.bits)
			})
		}
	})
	var narrow, wide uint64
	t.Run("float32-wire-bits-16", func(t *testing.T) {
		reps := r.job(t, jobSpec{name: "bmv2-w16-f32n", dtype: "float32", elements: 16_384, iters: 2, lanes: 2, window: 8, pe: -1,
			extra: append([]string{"--wire-bits", "16"}, slow...)})
		wantWidth(t, "bmv2-w16-f32n", reps, 16)
		narrow = firstSent(reps)
	})
	t.Run("float32", func(t *testing.T) {
		reps := r.job(t, jobSpec{name: "bmv2-w16-f32w", dtype: "float32", elements: 16_384, iters: 2, lanes: 2, window: 8, pe: -1, extra: slow})
		wantWidth(t, "bmv2-w16-f32w", reps, 32)
		wide = firstSent(reps)
	})
	t.Run("packets", func(t *testing.T) {
		// A 64-word packet carries 128 values at 16 bits: about half the
		// packets for the same tensor (the exponent round, one window
		// per lane, is the same at either width).
		if narrow == 0 || wide == 0 || float64(narrow) > 0.6*float64(wide) {
			t.Errorf("rank 0 sent %d packets at 16 bits and %d at 32 for the same tensor: want at most 0.6 of them", narrow, wide)
		}
		t.Logf("rank 0 sent %d packets at 16 bits, %d at 32 (first transmissions)", narrow, wide)
	})
	t.Run("headroom-edge", func(t *testing.T) {
		// Every rank's values at the largest magnitude their block's
		// exponent allows, with the same sign: each 16-bit half of a
		// word sums to n times the largest value, the edge of the
		// headroom, and with 4 workers those values round up past it
		// and must be clamped back, or the low half would carry into
		// the high one.
		dir := t.TempDir()
		const blocks = 64
		n := writeWire16Edge(t, dir, r.workers, blocks)
		reps := r.job(t, jobSpec{name: "bmv2-w16-edge", dtype: "float32", elements: n, iters: 2, lanes: 2, window: 8, pe: -1,
			extra: append([]string{"--wire-bits", "16", "--gradients", dir}, slow...)})
		wantWidth(t, "bmv2-w16-edge", reps, 16)
	})
}

// wire16Block is the values a 64-word packet carries on the 16-bit wire.
const wire16Block = 128

// writeWire16Edge writes DIR/rank<r>.f32 for every rank: blocks of
// wire16Block values, block b below 2^E with E = b%10 - 5. The first
// half of a block holds, on every rank, the largest float32 below 2^E,
// with the signs of its pairs cycling through (+,+), (+,-), (-,+), (-,-)
// so that both halves of a word sum to the edge with either sign. The
// second half holds smaller values that differ by rank; the last block
// is zero. It returns the values per rank.
func writeWire16Edge(t *testing.T, dir string, workers, blocks int) int {
	t.Helper()
	n := blocks * wire16Block
	signs := [4][2]float64{{1, 1}, {1, -1}, {-1, 1}, {-1, -1}}
	for rank := range workers {
		buf := make([]byte, 4*n)
		for i := range n {
			b, j := i/wire16Block, i%wire16Block
			top := math.Ldexp(1, b%10-5)
			var v float64
			switch {
			case b == blocks-1:
			case j < wire16Block/2:
				v = float64(math.Nextafter32(float32(top), 0)) * signs[j/2%4][j%2]
			default:
				v = top * math.Sin(float64(i*(rank+2))) * float64(rank+1) / float64(workers+1)
			}
			le.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d.f32", rank)), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// wantWidth checks the reports of a BMv2 job: every rank verified its sums
// at the width it should have used, 64 values per packet (the controller
// describes BMv2 with 64).
func wantWidth(t *testing.T, name string, reps []benchmarks.WorkerReport, bits int) {
	t.Helper()
	for _, rep := range reps {
		if rep.WireBits != bits || !rep.Verified || rep.PacketElements != 64 {
			t.Errorf("%s: rank %d: %d-bit wire, verified %v, %d words per packet; want %d bits, verified, 64 words", name, rep.Rank, rep.WireBits, rep.Verified, rep.PacketElements, bits)
		}
	}
}
