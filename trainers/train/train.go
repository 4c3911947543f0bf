// Package train runs one worker of data-parallel training: it builds the
// model in its own TensorFlow session, computes gradients on its share of
// each global batch, allreduces the fused gradient buckets through a
// collective.Backend and applies the average, so every worker makes the
// same update.
package train

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/data"
	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/nn"
)

// Options configure a worker. Every worker of a job must get the same
// values except Rank.
type Options struct {
	Model       string
	Train, Test *data.Set
	Epochs      int
	Batch       int // per worker
	Optimizer   string
	LR          float32
	Seed        int64
	Rank        int
	Workers     int
	BucketElems int
	// Threads for TensorFlow's pools; 0 lets TensorFlow decide.
	IntraOpThreads, InterOpThreads int
	// CheckpointDir, when set, gets a checkpoint after each epoch (rank 0)
	// and is resumed from when it holds one.
	CheckpointDir string
	// PerRankCheckpoint makes every rank write and resume from its own file
	// in CheckpointDir (RankCheckpointFile), for ranks on hosts with their
	// own disks; the files hold the same model.
	PerRankCheckpoint bool
	// Resume, when set, is the checkpoint to start from, already read (the
	// caller checked it against the other ranks'); CheckpointDir is then
	// only written.
	Resume *Checkpoint
	// Progress receives a status line now and then (rank 0 only; may be nil).
	Progress io.Writer
	// OnEpoch is called with each epoch's result (every rank).
	OnEpoch func(EpochResult)
	// EvalEvery, when positive, also evaluates on the test set after every
	// EvalEvery steps within an epoch and hands the result to OnEval
	// (every rank), for curves finer than one point per epoch. The time
	// it takes is left out of StepS.
	EvalEvery int
	OnEval    func(EvalResult)
	// Backend names the allreduce backend in results.
	Backend string
}

// EpochResult is one epoch's figures, the same on every worker.
type EpochResult struct {
	Epoch        int     `json:"epoch"`
	Model        string  `json:"model"`
	Backend      string  `json:"backend"`
	Workers      int     `json:"workers"`
	Steps        int     `json:"steps"`
	TrainLoss    float64 `json:"train_loss"`
	TestLoss     float64 `json:"test_loss"`
	TestAccuracy float64 `json:"test_accuracy"`
	// StepS is the mean wall time of a training step (compute + allreduce
	// + update) on rank 0.
	StepS float64 `json:"step_s"`
	// CommS is rank 0's total time inside allreduce calls this epoch.
	CommS float64 `json:"comm_s"`
	// ComputeS is rank 0's total time in TensorFlow (gradients + update).
	ComputeS float64 `json:"compute_s"`
	EpochS   float64 `json:"epoch_s"`
	// GradElems is the number of gradient values allreduced per step.
	GradElems int `json:"grad_elems"`
	// WireBits is the width at which the gradients travelled through the
	// switch (16 or 32; collective.FloatWireBits), absent for backends
	// that sum in floating point.
	WireBits int `json:"wire_bits,omitempty"`
	// Seed is the run's seed (Options.Seed); absent in results recorded
	// before it was, which say their seed in their command.
	Seed int64 `json:"seed,omitempty"`
}

// EvalResult is a test evaluation within an epoch (Options.EvalEvery).
type EvalResult struct {
	// Kind is "eval", which tells these lines from epoch results in a
	// stream of JSON lines.
	Kind string `json:"kind"`
	// Epoch is the epoch in progress (from 1), after Step of its Steps.
	Epoch int `json:"epoch"`
	Step  int `json:"step"`
	Steps int `json:"steps"`
	// Progress is the training done in epochs, such as 1.25.
	Progress     float64 `json:"progress"`
	TrainLoss    float64 `json:"train_loss"`
	TestLoss     float64 `json:"test_loss"`
	TestAccuracy float64 `json:"test_accuracy"`
	// ElapsedS is the time since the epoch started.
	ElapsedS float64 `json:"elapsed_s"`
}

