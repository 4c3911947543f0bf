package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/trainers/internal/freeport"
	"github.com/switchml/switchml-go/trainers/train"
)

// rankOutput is what one `train --rank` process printed.
type rankOutput struct {
	stdout, stderr bytes.Buffer
	err            error
}

// runRanks starts n processes of this test binary as `train --rank r`
// with args(r), at once, and waits for them all.
func runRanks(t *testing.T, n int, args func(rank int) []string) []*rankOutput {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := make([]*rankOutput, n)
	var wg sync.WaitGroup
	for r := range n {
		o := &rankOutput{}
		out[r] = o
		c := exec.CommandContext(ctx, exe, append(args(r), "--rank", fmt.Sprint(r))...)
		c.Env = append(os.Environ(), "TRAIN_TEST_AS_MAIN=1", "TF_CPP_MIN_LOG_LEVEL=2")
		c.Stdout, c.Stderr = &o.stdout, &o.stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.err = c.Wait()
		}()
	}
	wg.Wait()
	return out
}

// smallCNN is a short Fashion-MNIST run; synthetic data when the data set
// is not installed, so the test runs anywhere.
func smallCNN(t *testing.T, epochs int) []string {
	return cnnRun(t, epochs, 640, 300)
}

// cnnRun trains the CNN on the first train and test examples of
// Fashion-MNIST, or of the synthetic set when Fashion-MNIST is not
// installed.
func cnnRun(t *testing.T, epochs, train, test int) []string {
	args := []string{"--model", "cnn", "--epochs", fmt.Sprint(epochs), "--batch", "32", "--train-limit", fmt.Sprint(train),
		"--test-limit", fmt.Sprint(test), "--intra-op-threads", "1", "--json", "--quiet"}
	if _, err := os.Stat(filepath.Join("/usr/share/datasets/fashion-mnist", "train-images-idx3-ubyte.gz")); err != nil {
		t.Logf("Fashion-MNIST not installed, training on the synthetic set: %v", err)
		args = append(args, "--dataset", "synthetic")
	}
	return args
}

// epochResults parses each rank's JSON lines, failing on a rank that failed.
func epochResults(t *testing.T, outs []*rankOutput) [][]train.EpochResult {
	t.Helper()
	res := make([][]train.EpochResult, len(outs))
	for r, o := range outs {
		if o.err != nil {
			t.Fatalf("rank %d: %v\nstderr:\n%s", r, o.err, o.stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(o.stdout.String()), "\n") {
			var e train.EpochResult
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("rank %d: stdout line %q: %v", r, line, err)
			}
			res[r] = append(res[r], e)
		}
	}
	return res
}

// checkRanksAgree checks that every rank reports the same figures and
// holds the same model in its own checkpoint file.
func checkRanksAgree(t *testing.T, res [][]train.EpochResult, ckDir string, epochs int) {
	t.Helper()
	last0 := res[0][len(res[0])-1]
	if last0.Epoch != epochs {
		t.Fatalf("rank 0 ended at epoch %d, want %d", last0.Epoch, epochs)
	}
	var fp0 string
	for r := range res {
		last := res[r][len(res[r])-1]
		if last.Epoch != last0.Epoch || last.TestAccuracy != last0.TestAccuracy || last.TestLoss != last0.TestLoss || last.TrainLoss != last0.TrainLoss {
			t.Errorf("rank %d ended with %+v, rank 0 with %+v", r, last, last0)
		}
		ck, err := train.LoadCheckpointFile(train.RankCheckpointFile(ckDir, r))
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if ck.Epoch+1 != epochs {
			t.Errorf("rank %d's checkpoint is after epoch %d, want %d", r, ck.Epoch+1, epochs)
		}
		if fp := ck.Fingerprint(); r == 0 {
			fp0 = fp
		} else if fp != fp0 {
			t.Errorf("rank %d's weights (%s) differ from rank 0's (%s)", r, fp, fp0)
		}
	}
	if last0.TestAccuracy <= 0.2 {
		t.Errorf("test accuracy %.3f after %d epochs: the ranks did not learn", last0.TestAccuracy, epochs)
	}
}

