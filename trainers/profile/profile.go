// Package profile measures a model's per-layer forward and backward compute
// time once with TensorFlow, saves it as JSON, and replays it: a replayed
// step sleeps for the compute and does the real allreduce of the model's
// gradients, bucket by bucket in the order backpropagation releases them,
// each bucket's allreduce starting as soon as its gradients exist (the
// overlap of data-parallel frameworks such as PyTorch DDP).
package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	tf "github.com/wamuir/graft/tensorflow"

	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/nn"
)

// Unit is one profiled layer: a top-level layer of the model with
// trainable parameters, plus the parameter-free layers after it (pooling,
// activations), whose time is counted with it.
type Unit struct {
	Name       string   `json:"name"`
	Layers     []string `json:"layers,omitempty"`
	Parameters int64    `json:"parameters"`
	// ForwardS is the unit's share of the forward pass; BackwardS the time
	// from the gradients of the units above it to its own gradients.
	ForwardS  float64 `json:"forward_s"`
	BackwardS float64 `json:"backward_s"`
}

// Profile is a model's compute time per step on one machine.
type Profile struct {
	Model      string `json:"model"`
	Config     string `json:"config"`
	Parameters int64  `json:"parameters"`
	Batch      int    `json:"batch"`
	// Threads is TensorFlow's intra-op pool size; CPUs is what the
	// machine had.
	Threads int    `json:"threads"`
	CPUs    int    `json:"cpus"`
	CPU     string `json:"cpu,omitempty"`
	Reps    int    `json:"reps"`
	Date    string `json:"date"`
	// Units in forward order.
	Units []Unit `json:"units"`
	// ForwardS includes the loss; BackwardS is the sum over units;
	// UpdateS is the optimizer update after the allreduce.
	ForwardS  float64 `json:"forward_s"`
	BackwardS float64 `json:"backward_s"`
	UpdateS   float64 `json:"update_s"`
	// StepS is one measured training step's compute (forward, backward
	// and fetching the fused gradients), for comparison with the sum.
	StepS float64 `json:"step_s"`
	// DerivedFrom names the measured profile a derived one (Derive) was
	// scaled from, and Scaling says how; both are empty for a measured
	// profile.
	DerivedFrom string `json:"derived_from,omitempty"`
	Scaling     string `json:"scaling,omitempty"`
}

// ComputeS is the compute of one step: forward, backward and update.
func (p *Profile) ComputeS() float64 { return p.ForwardS + p.BackwardS + p.UpdateS }

// Options of Measure.
type Options struct {
	Batch   int // examples per step
	Reps    int // timed repetitions of each measurement (the minimum is kept)
	Threads int // TensorFlow intra-op threads (0 = all CPUs)
	// Progress receives a line per measurement (may be nil).
	Progress func(string)
}