// NewOptimizer returns the named optimizer with its default learning rate
// when lr is 0.
func NewOptimizer(name string, lr float32) (nn.Optimizer, error) {
	switch name {
	case "adam", "":
		if lr == 0 {
			lr = 1e-3
		}
		return nn.NewAdam(lr), nil
	case "momentum", "sgd":
		if lr == 0 {
			lr = 0.05
		}
		return &nn.Momentum{LR: lr, Momentum: 0.9}, nil
	}
	return nil, fmt.Errorf("unknown optimizer %q (want adam or momentum)", name)
}

// Build constructs the worker's program for the options' model and data.
func Build(o *Options) (*nn.Program, error) {
	def, err := models.Lookup(o.Model)
	if err != nil {
		return nil, err
	}
	opt, err := NewOptimizer(o.Optimizer, o.LR)
	if err != nil {
		return nil, err
	}
	s := o.Train
	return nn.Build(nn.Spec{
		Seed:       o.Seed,
		OpSeed:     o.Seed*7919 + int64(o.Rank) + 1,
		InputShape: []int64{int64(s.H), int64(s.W), int64(s.C)},
		InputType:  def.InputType,
		Classes:    s.Classes,
		Model: func(g *nn.Graph) nn.Layer {
			return def.Build(g, s.H, s.W, s.C, s.Classes)
		},
		Optimizer:      opt,
		BucketElems:    o.BucketElems,
		Workers:        o.Workers,
		IntraOpThreads: o.IntraOpThreads,
		InterOpThreads: o.InterOpThreads,
	})
}

// Run trains and returns the per-epoch results and the trained program
// (which the caller closes).
func Run(ctx context.Context, o Options, be collective.Backend) ([]EpochResult, *nn.Program, error) {
	if o.Workers <= 0 || o.Rank < 0 || o.Rank >= o.Workers {
		return nil, nil, fmt.Errorf("train: rank %d of %d", o.Rank, o.Workers)
	}
	if o.Batch <= 0 {
		return nil, nil, fmt.Errorf("train: batch must be positive")
	}
	p, err := Build(&o)
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	t := &trainer{o: &o, p: p, be: be, ckPath: o.checkpointPath()}
	startEpoch, err := t.resume()
	if err != nil {
		return nil, nil, err
	}
	if err := t.prepare(); err != nil {
		return nil, nil, err
	}
	var results []EpochResult
	for epoch := startEpoch; epoch < o.Epochs; epoch++ {
		r, err := t.epoch(ctx, epoch)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, r)
		if o.OnEpoch != nil {
			o.OnEpoch(r)
		}
	}
	ok = true
	return results, p, nil
}

// trainer is one worker's training state across epochs.
type trainer struct {
	o      *Options
	p      *nn.Program
	be     collective.Backend
	ckPath string // checkpoint file, "" for none
	step   int    // updates applied so far

	batches   *data.Batches
	steps     int       // per epoch
	x, y      []float32 // the batch's examples and one-hot labels, reused by every step
	gradElems int
	testShard *data.Set
}

// epochClock is an epoch's running figures.
type epochClock struct {
	t0                      time.Time
	comm, compute, evalTime time.Duration
	lossSum                 float64
}

// resume restores the checkpoint to start from (Options.Resume, else the
// checkpoint file when there is one) and returns the first epoch to run.
func (t *trainer) resume() (startEpoch int, err error) {
	o := t.o
	ck := o.Resume
	if ck == nil && t.ckPath != "" {
		if ck, err = LoadCheckpointFile(t.ckPath); errors.Is(err, fs.ErrNotExist) {
			ck, err = nil, nil
		}
		if err != nil {
			return 0, err
		}
	}
	if ck == nil {
		return 0, nil
	}
	if ck.Model != o.Model {
		return 0, fmt.Errorf("train: checkpoint in %s is of model %q, not %q", o.CheckpointDir, ck.Model, o.Model)
	}
	if err := t.p.SetValues(ck.Values); err != nil {
		return 0, fmt.Errorf("train: restoring %s: %w", o.CheckpointDir, err)
	}
	t.step = ck.Step
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "resumed from %s after epoch %d\n", o.CheckpointDir, ck.Epoch+1)
	}
	return ck.Epoch + 1, nil
}

