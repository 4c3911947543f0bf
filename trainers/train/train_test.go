package train

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/data"
)

// trainInProcess runs `workers` workers as goroutines, each with its own
// TensorFlow session, over the exact (star) backend.
func trainInProcess(t *testing.T, o Options, workers int) [][]EpochResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	star := collective.ServeStar(ctx, ln, workers)
	defer star.Close()
	res := make([][]EpochResult, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for r := 0; r < workers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			be, err := collective.Dial(ctx, collective.Config{Kind: collective.Exact, Rank: r, Workers: workers, StarAddr: star.Addr()})
			if err != nil {
				errs[r] = err
				return
			}
			defer be.Close()
			oo := o
			oo.Rank, oo.Workers = r, workers
			oo.IntraOpThreads, oo.InterOpThreads = 1, 1
			rs, p, err := Run(ctx, oo, be)
			if err != nil {
				errs[r] = err
				return
			}
			p.Close()
			res[r] = rs
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", r, err)
		}
	}
	return res
}

func TestTrainMLPFashionMNISTTwoWorkers(t *testing.T) {
	train, test, err := data.LoadFashionMNIST("")
	if err != nil {
		t.Skipf("Fashion-MNIST not available: %v", err)
	}
	o := Options{Model: "mlp", Train: train.Subset(24000), Test: test.Subset(2000), Epochs: 2, Batch: 50,
		Optimizer: "adam", Seed: 3, Backend: "exact"}
	res := trainInProcess(t, o, 2)
	last := res[0][len(res[0])-1]
	t.Logf("rank 0: %+v", last)
	if last.TestAccuracy < 0.80 {
		t.Fatalf("test accuracy %.3f after %d epochs, want >= 0.80", last.TestAccuracy, last.Epoch)
	}
	// Both workers made identical updates, so they report identical figures.
	if res[1][len(res[1])-1].TestAccuracy != last.TestAccuracy {
		t.Fatalf("workers disagree: %v vs %v", res[1][len(res[1])-1].TestAccuracy, last.TestAccuracy)
	}
	if res[0][0].TrainLoss <= last.TrainLoss {
		t.Errorf("training loss did not fall: %v -> %v", res[0][0].TrainLoss, last.TrainLoss)
	}
}

func TestTrainCNNSyntheticAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	set := data.Synthetic(1200, 28, 28, 10, 5)
	o := Options{Model: "cnn", Train: set.Subset(1000), Test: set.Shard(0, 6), Epochs: 1, Batch: 25,
		Optimizer: "momentum", LR: 0.02, Seed: 4, Backend: "exact", CheckpointDir: dir}
	res := trainInProcess(t, o, 2)
	if acc := res[0][0].TestAccuracy; acc < 0.6 {
		t.Fatalf("CNN on the synthetic set: accuracy %.3f, want >= 0.6", acc)
	}
	ck, err := LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Epoch != 0 || ck.Step != 20 || len(ck.Values["conv1/kernel"]) != 3*3*16 || len(ck.Values["conv1/kernel/momentum"]) != 3*3*16 {
		t.Fatalf("checkpoint epoch %d step %d, %d variables", ck.Epoch, ck.Step, len(ck.Values))
	}
	// Resuming with the same epoch count has nothing left to do.
	res = trainInProcess(t, o, 2)
	if len(res[0]) != 0 {
		t.Fatalf("resumed run trained %d more epochs", len(res[0]))
	}
	// A checkpoint of another model is refused.
	o.Model = "mlp"
	o.Epochs = 2
	be := &nopBackend{}
	if _, _, err := Run(context.Background(), o, be); err == nil {
		t.Fatal("mlp resumed from a cnn checkpoint")
	}
	if _, err := os.Stat(filepath.Join(dir, checkpointFile)); err != nil {
		t.Fatal(err)
	}
}

type nopBackend struct{}

func (nopBackend) AllReduceFloat32(context.Context, []float32) error { return nil }
func (nopBackend) Close() error                                      { return nil }

// With per-rank checkpoints every rank writes its own file, and the files
// hold the same model.
func TestPerRankCheckpoints(t *testing.T) {
	dir := t.TempDir()
	set := data.Synthetic(700, 28, 28, 10, 5)
	o := Options{Model: "mlp", Train: set.Subset(600), Test: set.Shard(0, 7), Epochs: 1, Batch: 25,
		Optimizer: "adam", Seed: 4, Backend: "exact", CheckpointDir: dir, PerRankCheckpoint: true}
	trainInProcess(t, o, 2)
	if _, err := os.Stat(filepath.Join(dir, checkpointFile)); err == nil {
		t.Error("per-rank checkpoints also wrote the shared file")
	}
	var cks [2]*Checkpoint
	for r := range cks {
		ck, err := LoadCheckpointFile(RankCheckpointFile(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		if ck.Epoch != 0 || ck.Step != 12 {
			t.Fatalf("rank %d: checkpoint after epoch %d step %d, want 0 and 12", r, ck.Epoch, ck.Step)
		}
		cks[r] = ck
	}
	if a, b := cks[0].Fingerprint(), cks[1].Fingerprint(); a != b {
		t.Fatalf("the ranks' checkpoints differ: %s and %s", a, b)
	}
	// One changed weight changes the fingerprint.
	before := cks[1].Fingerprint()
	cks[1].Values["fc1/kernel"][3] += 1e-3
	if cks[1].Fingerprint() == before {
		t.Error("a changed weight left the fingerprint as it was")
	}
	// Each rank resumes from its own file.
	o.Epochs = 2
	res := trainInProcess(t, o, 2)
	if len(res[1]) != 1 || res[1][0].Epoch != 2 {
		t.Fatalf("resumed run: %+v", res[1])
	}
	ck, err := LoadCheckpointFile(RankCheckpointFile(dir, 1))
	if err != nil || ck.Epoch != 1 || ck.Step != 24 {
		t.Fatalf("rank 1's checkpoint after resuming: %v, %v", ck, err)
	}
}

// EvalEvery evaluates within each epoch: every N steps but not at the
// epoch's last step (the epoch's own result covers it), in order, with
// the same figures on every rank.
func TestEvalEvery(t *testing.T) {
	train, test := data.Synthetic(400, 28, 28, 10, 5), data.Synthetic(200, 28, 28, 10, 6)
	var mu sync.Mutex
	var got []EvalResult // both ranks' evaluations
	o := Options{Model: "mlp", Train: train, Test: test, Epochs: 2, Batch: 20, Optimizer: "adam", Seed: 3, Backend: "exact",
		EvalEvery: 4}
	o.OnEval = func(r EvalResult) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
	}
	res := trainInProcess(t, o, 2)
	// 400 examples, a global batch of 40: 10 steps per epoch, evaluated
	// after steps 4 and 8 of each epoch, on both ranks.
	if len(got) != 8 {
		t.Fatalf("%d evaluations, want 2 per epoch per rank (8): %+v", len(got), got)
	}
	var progress []float64
	for _, e := range got {
		if e.Kind != "eval" || e.Steps != 10 || e.TestAccuracy < 0 || e.TestAccuracy > 1 {
			t.Errorf("evaluation %+v", e)
		}
		progress = append(progress, e.Progress)
	}
	slices.Sort(progress)
	if want := []float64{0.4, 0.4, 0.8, 0.8, 1.4, 1.4, 1.8, 1.8}; !slices.Equal(progress, want) {
		t.Errorf("evaluated at %v epochs, want %v", progress, want)
	}
	if len(res[0]) != 2 || res[0][1].Steps != 10 {
		t.Errorf("epoch results %+v", res[0])
	}
}
