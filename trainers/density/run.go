package density

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/nn"
	"github.com/switchml/switchml-go/trainers/profile"
	"github.com/switchml/switchml-go/trainers/train"
)

// EmbeddingUnits names, for the models whose gradient holds embedding
// tables, the top-level layer that owns the tables (the unit of the
// model's profile). Most of the gradient of ncf, deeplight and lstm is
// theirs; BERT's word, position and token-type tables are a fifth of its.
var EmbeddingUnits = map[string]string{
	"ncf":       "embeddings", // user and item tables of GMF and MLP
	"deeplight": "features",   // embeddings, first-order weights, bias, FwFM pair weights
	"lstm":      "embedding",  // the word embedding
	"bert":      "embeddings", // word, position and token-type tables and their LayerNorm
}

// embeddingModels lists EmbeddingUnits' models for messages.
func embeddingModels() string {
	names := slices.Sorted(maps.Keys(EmbeddingUnits))
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Input says what the batches of the benchmark models are: the harness
// has no data set for them and trains them on Bench.Synthetic.
const Input = "synthetic (models.Bench.Synthetic): ids drawn uniformly from each input position's range, random one-hot labels; a new batch per rank and step"

// Options configure Run.
type Options struct {
	Models []string
	// Workers is the number of simulated workers R (batches per step);
	// Unions are the worker counts whose union density is reported (the
	// first n workers of each step), each at most Workers.
	Workers int
	Unions  []int
	// BlockSizes are the values per packet to measure (256, 64).
	BlockSizes []int
	// Warmup steps are trained but not measured; Steps are measured.
	// StepsFor overrides Steps per model.
	Warmup, Steps int
	StepsFor      map[string]int
	// BucketElems is the harness's gradient bucket (train --bucket-elems).
	BucketElems int
	Optimizer   string
	LR          float32
	Seed        int64
	Threads     int
	// Profiles is the directory of the model profiles (batch, units).
	Profiles string
	// DumpDir, when set, receives the gradients of every rank at the
	// first measured step, DumpDir/<model>/rank<r>.f32 and meta.json.
	DumpDir string
	Commit  string
	// Progress gets a line per step (may be nil).
	Progress io.Writer
	// OnStep is called with every measured step (may be nil).
	OnStep func(*StepRecord)
}

// StepDensity is one step's shares at one block size: each worker's, and
// the union of the first n workers by n.
type StepDensity struct {
	Workers []Share          `json:"workers"`
	Union   map[string]Share `json:"union"`
}

// StepRecord is one measured step of one model.
type StepRecord struct {
	Kind      string                 `json:"kind"` // "step"
	Model     string                 `json:"model"`
	Step      int                    `json:"step"`
	Loss      float64                `json:"loss"`
	Seconds   float64                `json:"seconds"`
	Densities map[string]StepDensity `json:"densities"`
}

// Stat is the mean, minimum and maximum of a figure.
type Stat struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	N    int     `json:"n"`
}

func (s *Stat) add(v float64) {
	if s.N == 0 || v < s.Min {
		s.Min = v
	}
	if s.N == 0 || v > s.Max {
		s.Max = v
	}
	s.Mean = (s.Mean*float64(s.N) + v) / float64(s.N+1)
	s.N++
}

// ShareStat gathers Shares.
type ShareStat struct {
	All       Stat `json:"all"`
	Embedding Stat `json:"embedding"`
	Rest      Stat `json:"rest"`
}

func (s *ShareStat) add(v Share) {
	s.All.add(v.All)
	s.Embedding.add(v.Embedding)
	s.Rest.add(v.Rest)
}

// BlockStats is a model's result at one block size: per worker (over every
// worker of every measured step) and per union (over the steps).
type BlockStats struct {
	Blocks          int                   `json:"blocks"`
	EmbeddingBlocks int                   `json:"embedding_blocks"`
	Worker          ShareStat             `json:"worker"`
	Union           map[string]*ShareStat `json:"union"`
}