// Three processes, each one rank, train together over every backend and
// way of meeting, and end with the same model.
func TestRanksTrainTogether(t *testing.T) {
	fab := local.ForTest(t, local.Options{})
	const n = 3
	for _, tc := range []struct {
		name string
		meet func() []string
	}{
		{"ring over --peers", func() []string {
			return []string{"--backend", "ring", "--peers", strings.Join(freeport.Loopback(t, n), ",")}
		}},
		{"exact over --peers", func() []string { return []string{"--backend", "exact", "--peers", freeport.Loopback(t, 1)[0]} }},
		{"switchml", func() []string {
			return []string{"--backend", "switchml", "--controller", fab.ControllerAddr(), "--job", "ranks-switchml"}
		}},
		{"ring at the controller", func() []string {
			return []string{"--backend", "ring", "--controller", fab.ControllerAddr(), "--job", "ranks-ring"}
		}},
		{"exact at the controller", func() []string {
			return []string{"--backend", "exact", "--controller", fab.ControllerAddr(), "--job", "ranks-exact"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ckDir := t.TempDir()
			args := append(append(smallCNN(t, 1), tc.meet()...), "--workers", fmt.Sprint(n), "--checkpoint-dir", ckDir)
			res := epochResults(t, runRanks(t, n, func(int) []string { return args }))
			checkRanksAgree(t, res, ckDir, 1)
		})
	}
}

// Ranks resume from their own checkpoints, and refuse to when the
// checkpoints are not of the same point of training.
func TestRanksResume(t *testing.T) {
	const n = 2
	ckDir := t.TempDir()
	run := func(epochs int, resume bool) []*rankOutput {
		args := append(smallCNN(t, epochs), "--backend", "ring", "--peers", strings.Join(freeport.Loopback(t, n), ","),
			"--workers", fmt.Sprint(n), "--checkpoint-dir", ckDir)
		if resume {
			args = append(args, "--resume")
		}
		return runRanks(t, n, func(int) []string { return args })
	}
	checkRanksAgree(t, epochResults(t, run(1, false)), ckDir, 1)
	res := epochResults(t, run(2, true))
	if len(res[0]) != 1 || res[0][0].Epoch != 2 {
		t.Fatalf("resumed run reported %+v, want epoch 2 only", res[0])
	}
	checkRanksAgree(t, res, ckDir, 2)

	// Rank 1 lost its checkpoint: neither rank starts.
	if err := os.Remove(train.RankCheckpointFile(ckDir, 1)); err != nil {
		t.Fatal(err)
	}
	for r, o := range run(3, true) {
		msg := o.stderr.String()
		if o.err == nil || !strings.Contains(msg, "rank 1 has --resume checkpoint none, rank 0 has --resume checkpoint after epoch 2") {
			t.Errorf("rank %d: %v, stderr:\n%s", r, o.err, msg)
		}
	}
}

// Ranks started with different settings stop before training, every one
// of them naming the difference and both values.
func TestRanksThatDisagreeStop(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		flag, value string
		want        string
	}{
		{"--seed", "7", "rank 2 has --seed 7, rank 0 has --seed 1"},
		{"--model", "mlp", "rank 2 has --model mlp, rank 0 has --model cnn"},
		{"--train-limit", "320", "rank 2 has --train-limit 320, rank 0 has --train-limit 640"},
	} {
		peers := strings.Join(freeport.Loopback(t, n), ",")
		outs := runRanks(t, n, func(r int) []string {
			args := append(smallCNN(t, 1), "--backend", "ring", "--peers", peers, "--workers", fmt.Sprint(n))
			if r == 2 {
				args = append(args, tc.flag, tc.value)
			}
			return args
		})
		for r, o := range outs {
			if o.err == nil || !strings.Contains(o.stderr.String(), tc.want) {
				t.Errorf("%s %s on rank 2: rank %d ended with %v, stderr:\n%s", tc.flag, tc.value, r, o.err, o.stderr.String())
			}
			if o.stdout.Len() > 0 {
				t.Errorf("%s %s on rank 2: rank %d trained: %s", tc.flag, tc.value, r, o.stdout.String())
			}
		}
	}
	// The same flags over data that differ in one label: the hosts' copies
	// of the data set are not the same.
	dirs := [2]string{writeIDXSet(t, 0), writeIDXSet(t, 1)}
	peers := strings.Join(freeport.Loopback(t, 2), ",")
	outs := runRanks(t, 2, func(r int) []string {
		return []string{"--model", "mlp", "--epochs", "1", "--data-dir", dirs[r], "--backend", "exact", "--peers", peers, "--workers", "2", "--quiet"}
	})
	for r, o := range outs {
		if o.err == nil || !strings.Contains(o.stderr.String(), "rank 1 has training data 100 examples sha256:") {
			t.Errorf("different copies of the data: rank %d ended with %v, stderr:\n%s", r, o.err, o.stderr.String())
		}
	}
}