// prepare sets up the batches of this rank and the buffers every step
// reuses.
func (t *trainer) prepare() error {
	o, tr := t.o, t.o.Train
	t.batches = &data.Batches{Set: tr, Batch: o.Batch, Rank: o.Rank, Workers: o.Workers, Seed: uint64(o.Seed)}
	t.steps = t.batches.Steps()
	if t.steps == 0 {
		return fmt.Errorf("train: %d examples make no global batch of %d", tr.Len(), o.Batch*o.Workers)
	}
	t.x = make([]float32, o.Batch*tr.ExampleSize())
	t.y = make([]float32, o.Batch*tr.Classes)
	for _, b := range t.p.Buckets {
		t.gradElems += b.Size
	}
	t.testShard = o.Test.Shard(o.Rank, o.Workers)
	return nil
}

// epoch trains one epoch, evaluates, reports and writes the checkpoint.
func (t *trainer) epoch(ctx context.Context, epoch int) (EpochResult, error) {
	o := t.o
	t.batches.Epoch(epoch)
	c := epochClock{t0: time.Now()}
	for s := 0; s < t.steps; s++ {
		if err := ctx.Err(); err != nil {
			return EpochResult{}, err
		}
		if err := t.trainStep(ctx, s, &c); err != nil {
			return EpochResult{}, err
		}
		if o.EvalEvery > 0 && (s+1)%o.EvalEvery == 0 && s+1 < t.steps {
			if err := t.evalWithin(ctx, epoch, s+1, &c); err != nil {
				return EpochResult{}, err
			}
		}
		if o.Progress != nil && (s%20 == 0 || s == t.steps-1) {
			t.showStep(epoch, s, &c)
		}
	}
	trainTime := time.Since(c.t0) - c.evalTime

	trainLoss, testLoss, testAcc, err := evaluateAll(ctx, t.p, t.be, o.Workers, t.testShard, c.lossSum, t.steps)
	if err != nil {
		return EpochResult{}, err
	}
	r := EpochResult{
		Epoch: epoch + 1, Model: o.Model, Backend: o.Backend, Workers: o.Workers, Steps: t.steps,
		TrainLoss:    trainLoss,
		TestLoss:     testLoss,
		TestAccuracy: testAcc,
		StepS:        trainTime.Seconds() / float64(t.steps),
		CommS:        c.comm.Seconds(),
		ComputeS:     c.compute.Seconds(),
		EpochS:       time.Since(c.t0).Seconds(),
		GradElems:    t.gradElems,
		WireBits:     collective.FloatWireBits(t.be),
		Seed:         o.Seed,
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "\repoch %d/%d  train loss %.4f  test loss %.4f  test accuracy %.2f%%  %.1f ms/step  comm %.1fs\n",
			r.Epoch, o.Epochs, r.TrainLoss, r.TestLoss, 100*r.TestAccuracy, 1e3*r.StepS, r.CommS)
	}
	if t.ckPath != "" && (o.Rank == 0 || o.PerRankCheckpoint) {
		if err := t.checkpoint(epoch); err != nil {
			return EpochResult{}, err
		}
	}
	return r, nil
}

// trainStep computes the gradients of step s's batch, allreduces them and
// applies the average, adding its times and loss to c.
func (t *trainer) trainStep(ctx context.Context, s int, c *epochClock) error {
	o, tr := t.o, t.o.Train
	tr.Gather(t.batches.Indices(s), t.x, t.y)
	xt, err := nn.Float32Tensor(t.x, int64(o.Batch), int64(tr.H), int64(tr.W), int64(tr.C))
	if err != nil {
		return err
	}
	yt, err := nn.Float32Tensor(t.y, int64(o.Batch), int64(tr.Classes))
	if err != nil {
		return err
	}
	tc := time.Now()
	loss, bufs, err := t.p.Gradients(xt, yt)
	if err != nil {
		return fmt.Errorf("train: step %d: %w", t.step, err)
	}
	tm := time.Now()
	c.compute += tm.Sub(tc)
	for i := range bufs {
		if err := t.be.AllReduceFloat32(ctx, bufs[i]); err != nil {
			return fmt.Errorf("train: allreduce of bucket %d at step %d: %w", i, t.step, err)
		}
	}
	ta := time.Now()
	c.comm += ta.Sub(tm)
	t.step++
	if err := t.p.Apply(bufs, t.step); err != nil {
		return fmt.Errorf("train: update %d: %w", t.step, err)
	}
	c.compute += time.Since(ta)
	c.lossSum += float64(loss)
	return nil
}