// Measure profiles a benchmark model. Forward time of unit k is the
// difference between running the training pass up to unit k and up to
// unit k-1; backward time of unit k is the difference between computing
// the gradients of units k..L and of units k+1..L (the top one against the
// loss). Runs name the ops as targets, so no tensor is copied out.
func Measure(ctx context.Context, b *models.Bench, o Options) (*Profile, error) {
	if o.Batch <= 0 {
		o.Batch = 1
	}
	if o.Reps <= 0 {
		o.Reps = 3
	}
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	say := func(format string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, a...))
		}
	}
	say("%s: building the graph", b.Name)
	prog, err := nn.Build(nn.Spec{
		Seed: 1, InputShape: b.InputShape, InputType: b.InputType, Classes: b.Classes,
		Model:     func(g *nn.Graph) nn.Layer { return b.Build(g) },
		Optimizer: &nn.Momentum{LR: 0.01, Momentum: 0.9}, BucketElems: 1 << 22,
		IntraOpThreads: o.Threads, InterOpThreads: 1,
	})
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	x, y, err := b.Synthetic(rand.New(rand.NewPCG(1, 2)), o.Batch)
	if err != nil {
		return nil, err
	}
	feeds := map[tf.Output]*tf.Tensor{prog.X: x, prog.Labels: y}
	timeRun := func(targets []*tf.Operation) (float64, error) {
		best := 0.0
		for r := 0; r < o.Reps; r++ {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			t0 := time.Now()
			if _, err := prog.Sess.Run(feeds, nil, targets); err != nil {
				return 0, err
			}
			if d := time.Since(t0).Seconds(); r == 0 || d < best {
				best = d
			}
		}
		return best, nil
	}

	// Group the top-level layers into units.
	q := b.Build(nn.NewGraph(1)) // names and order only
	trainable := prog.G.VariablesWith(nn.Trainable)
	owner := make([]int, len(trainable)) // variable -> layer index
	layerParams := make([]int64, len(q))
	for i, v := range trainable {
		owner[i] = -1
		for k, l := range q {
			if strings.HasPrefix(v.Name, nn.NameOf(l)+"/") {
				owner[i] = k
				layerParams[k] += int64(v.Size())
				break
			}
		}
		if owner[i] < 0 {
			return nil, fmt.Errorf("profile: variable %s belongs to no top-level layer", v.Name)
		}
	}
	type group struct {
		first, last int // layer indices
		vars        []int
	}
	var groups []group
	for k := range q {
		if layerParams[k] > 0 || len(groups) == 0 {
			groups = append(groups, group{first: k, last: k})
		} else {
			groups[len(groups)-1].last = k
		}
	}
	for i, k := range owner {
		for gi := range groups {
			if k >= groups[gi].first && k <= groups[gi].last {
				groups[gi].vars = append(groups[gi].vars, i)
			}
		}
	}

	p := &Profile{Model: b.Name, Config: b.Config, Parameters: nn.ParameterCount(prog.G), Batch: o.Batch,
		Threads: o.Threads, CPUs: runtime.NumCPU(), CPU: cpuModel(), Reps: o.Reps, Date: time.Now().UTC().Format(time.RFC3339)}

	say("%s: warm-up step", b.Name)
	t0 := time.Now()
	if _, _, err := prog.Gradients(x, y); err != nil {
		return nil, err
	}
	p.StepS = time.Since(t0).Seconds()
	say("%s: one step takes %.2fs; measuring %d units", b.Name, p.StepS, len(groups))

	// Forward, cumulative.
	fwd := make([]float64, len(groups)+1)
	for gi, gr := range groups {
		if fwd[gi+1], err = timeRun([]*tf.Operation{prog.Units[gr.last].Op}); err != nil {
			return nil, err
		}
		say("%s: forward to %s %.3fs", b.Name, nn.NameOf(q[gr.last]), fwd[gi+1])
	}
	loss, err := timeRun([]*tf.Operation{prog.Loss.Op})
	if err != nil {
		return nil, err
	}
	// Backward, cumulative from the top.
	bwd := make([]float64, len(groups)+1)
	bwd[len(groups)] = loss
	var targets []*tf.Operation
	for gi := len(groups) - 1; gi >= 0; gi-- {
		for _, i := range groups[gi].vars {
			targets = append(targets, prog.VarGrads[i].Op)
		}
		if bwd[gi], err = timeRun(targets); err != nil {
			return nil, err
		}
		say("%s: gradients down to %s %.3fs", b.Name, nn.NameOf(q[groups[gi].first]), bwd[gi])
	}
	// Measurements are noisy: make the cumulative times monotonic.
	for i := 1; i < len(fwd); i++ {
		fwd[i] = max(fwd[i], fwd[i-1])
	}
	loss = max(loss, fwd[len(groups)])
	bwd[len(groups)] = loss
	for i := len(groups) - 1; i >= 0; i-- {
		bwd[i] = max(bwd[i], bwd[i+1])
	}
	p.ForwardS = loss
	for gi, gr := range groups {
		u := Unit{Name: nn.NameOf(q[gr.first]), ForwardS: fwd[gi+1] - fwd[gi], BackwardS: bwd[gi] - bwd[gi+1]}
		if gi == len(groups)-1 {
			u.ForwardS += loss - fwd[gi+1]
		}
		for k := gr.first; k <= gr.last; k++ {
			u.Parameters += layerParams[k]
			if k > gr.first {
				u.Layers = append(u.Layers, nn.NameOf(q[k]))
			}
		}
		p.BackwardS += u.BackwardS
		p.Units = append(p.Units, u)
	}

	// The update, with zero gradient sums.
	sums := make([][]float32, len(prog.Buckets))
	for i, bk := range prog.Buckets {
		sums[i] = make([]float32, bk.Size)
	}
	for r := 0; r < o.Reps; r++ {
		t0 := time.Now()
		if err := prog.Apply(sums, r+1); err != nil {
			return nil, err
		}
		if d := time.Since(t0).Seconds(); r == 0 || d < p.UpdateS {
			p.UpdateS = d
		}
	}
	say("%s: forward %.3fs, backward %.3fs, update %.3fs", b.Name, p.ForwardS, p.BackwardS, p.UpdateS)
	return p, nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if i := strings.IndexByte(l, ':'); i >= 0 {
				return strings.TrimSpace(l[i+1:])
			}
		}
	}
	return ""
}

