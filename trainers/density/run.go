package density

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/nn"
	"github.com/switchml/switchml-go/trainers/profile"
	"github.com/switchml/switchml-go/trainers/train"
)

// EmbeddingUnits names, for the models whose gradient is mostly embedding
// tables, the top-level layer that owns the tables (the unit of the
// model's profile).
var EmbeddingUnits = map[string]string{
	"ncf":       "embeddings", // user and item tables of GMF and MLP
	"deeplight": "features",   // embeddings, first-order weights, bias, FwFM pair weights
	"lstm":      "embedding",  // the word embedding
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
			return nil, fmt.Errorf("density: model %q: want ncf, deeplight or lstm (the benchmark models whose embedding unit is known)", m)
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

func runModel(ctx context.Context, o Options, name string) (*ModelResult, error) {
	b := models.LookupBench(name)
	if b == nil {
		return nil, fmt.Errorf("not a benchmark model (want ncf, deeplight or lstm)")
	}
	unit, ok := EmbeddingUnits[name]
	if !ok {
		return nil, fmt.Errorf("no embedding unit known for it (want ncf, deeplight or lstm)")
	}
	prof, err := profile.Load(filepath.Join(o.Profiles, name+".json"))
	if err != nil {
		return nil, fmt.Errorf("reading its profile for the batch size: %w", err)
	}
	steps := o.Steps
	if s, ok := o.StepsFor[name]; ok {
		steps = s
	}
	opt, err := train.NewOptimizer(o.Optimizer, o.LR)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	p, err := nn.Build(nn.Spec{
		Seed: o.Seed, OpSeed: o.Seed*7919 + 1,
		InputShape: b.InputShape, InputType: b.InputType, Classes: b.Classes,
		Model:     func(g *nn.Graph) nn.Layer { return b.Build(g) },
		Optimizer: opt, BucketElems: o.BucketElems, Workers: o.Workers,
		IntraOpThreads: o.Threads, InterOpThreads: o.Threads,
	})
	if err != nil {
		return nil, err
	}
	defer p.Close()

	buckets := make([][]Var, len(p.Buckets))
	for i, bk := range p.Buckets {
		for _, v := range bk.Vars {
			buckets[i] = append(buckets[i], Var{Name: v.Name, Size: v.Size()})
		}
	}
	layouts := make([]*Layout, len(o.BlockSizes))
	for i, k := range o.BlockSizes {
		if layouts[i], err = NewLayout(k, buckets, UnitPrefix(unit)); err != nil {
			return nil, err
		}
	}
	lay0 := layouts[0]
	res := &ModelResult{Kind: "model", Model: name, Config: b.Config, Input: Input, Batch: prof.Batch,
		Workers: o.Workers, Warmup: o.Warmup, Steps: steps, Elements: lay0.Elements, Buckets: len(lay0.Buckets),
		EmbeddingUnit: unit, EmbeddingElements: lay0.EmbeddingElements,
		EmbeddingShare: ratio(lay0.EmbeddingElements, lay0.Elements), Blocks: map[string]*BlockStats{}}
	for _, l := range layouts {
		bs := &BlockStats{Blocks: l.Blocks(), Union: map[string]*ShareStat{}}
		for _, e := range l.Embedding {
			if e {
				bs.EmbeddingBlocks++
			}
		}
		res.Blocks[strconv.Itoa(l.K)] = bs
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "%s: %d values in %d buckets, embedding unit %q %.2f%%, batch %d, %d workers, %d+%d steps\n",
			name, res.Elements, res.Buckets, unit, 100*res.EmbeddingShare, prof.Batch, o.Workers, o.Warmup, steps)
	}

	sum := make([][]float32, len(p.Buckets))
	for i, bk := range p.Buckets {
		sum[i] = make([]float32, bk.Size)
	}
	for s := 0; s < o.Warmup+steps; s++ {
		t0 := time.Now()
		measured := s >= o.Warmup
		dump := measured && s == o.Warmup && o.DumpDir != ""
		dumpDir := filepath.Join(o.DumpDir, name)
		if dump {
			if err := os.MkdirAll(dumpDir, 0o755); err != nil {
				return nil, fmt.Errorf("creating the dump directory: %w", err)
			}
		}
		// unions[k][j] is the mask of the first n = o.Unions[j] workers.
		unions := make([][][]bool, len(layouts))
		rec := &StepRecord{Kind: "step", Model: name, Step: s, Densities: map[string]StepDensity{}}
		for li, l := range layouts {
			unions[li] = make([][]bool, len(o.Unions))
			for j := range o.Unions {
				unions[li][j] = make([]bool, l.Blocks())
			}
			rec.Densities[strconv.Itoa(l.K)] = StepDensity{Union: map[string]Share{}}
		}
		for i := range sum {
			clear(sum[i])
		}
		var loss float64
		for r := 0; r < o.Workers; r++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rng := rand.New(rand.NewPCG(uint64(o.Seed), uint64(s*o.Workers+r+1)))
			x, y, err := b.Synthetic(rng, prof.Batch)
			if err != nil {
				return nil, err
			}
			l, bufs, err := p.Gradients(x, y)
			if err != nil {
				return nil, fmt.Errorf("step %d, worker %d: %w", s, r, err)
			}
			loss += float64(l) / float64(o.Workers)
			for i, buf := range bufs {
				for j, v := range buf {
					sum[i][j] += v
				}
			}
			if !measured {
				continue
			}
			for li, lay := range layouts {
				mask := make([]bool, lay.Blocks())
				if err := lay.Mark(bufs, mask); err != nil {
					return nil, err
				}
				d := rec.Densities[strconv.Itoa(lay.K)]
				d.Workers = append(d.Workers, lay.Count(mask))
				rec.Densities[strconv.Itoa(lay.K)] = d
				for j, n := range o.Unions {
					if r < n {
						orInto(unions[li][j], mask)
					}
				}
			}
			if dump {
				if err := WriteRank(dumpDir, r, bufs); err != nil {
					return nil, err
				}
			}
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return nil, fmt.Errorf("step %d: the loss is %v; the densities of a diverged model mean nothing", s, loss)
		}
		if err := p.Apply(sum, s+1); err != nil {
			return nil, fmt.Errorf("step %d: update: %w", s, err)
		}
		rec.Loss, rec.Seconds = loss, time.Since(t0).Seconds()
		if measured {
			for li, lay := range layouts {
				key := strconv.Itoa(lay.K)
				bs := res.Blocks[key]
				for _, w := range rec.Densities[key].Workers {
					bs.Worker.add(w)
				}
				for j, n := range o.Unions {
					u := lay.Count(unions[li][j])
					rec.Densities[key].Union[strconv.Itoa(n)] = u
					nk := strconv.Itoa(n)
					if bs.Union[nk] == nil {
						bs.Union[nk] = &ShareStat{}
					}
					bs.Union[nk].add(u)
				}
			}
			if o.OnStep != nil {
				o.OnStep(rec)
			}
		}
		if dump {
			res.Dump = dumpDir
			files := make([]string, o.Workers)
			for r := range files {
				files[r] = RankFile(r)
			}
			if err := WriteMeta(dumpDir, &Meta{Model: name, Elements: lay0.Elements, Buckets: lay0.Buckets,
				Ranks: o.Workers, Files: files, Format: "raw little-endian float32, the buckets one after the other",
				Step: s, Warmup: o.Warmup, Batch: prof.Batch, Input: Input, Seed: o.Seed,
				Densities: rec.Densities, Commit: o.Commit}); err != nil {
				return nil, err
			}
		}
		if o.Progress != nil {
			what := "warm-up"
			if measured {
				k := strconv.Itoa(layouts[0].K)
				d := rec.Densities[k]
				var w float64
				for _, x := range d.Workers {
					w += x.All / float64(len(d.Workers))
				}
				what = fmt.Sprintf("density at %s: %.4f per worker", k, w)
				for _, n := range o.Unions {
					what += fmt.Sprintf(", %.4f union of %d", d.Union[strconv.Itoa(n)].All, n)
				}
				if dump {
					what += ", dumped to " + dumpDir
				}
			}
			fmt.Fprintf(o.Progress, "%s step %d/%d: %.1fs, loss %.4f, %s\n", name, s+1, o.Warmup+steps, rec.Seconds, loss, what)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

func orInto(dst, src []bool) {
	for i, v := range src {
		dst[i] = dst[i] || v
	}
}