// evalWithin evaluates after done steps of the epoch and hands the result
// to OnEval; its time goes to c.evalTime.
func (t *trainer) evalWithin(ctx context.Context, epoch, done int, c *epochClock) error {
	o := t.o
	te := time.Now()
	trainLoss, testLoss, testAcc, err := evaluateAll(ctx, t.p, t.be, o.Workers, t.testShard, c.lossSum, done)
	if err != nil {
		return err
	}
	c.evalTime += time.Since(te)
	if o.OnEval != nil {
		o.OnEval(EvalResult{Kind: "eval", Epoch: epoch + 1, Step: done, Steps: t.steps,
			Progress: float64(epoch) + float64(done)/float64(t.steps), TrainLoss: trainLoss, TestLoss: testLoss,
			TestAccuracy: testAcc, ElapsedS: time.Since(c.t0).Seconds()})
	}
	return nil
}

// showStep writes the status line after step s.
func (t *trainer) showStep(epoch, s int, c *epochClock) {
	o, steps := t.o, t.steps
	el := time.Since(c.t0)
	// The steps left at this epoch's pace; evaluation is extra.
	left := el / time.Duration(s+1) * time.Duration(steps-s-1+(o.Epochs-epoch-1)*steps)
	fmt.Fprintf(o.Progress, "\repoch %d/%d  step %4d/%d  loss %.4f  %6.1f ms/step  comm %4.1f%%  about %v left  ",
		epoch+1, o.Epochs, s+1, steps, c.lossSum/float64(s+1),
		1e3*el.Seconds()/float64(s+1), 100*c.comm.Seconds()/math.Max(el.Seconds(), 1e-9), left.Round(time.Second))
}

// checkpoint writes this rank's checkpoint file after epoch.
func (t *trainer) checkpoint(epoch int) error {
	vals, err := t.p.Values(nil)
	if err != nil {
		return err
	}
	return saveCheckpointFile(t.ckPath, &Checkpoint{Model: t.o.Model, Epoch: epoch, Step: t.step, Values: vals})
}

// evaluateAll evaluates the model on every rank's test shard and returns
// the mean training loss over the steps so far and the test loss and
// accuracy over the whole test set, the same on every rank.
func evaluateAll(ctx context.Context, p *nn.Program, be collective.Backend, workers int, testShard *data.Set, lossSum float64, steps int) (trainLoss, testLoss, testAcc float64, err error) {
	// Batch-norm statistics drift apart across workers (each sees its
	// own batches); average them so evaluation uses one model.
	if err := syncState(ctx, p, be, workers); err != nil {
		return 0, 0, 0, err
	}
	tl, correct, n, err := evaluate(p, testShard, 500)
	if err != nil {
		return 0, 0, 0, err
	}
	agg := []float32{float32(tl), float32(correct), float32(n), float32(lossSum), float32(steps)}
	if err := be.AllReduceFloat32(ctx, agg); err != nil {
		return 0, 0, 0, fmt.Errorf("train: allreduce of evaluation: %w", err)
	}
	// Counts travel as floats (exact below 2^24) and may come back with
	// quantisation noise from the switch: round them.
	total := math.Round(float64(agg[2]))
	return float64(agg[3]) / math.Round(float64(agg[4])), float64(agg[0]) / total, math.Round(float64(agg[1])) / total, nil
}

// syncState replaces every worker's state variables by their average.
func syncState(ctx context.Context, p *nn.Program, be collective.Backend, workers int) error {
	vars := p.G.VariablesWith(nn.State)
	if len(vars) == 0 {
		return nil
	}
	vals, err := p.Values(vars)
	if err != nil {
		return err
	}
	var flat []float32
	for _, v := range vars {
		flat = append(flat, vals[v.Name]...)
	}
	if err := be.AllReduceFloat32(ctx, flat); err != nil {
		return fmt.Errorf("train: allreduce of model state: %w", err)
	}
	off := 0
	for _, v := range vars {
		x := flat[off : off+v.Size()]
		for i := range x {
			x[i] /= float32(workers)
		}
		vals[v.Name] = x
		off += v.Size()
	}
	return p.SetValues(vals)
}