// Save writes the profile as indented JSON.
func (p *Profile) Save(path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Load reads a profile.
func Load(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("profile: %s: %w", path, err)
	}
	if len(p.Units) == 0 {
		return nil, fmt.Errorf("profile: %s has no units", path)
	}
	return &p, nil
}

// Bucket is one allreduce of a replayed step.
type Bucket struct {
	Elems int `json:"elems"`
	// ReadyS is when its last gradient exists, counted from the start of
	// the backward pass.
	ReadyS float64 `json:"ready_s"`
	Units  []string
}

// Buckets groups the units' gradients, from the last unit down, into
// buckets of at least capElems values (the last one may be smaller), as
// DDP fills its buckets; capElems <= 0 makes one bucket per unit.
func (p *Profile) Buckets(capElems int) []Bucket {
	var out []Bucket
	var cur Bucket
	t := 0.0
	for i := len(p.Units) - 1; i >= 0; i-- {
		u := p.Units[i]
		t += u.BackwardS
		cur.Elems += int(u.Parameters)
		cur.ReadyS = t
		cur.Units = append(cur.Units, u.Name)
		if capElems <= 0 || cur.Elems >= capElems {
			out = append(out, cur)
			cur = Bucket{}
		}
	}
	if cur.Elems > 0 {
		out = append(out, cur)
	}
	return slices.Clip(out)
}

// Derive returns a profile of model name with the same layers as p but
// other parameter counts: sizes maps unit names to their new count (0
// drops the unit). The compute is scaled from p: a resized unit's backward
// time in proportion to its parameters (its dense gradient is built value
// by value), its forward time unchanged (an embedding lookup costs the
// same whatever the table size), the update in proportion to the total.
// It is how the paper-size models are replayed: gradient buffers of their
// real size, compute extrapolated from the measured model.
func Derive(p *Profile, name, note string, sizes map[string]int64) (*Profile, error) {
	q := *p
	q.Model, q.DerivedFrom, q.Scaling = name, p.Model, note
	q.Units, q.Parameters, q.BackwardS = nil, 0, 0
	seen := map[string]bool{}
	for _, u := range p.Units {
		if n, ok := sizes[u.Name]; ok {
			seen[u.Name] = true
			if n < 0 {
				return nil, fmt.Errorf("profile: unit %s: %d parameters", u.Name, n)
			}
			if n == 0 {
				continue
			}
			if u.Parameters == 0 {
				return nil, fmt.Errorf("profile: unit %s of %s has no parameters to scale from", u.Name, p.Model)
			}
			u.BackwardS *= float64(n) / float64(u.Parameters)
			u.Parameters = n
		}
		q.Units = append(q.Units, u)
		q.Parameters += u.Parameters
		q.BackwardS += u.BackwardS
	}
	for unit := range sizes {
		if !seen[unit] {
			return nil, fmt.Errorf("profile: %s has no unit %q", p.Model, unit)
		}
	}
	if len(q.Units) == 0 {
		return nil, fmt.Errorf("profile: %s would have no units left", name)
	}
	q.UpdateS = p.UpdateS * float64(q.Parameters) / float64(p.Parameters)
	q.StepS = 0
	return &q, nil
}
