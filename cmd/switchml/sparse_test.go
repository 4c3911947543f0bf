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

// TestSparseAllReduce runs `switchml allreduce --sparse` on loopback: the
// results verify, and at a density of 1% the workers send at most 3% of
// the packets of the same run without --sparse. Both counts are of first
// transmissions, what the protocol decides: retransmissions depend on how
// busy the machine is.
func TestSparseAllReduce(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	var retx uint64 // for the log: what the load added
	packets := func(reps []benchmarks.WorkerReport) (n uint64) {
		for _, r := range reps {
			n += r.FirstPackets()
			retx += r.Retransmits
		}
		return n
	}
	for _, workers := range []int{1, 2} {
		js := jobSpec{dtype: "float32", workers: workers, elements: 1 << 20, iters: 3, pe: -1, extra: []string{"--density", "0.01"}}
		retx = 0
		js.name = fmt.Sprint("dense-", workers)
		dense := packets(runJob(t, f, nil, js))
		js.name = fmt.Sprint("sparse-", workers)
		js.extra = append(js.extra, "--sparse")
		reps := runJob(t, f, nil, js)
		sparse := packets(reps)
		if !reps[0].Sparse || reps[0].Density != 0.01 {
			t.Fatalf("report %+v does not say sparse at density 0.01", reps[0])
		}
		t.Logf("%d workers, density 1%%: %d packets sparse, %d dense, first transmissions (%.2f%%); %d retransmissions besides",
			workers, sparse, dense, 100*float64(sparse)/float64(dense), retx)
		if sparse*100 > dense*3 {
			t.Fatalf("%d workers: %d packets sparse, %d dense (first transmissions): more than 3%%", workers, sparse, dense)
		}
	}
}

// TestSparseAllReduceLossy: the sparse mode recovers from loss,
// duplication and reordering between real processes.
func TestSparseAllReduceLossy(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "", "--drop", "0.01", "--seed", "5")
	for _, dt := range []string{"int32", "float32"} {
		reps := runJob(t, f, nil, jobSpec{name: "sparse-loss-" + dt, dtype: dt, workers: 3, elements: 300_000, iters: 3,
			extra: []string{"--sparse", "--density", "0.1", "--drop", "0.01", "--duplicate", "0.01", "--reorder", "0.01"}})
		var retx uint64
		for _, r := range reps {
			retx += r.Retransmits
		}
		if retx == 0 {
			t.Fatalf("%s: 1%% loss but no retransmission was counted", dt)
		}
	}
}

// TestSparseGradientFiles reduces recorded gradients (--gradients): each
// rank reads its file, and the result verifies against the sum of all
// files.
func TestSparseGradientFiles(t *testing.T) {
	needProcesses(t)
	dir := t.TempDir()
	const n, size = 3, 50_000
	for r := range n {
		b := make([]byte, 4*size)
		// Rows of an embedding table: a few runs of values per rank.
		for _, row := range []int{r * 97, 1000 + r*3000, 40_000} {
			for i := row; i < row+300; i++ {
				le.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i%17)*0.125-float32(r)))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d.f32", r)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := startFabric(t, nil, "")
	reps := runJob(t, f, nil, jobSpec{name: "gradients", dtype: "float32", workers: n, elements: size, iters: 2,
		extra: []string{"--sparse", "--gradients", dir}})
	if reps[0].Gradients != dir {
		t.Fatalf("report %+v does not name the gradients", reps[0])
	}
}