// ModelResult is one model's summary.
type ModelResult struct {
	Kind              string                 `json:"kind"` // "model"
	Model             string                 `json:"model"`
	Config            string                 `json:"config"`
	Input             string                 `json:"input"`
	Batch             int                    `json:"batch"`
	Workers           int                    `json:"workers"`
	Warmup            int                    `json:"warmup"`
	Steps             int                    `json:"steps"`
	Elements          int                    `json:"elements"`
	Buckets           int                    `json:"buckets"`
	EmbeddingUnit     string                 `json:"embedding_unit"`
	EmbeddingElements int                    `json:"embedding_elements"`
	EmbeddingShare    float64                `json:"embedding_share"`
	Blocks            map[string]*BlockStats `json:"blocks"`
	Seconds           float64                `json:"seconds"`
	Dump              string                 `json:"dump,omitempty"`
}

// Run trains each model for Warmup+Steps real steps: at every step each of
// the R workers computes its gradient from the same weights on its own
// batch, the step's gradients are measured, and their average updates the
// weights (data-parallel training, the sum taken here in float32).
func Run(ctx context.Context, o Options) ([]*ModelResult, error) {
	if o.Workers < 1 {
		return nil, fmt.Errorf("density: %d workers: want at least 1", o.Workers)
	}
	for _, n := range o.Unions {
		if n < 1 || n > o.Workers {
			return nil, fmt.Errorf("density: union of %d workers: want 1..%d (the workers per step)", n, o.Workers)
		}
	}
	if len(o.BlockSizes) == 0 {
		return nil, fmt.Errorf("density: no block size to measure: give at least one (256, 64)")
	}
	// Refuse an unknown model before the others have run for minutes.
	for _, m := range o.Models {
		if _, ok := EmbeddingUnits[m]; !ok || models.LookupBench(m) == nil {
			return nil, fmt.Errorf("density: model %q: want %s", m, embeddingModels())
		}
	}
	var out []*ModelResult
	for _, m := range o.Models {
		r, err := runModel(ctx, o, m)
		if err != nil {
			return out, fmt.Errorf("density: %s: %w", m, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// modelRun is the measurement of one model: its program, the block
// layouts at each block size, the result so far and the gradient sum of
// the step.
type modelRun struct {
	o       Options
	name    string
	b       *models.Bench
	batch   int
	steps   int
	p       *nn.Program
	layouts []*Layout
	res     *ModelResult
	sum     [][]float32
	dumpDir string
}

func runModel(ctx context.Context, o Options, name string) (*ModelResult, error) {
	start := time.Now()
	m, err := newModelRun(o, name)
	if err != nil {
		return nil, err
	}
	defer m.p.Close()
	for s := 0; s < o.Warmup+m.steps; s++ {
		if err := m.step(ctx, s); err != nil {
			return nil, err
		}
	}
	m.res.Seconds = time.Since(start).Seconds()
	return m.res, nil
}

// newModelRun builds the model's program and its block layouts.
func newModelRun(o Options, name string) (*modelRun, error) {
	b := models.LookupBench(name)
	if b == nil {
		return nil, fmt.Errorf("not a benchmark model (want %s)", embeddingModels())
	}
	unit, ok := EmbeddingUnits[name]
	if !ok {
		return nil, fmt.Errorf("no embedding unit known for it (want %s)", embeddingModels())
	}
	prof, err := profile.Load(filepath.Join(o.Profiles, name+".json"))
	if err != nil {
		return nil, fmt.Errorf("reading its profile for the batch size: %w", err)
	}
	m := &modelRun{o: o, name: name, b: b, batch: prof.Batch, steps: o.Steps, dumpDir: filepath.Join(o.DumpDir, name)}
	if s, ok := o.StepsFor[name]; ok {
		m.steps = s
	}
	opt, err := train.NewOptimizer(o.Optimizer, o.LR)
	if err != nil {
		return nil, err
	}
	m.p, err = nn.Build(nn.Spec{
		Seed: o.Seed, OpSeed: o.Seed*7919 + 1,
		InputShape: b.InputShape, InputType: b.InputType, Classes: b.Classes,
		Model:     func(g *nn.Graph) nn.Layer { return b.Build(g) },
		Optimizer: opt, BucketElems: o.BucketElems, Workers: o.Workers,
		IntraOpThreads: o.Threads, InterOpThreads: o.Threads,
	})
	if err != nil {
		return nil, err
	}
	if err := m.layout(unit); err != nil {
		m.p.Close()
		return nil, err
	}
	m.sum = make([][]float32, len(m.p.Buckets))
	for i, bk := range m.p.Buckets {
		m.sum[i] = make([]float32, bk.Size)
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "%s: %d values in %d buckets, embedding unit %q %.2f%%, batch %d, %d workers, %d+%d steps\n",
			name, m.res.Elements, m.res.Buckets, unit, 100*m.res.EmbeddingShare, m.batch, o.Workers, o.Warmup, m.steps)
	}
	return m, nil
}

// layout cuts the program's buckets into blocks at each block size and
// starts the result.
func (m *modelRun) layout(unit string) error {
	buckets := make([][]Var, len(m.p.Buckets))
	for i, bk := range m.p.Buckets {
		for _, v := range bk.Vars {
			buckets[i] = append(buckets[i], Var{Name: v.Name, Size: v.Size()})
		}
	}
	m.layouts = make([]*Layout, len(m.o.BlockSizes))
	for i, k := range m.o.BlockSizes {
		var err error
		if m.layouts[i], err = NewLayout(k, buckets, UnitPrefix(unit)); err != nil {
			return err
		}
	}
	lay0 := m.layouts[0]
	m.res = &ModelResult{Kind: "model", Model: m.name, Config: m.b.Config, Input: Input, Batch: m.batch,
		Workers: m.o.Workers, Warmup: m.o.Warmup, Steps: m.steps, Elements: lay0.Elements, Buckets: len(lay0.Buckets),
		EmbeddingUnit: unit, EmbeddingElements: lay0.EmbeddingElements,
		EmbeddingShare: ratio(lay0.EmbeddingElements, lay0.Elements), Blocks: map[string]*BlockStats{}}
	for _, l := range m.layouts {
		bs := &BlockStats{Blocks: l.Blocks(), Union: map[string]*ShareStat{}}
		for _, e := range l.Embedding {
			if e {
				bs.EmbeddingBlocks++
			}
		}
		m.res.Blocks[strconv.Itoa(l.K)] = bs
	}
	return nil
}

// stepState is what one step gathers: its record and, per layout, the
// union masks of the first n workers (one per Options.Unions entry).
type stepState struct {
	rec      *StepRecord
	unions   [][][]bool
	measured bool
	dump     bool
	loss     float64
}

// step runs step s: every worker's gradient on its own batch, measured
// (after the warm-up) and dumped (the first measured step), then the
// update with their average.
func (m *modelRun) step(ctx context.Context, s int) error {
	t0 := time.Now()
	st := &stepState{measured: s >= m.o.Warmup, rec: &StepRecord{Kind: "step", Model: m.name, Step: s, Densities: map[string]StepDensity{}}}
	st.dump = st.measured && s == m.o.Warmup && m.o.DumpDir != ""
	if st.dump {
		if err := os.MkdirAll(m.dumpDir, 0o755); err != nil {
			return fmt.Errorf("creating the dump directory: %w", err)
		}
	}
	st.unions = make([][][]bool, len(m.layouts))
	for li, l := range m.layouts {
		st.unions[li] = make([][]bool, len(m.o.Unions))
		for j := range m.o.Unions {
			st.unions[li][j] = make([]bool, l.Blocks())
		}
		st.rec.Densities[strconv.Itoa(l.K)] = StepDensity{Union: map[string]Share{}}
	}
	for i := range m.sum {
		clear(m.sum[i])
	}
	for r := 0; r < m.o.Workers; r++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.worker(s, r, st); err != nil {
			return err
		}
	}
	if math.IsNaN(st.loss) || math.IsInf(st.loss, 0) {
		return fmt.Errorf("step %d: loss %v: a diverged model's densities mean nothing", s, st.loss)
	}
	if err := m.p.Apply(m.sum, s+1); err != nil {
		return fmt.Errorf("step %d: update: %w", s, err)
	}
	st.rec.Loss, st.rec.Seconds = st.loss, time.Since(t0).Seconds()
	if st.measured {
		m.record(st)
	}
	if st.dump {
		if err := m.writeMeta(s, st); err != nil {
			return err
		}
	}
	m.progress(s, st)
	return nil
}

// worker computes worker r's gradient of step s, adds it to the sum and,
// in a measured step, marks its blocks (and dumps it).
func (m *modelRun) worker(s, r int, st *stepState) error {
	rng := rand.New(rand.NewPCG(uint64(m.o.Seed), uint64(s*m.o.Workers+r+1)))
	x, y, err := m.b.Synthetic(rng, m.batch)
	if err != nil {
		return err
	}
	l, bufs, err := m.p.Gradients(x, y)
	if err != nil {
		return fmt.Errorf("step %d, worker %d: %w", s, r, err)
	}
	st.loss += float64(l) / float64(m.o.Workers)
	for i, buf := range bufs {
		for j, v := range buf {
			m.sum[i][j] += v
		}
	}
	if !st.measured {
		return nil
	}
	for li, lay := range m.layouts {
		mask := make([]bool, lay.Blocks())
		if err := lay.Mark(bufs, mask); err != nil {
			return err
		}
		d := st.rec.Densities[strconv.Itoa(lay.K)]
		d.Workers = append(d.Workers, lay.Count(mask))
		st.rec.Densities[strconv.Itoa(lay.K)] = d
		for j, n := range m.o.Unions {
			if r < n {
				orInto(st.unions[li][j], mask)
			}
		}
	}
	if st.dump {
		return WriteRank(m.dumpDir, r, bufs)
	}
	return nil
}

// record adds a measured step's densities to the result.
func (m *modelRun) record(st *stepState) {
	for li, lay := range m.layouts {
		key := strconv.Itoa(lay.K)
		bs := m.res.Blocks[key]
		for _, w := range st.rec.Densities[key].Workers {
			bs.Worker.add(w)
		}
		for j, n := range m.o.Unions {
			u := lay.Count(st.unions[li][j])
			nk := strconv.Itoa(n)
			st.rec.Densities[key].Union[nk] = u
			if bs.Union[nk] == nil {
				bs.Union[nk] = &ShareStat{}
			}
			bs.Union[nk].add(u)
		}
	}
	if m.o.OnStep != nil {
		m.o.OnStep(st.rec)
	}
}

// writeMeta describes the dumped step.
func (m *modelRun) writeMeta(s int, st *stepState) error {
	m.res.Dump = m.dumpDir
	files := make([]string, m.o.Workers)
	for r := range files {
		files[r] = RankFile(r)
	}
	lay0 := m.layouts[0]
	return WriteMeta(m.dumpDir, &Meta{Model: m.name, Elements: lay0.Elements, Buckets: lay0.Buckets,
		Ranks: m.o.Workers, Files: files, Format: "raw little-endian float32, the buckets one after the other",
		Step: s, Warmup: m.o.Warmup, Batch: m.batch, Input: Input, Seed: m.o.Seed,
		Densities: st.rec.Densities, Commit: m.o.Commit})
}

// progress reports step s.
func (m *modelRun) progress(s int, st *stepState) {
	if m.o.Progress == nil {
		return
	}
	what := "warm-up"
	if st.measured {
		k := strconv.Itoa(m.layouts[0].K)
		d := st.rec.Densities[k]
		var w float64
		for _, x := range d.Workers {
			w += x.All / float64(len(d.Workers))
		}
		what = fmt.Sprintf("density at %s: %.4f per worker", k, w)
		for _, n := range m.o.Unions {
			what += fmt.Sprintf(", %.4f union of %d", d.Union[strconv.Itoa(n)].All, n)
		}
		if st.dump {
			what += ", dumped to " + m.dumpDir
		}
	}
	fmt.Fprintf(m.o.Progress, "%s step %d/%d: %.1fs, loss %.4f, %s\n", m.name, s+1, m.o.Warmup+m.steps, st.rec.Seconds, st.loss, what)
}

func orInto(dst, src []bool) {
	for i, v := range src {
		dst[i] = dst[i] || v
	}
}