// evaluate returns the summed loss, correct count and example count of the
// inference graph over s.
func evaluate(p *nn.Program, s *data.Set, batch int) (loss, correct float64, n int, err error) {
	es := s.ExampleSize()
	for i := 0; i < s.Len(); i += batch {
		m := min(batch, s.Len()-i)
		xt, err := nn.Float32Tensor(s.Images[i*es:(i+m)*es], int64(m), int64(s.H), int64(s.W), int64(s.C))
		if err != nil {
			return 0, 0, 0, err
		}
		idx := make([]int, m)
		for k := range idx {
			idx[k] = i + k
		}
		y := make([]float32, m*s.Classes)
		for k := range idx {
			y[k*s.Classes+int(s.Labels[i+k])] = 1
		}
		yt, err := nn.Float32Tensor(y, int64(m), int64(s.Classes))
		if err != nil {
			return 0, 0, 0, err
		}
		l, c, err := p.Evaluate(xt, yt)
		if err != nil {
			return 0, 0, 0, err
		}
		loss += l
		correct += c
		n += m
	}
	return loss, correct, n, nil
}

// Checkpoint is everything needed to resume: all variables (weights,
// batch-norm state, optimizer slots) and the position in training.
type Checkpoint struct {
	Model  string
	Epoch  int // last completed epoch, 0-based
	Step   int // updates applied so far
	Values map[string][]float32
}

const checkpointFile = "checkpoint.gob"

// RankCheckpointFile is rank's own checkpoint file in dir, where every rank
// keeps one (Options.PerRankCheckpoint).
func RankCheckpointFile(dir string, rank int) string {
	return filepath.Join(dir, fmt.Sprintf("checkpoint-rank%d.gob", rank))
}

// checkpointPath is the file this rank resumes from and writes; empty
// without a CheckpointDir.
func (o *Options) checkpointPath() string {
	switch {
	case o.CheckpointDir == "":
		return ""
	case o.PerRankCheckpoint:
		return RankCheckpointFile(o.CheckpointDir, o.Rank)
	}
	return filepath.Join(o.CheckpointDir, checkpointFile)
}

// SaveCheckpoint writes dir's shared checkpoint (the one rank 0 writes).
func SaveCheckpoint(dir string, ck *Checkpoint) error {
	return saveCheckpointFile(filepath.Join(dir, checkpointFile), ck)
}

// saveCheckpointFile writes atomically (temp file + rename) so a crash
// never leaves a torn checkpoint.
func saveCheckpointFile(path string, ck *Checkpoint) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".checkpoint-*")
	if err != nil {
		return err
	}
	if err := gob.NewEncoder(f).Encode(ck); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("train: writing checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

// LoadCheckpoint reads dir's shared checkpoint; fs.ErrNotExist when there
// is none.
func LoadCheckpoint(dir string) (*Checkpoint, error) {
	return LoadCheckpointFile(filepath.Join(dir, checkpointFile))
}

// LoadCheckpointFile reads one checkpoint file; fs.ErrNotExist when there
// is none.
func LoadCheckpointFile(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ck Checkpoint
	if err := gob.NewDecoder(f).Decode(&ck); err != nil {
		return nil, fmt.Errorf("train: reading checkpoint %s: %w (remove it, or start without --resume)", path, err)
	}
	return &ck, nil
}

// Fingerprint is a short digest of the checkpoint's variables: ranks that
// resume the same model from their own files get the same string.
func (ck *Checkpoint) Fingerprint() string {
	h := sha256.New()
	var buf []byte
	for _, name := range slices.Sorted(maps.Keys(ck.Values)) {
		v := ck.Values[name]
		buf = binary.LittleEndian.AppendUint64(buf[:0], uint64(len(name)))
		buf = append(buf, name...)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(len(v)))
		for _, x := range v {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
