package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/internal/testenv"
	"github.com/switchml/switchml-go/trainers/train"
)

// TestMultihostExample runs examples/multihost/run.sh as a user would,
// small: two worker namespaces, each one `train --rank`, over switchml and
// then the ring, and checks that every rank finished and that the ranks
// agree on the final figures. This test binary stands in for the train
// command.
func TestMultihostExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the switchml command and trains in network namespaces; skipped in -short")
	}
	testenv.NeedNetns(t)
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); err != nil {
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist): %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const workers = 2
	out := t.TempDir()
	cmd := exec.Command("../../../examples/multihost/run.sh", fmt.Sprint(workers))
	// GOFLAGS set for this module's build would be wrong for the script's
	// build of the switchml command, in the repository's main module.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "TRAIN="+exe, "TRAIN_TEST_AS_MAIN=1", "OUT="+out,
		"EPOCHS=1", "TRAIN_LIMIT=1280", "TEST_LIMIT=500", "THREADS=1", "BACKENDS=switchml ring")
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, log)
	}
	for _, backend := range []string{"switchml", "ring"} {
		var first train.EpochResult
		for r := range workers {
			last := lastEpoch(t, filepath.Join(out, fmt.Sprintf("%s-rank%d.jsonl", backend, r)))
			if last.Epoch != 1 || last.Workers != workers || last.Backend != backend {
				t.Errorf("%s rank %d: %+v", backend, r, last)
			}
			if r == 0 {
				first = last
			} else if last.TestAccuracy != first.TestAccuracy || last.TestLoss != first.TestLoss || last.TrainLoss != first.TrainLoss {
				t.Errorf("%s: rank %d ended with %+v, rank 0 with %+v", backend, r, last, first)
			}
		}
		if first.TestAccuracy < 0.3 {
			t.Errorf("%s: test accuracy %.3f after one epoch of 1280 examples", backend, first.TestAccuracy)
		}
		if want := fmt.Sprintf("%s: all %d ranks finished", backend, workers); !strings.Contains(string(log), want) {
			t.Errorf("run.sh did not say %q:\n%s", want, log)
		}
	}
}

// lastEpoch is the last JSON line a rank printed.
func lastEpoch(t *testing.T, path string) train.EpochResult {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last train.EpochResult
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
	}
	return last
}