// writeIDXSet writes a tiny data set in Fashion-MNIST's IDX layout (100
// training and 100 test examples) whose first training label is flip.
func writeIDXSet(t *testing.T, flip byte) string {
	t.Helper()
	dir := t.TempDir()
	const n, side = 100, 28
	idx := func(name string, kind byte, dims []uint32, body []byte) {
		b := []byte{0, 0, 0x08, kind}
		for _, d := range dims {
			b = binary.BigEndian.AppendUint32(b, d)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, body...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pixels := make([]byte, n*side*side)
	labels := make([]byte, n)
	for i := range pixels {
		pixels[i] = byte(i * 7)
	}
	for i := range labels {
		labels[i] = byte(i % 10)
	}
	for _, split := range []string{"train", "t10k"} {
		idx(split+"-images-idx3-ubyte", 3, []uint32{n, side, side}, pixels)
		labels[0] = flip
		if split == "t10k" {
			labels[0] = 0
		}
		idx(split+"-labels-idx1-ubyte", 1, []uint32{n}, labels)
	}
	return dir
}

// runRankInProcess runs `train --rank ...` up to its first error, in this
// process: the failures below happen before any TensorFlow session.
func runRankInProcess(t *testing.T, args ...string) error {
	t.Helper()
	f, err := parseFlags(args)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runRank(ctx, f)
}

func TestRankWithoutDataSet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-fashion-mnist")
	err := runRankInProcess(t, "--rank", "0", "--workers", "2", "--backend", "ring", "--peers", "127.0.0.1:1,127.0.0.1:2", "--data-dir", dir)
	for _, want := range []string{dir, "apt-get install dataset-fashion-mnist"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

// A rank that cannot reach its peers or the controller gives up when
// --join-timeout has passed, naming what it could not reach.
func TestRankCannotReachTheOthers(t *testing.T) {
	dead := freeport.Loopback(t, 2)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rank", "1", "--backend", "ring", "--peers", strings.Join(dead, ",")}, "could not reach rank 0 at " + dead[0]},
		{[]string{"--rank", "0", "--backend", "ring", "--peers", strings.Join(dead, ",")}, "rank 1 did not join"},
		{[]string{"--rank", "0", "--backend", "switchml", "--controller", dead[0]}, dead[0]},
		{[]string{"--rank", "1", "--backend", "exact", "--controller", dead[0]}, dead[0]},
	} {
		args := append(tc.args, "--workers", "2", "--dataset", "synthetic", "--join-timeout", "1s")
		err := runRankInProcess(t, args...)
		for _, want := range []string{tc.want, "--join-timeout 1s"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%v: error %v does not say %q", tc.args, err, want)
			}
		}
	}
}

func TestRankFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rank", "2", "--workers", "2", "--backend", "ring", "--peers", "a:1,b:2"}, "--rank 2: want 0..1"},
		{[]string{"--rank", "0", "--workers", "2", "--backend", "switchml"}, "needs --controller"},
		{[]string{"--rank", "0", "--workers", "2", "--backend", "ring"}, "needs --peers"},
		{[]string{"--rank", "0", "--workers", "3", "--backend", "ring", "--peers", "a:1,b:2"}, "--peers has 2 addresses, --workers is 3"},
		{[]string{"--rank", "0", "--workers", "2", "--backend", "ring", "--peers", "a:1,b:2", "--controller", "c:3"}, "not both"},
		{[]string{"--rank", "0", "--workers", "2", "--backend", "ring", "--peers", "a:1,b"}, "--peers entry 1 \"b\""},
		{[]string{"--rank", "0", "--workers", "2", "--backend", "exact", "--peers", "a:1", "--listen", "a:2"}, "--listen is for ranks that meet at --controller"},
		{[]string{"--rank", "0", "--workers", "2", "--backend", "ring", "--peers", "a:1,b:2", "--join-timeout", "0s"}, "--join-timeout 0s"},
		{[]string{"--workers", "2", "--peers", "a:1,b:2"}, "--peers needs --rank"},
	} {
		_, err := parseFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
	// exact needs rank 0's address alone.
	if _, err := parseFlags([]string{"--rank", "1", "--workers", "3", "--backend", "exact", "--peers", "a:1"}); err != nil {
		t.Errorf("exact with rank 0's address: %v", err)
	}
}
