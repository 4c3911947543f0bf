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
	o = o.withDefaults()
	m := &measurer{model: b.Name, reps: o.Reps, progress: o.Progress}
	m.say("%s: building the graph", b.Name)
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
	m.prog = prog
	x, y, err := b.Synthetic(rand.New(rand.NewPCG(1, 2)), o.Batch)
	if err != nil {
		return nil, err
	}
	m.feeds = map[tf.Output]*tf.Tensor{prog.X: x, prog.Labels: y}

	m.layers = b.Build(nn.NewGraph(1)) // names and order only
	if err := m.groupUnits(); err != nil {
		return nil, err
	}

	p := &Profile{Model: b.Name, Config: b.Config, Parameters: nn.ParameterCount(prog.G), Batch: o.Batch,
		Threads: o.Threads, CPUs: runtime.NumCPU(), CPU: cpuModel(), Reps: o.Reps, Date: time.Now().UTC().Format(time.RFC3339)}

	m.say("%s: warm-up step", b.Name)
	t0 := time.Now()
	if _, _, err := prog.Gradients(x, y); err != nil {
		return nil, err
	}
	p.StepS = time.Since(t0).Seconds()
	m.say("%s: one step takes %.2fs; measuring %d units", b.Name, p.StepS, len(m.groups))

	fwd, loss, err := m.forward(ctx)
	if err != nil {
		return nil, err
	}
	bwd, err := m.backward(ctx)
	if err != nil {
		return nil, err
	}
	loss = monotonic(fwd, bwd, loss)
	m.fillUnits(p, fwd, bwd, loss)
	if p.UpdateS, err = m.update(); err != nil {
		return nil, err
	}
	m.say("%s: forward %.3fs, backward %.3fs, update %.3fs", b.Name, p.ForwardS, p.BackwardS, p.UpdateS)
	return p, nil
}

func (o Options) withDefaults() Options {
	if o.Batch <= 0 {
		o.Batch = 1
	}
	if o.Reps <= 0 {
		o.Reps = 3
	}
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	return o
}

// measurer holds what the phases of Measure share: the program run on
// one synthetic batch, the model's top-level layers and their units.
type measurer struct {
	model    string
	reps     int
	progress func(string)
	prog     *nn.Program
	feeds    map[tf.Output]*tf.Tensor
	// layers are the model's top-level layers, in forward order;
	// layerParams their trainable parameter counts.
	layers      nn.Sequential
	layerParams []int64
	groups      []unitGroup
}

// unitGroup is the layers of one Unit: first (with parameters, except
// for leading parameter-free layers) to last, and the indices of their
// trainable variables.
type unitGroup struct {
	first, last int // layer indices
	vars        []int
}

func (m *measurer) say(format string, a ...any) {
	if m.progress != nil {
		m.progress(fmt.Sprintf(format, a...))
	}
}

// timeRun runs targets reps times and returns the fastest run in seconds.
func (m *measurer) timeRun(ctx context.Context, targets []*tf.Operation) (float64, error) {
	best := 0.0
	for r := 0; r < m.reps; r++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if _, err := m.prog.Sess.Run(m.feeds, nil, targets); err != nil {
			return 0, err
		}
		if d := time.Since(t0).Seconds(); r == 0 || d < best {
			best = d
		}
	}
	return best, nil
}

// groupUnits finds the top-level layer owning each trainable variable and
// groups the layers into units: a layer with parameters starts a unit,
// a parameter-free one joins the unit before it.
func (m *measurer) groupUnits() error {
	trainable := m.prog.G.VariablesWith(nn.Trainable)
	owner := make([]int, len(trainable)) // variable -> layer index
	m.layerParams = make([]int64, len(m.layers))
	for i, v := range trainable {
		owner[i] = -1
		for k, l := range m.layers {
			if strings.HasPrefix(v.Name, nn.NameOf(l)+"/") {
				owner[i] = k
				m.layerParams[k] += int64(v.Size())
				break
			}
		}
		if owner[i] < 0 {
			return fmt.Errorf("profile: variable %s belongs to no top-level layer", v.Name)
		}
	}
	for k := range m.layers {
		if m.layerParams[k] > 0 || len(m.groups) == 0 {
			m.groups = append(m.groups, unitGroup{first: k, last: k})
		} else {
			m.groups[len(m.groups)-1].last = k
		}
	}
	for i, k := range owner {
		for gi := range m.groups {
			if k >= m.groups[gi].first && k <= m.groups[gi].last {
				m.groups[gi].vars = append(m.groups[gi].vars, i)
			}
		}
	}
	return nil
}

// forward times the training pass up to each unit, cumulatively (fwd[0]
// is 0, fwd[g+1] up to unit g), and up to the loss.
func (m *measurer) forward(ctx context.Context) (fwd []float64, loss float64, err error) {
	fwd = make([]float64, len(m.groups)+1)
	for gi, gr := range m.groups {
		if fwd[gi+1], err = m.timeRun(ctx, []*tf.Operation{m.prog.Units[gr.last].Op}); err != nil {
			return nil, 0, err
		}
		m.say("%s: forward to %s %.3fs", m.model, nn.NameOf(m.layers[gr.last]), fwd[gi+1])
	}
	if loss, err = m.timeRun(ctx, []*tf.Operation{m.prog.Loss.Op}); err != nil {
		return nil, 0, err
	}
	return fwd, loss, nil
}

// backward times the gradients from the top down to each unit,
// cumulatively: bwd[g] is the gradients of units g and above; the caller
// sets bwd[len(groups)], the loss alone.
func (m *measurer) backward(ctx context.Context) ([]float64, error) {
	bwd := make([]float64, len(m.groups)+1)
	var targets []*tf.Operation
	for gi := len(m.groups) - 1; gi >= 0; gi-- {
		for _, i := range m.groups[gi].vars {
			targets = append(targets, m.prog.VarGrads[i].Op)
		}
		var err error
		if bwd[gi], err = m.timeRun(ctx, targets); err != nil {
			return nil, err
		}
		m.say("%s: gradients down to %s %.3fs", m.model, nn.NameOf(m.layers[m.groups[gi].first]), bwd[gi])
	}
	return bwd, nil
}

// monotonic makes the noisy cumulative times monotonic, the loss at least
// the whole forward pass and the top of bwd the loss, which it returns.
func monotonic(fwd, bwd []float64, loss float64) float64 {
	for i := 1; i < len(fwd); i++ {
		fwd[i] = max(fwd[i], fwd[i-1])
	}
	top := len(bwd) - 1
	loss = max(loss, fwd[top])
	bwd[top] = loss
	for i := top - 1; i >= 0; i-- {
		bwd[i] = max(bwd[i], bwd[i+1])
	}
	return loss
}

// fillUnits sets p's units and forward and backward times from the
// cumulative ones.
func (m *measurer) fillUnits(p *Profile, fwd, bwd []float64, loss float64) {
	p.ForwardS = loss
	for gi, gr := range m.groups {
		u := Unit{Name: nn.NameOf(m.layers[gr.first]), ForwardS: fwd[gi+1] - fwd[gi], BackwardS: bwd[gi] - bwd[gi+1]}
		if gi == len(m.groups)-1 {
			u.ForwardS += loss - fwd[gi+1]
		}
		for k := gr.first; k <= gr.last; k++ {
			u.Parameters += m.layerParams[k]
			if k > gr.first {
				u.Layers = append(u.Layers, nn.NameOf(m.layers[k]))
			}
		}
		p.BackwardS += u.BackwardS
		p.Units = append(p.Units, u)
	}
}

// update times the optimizer update with zero gradient sums, the fastest
// of reps runs.
func (m *measurer) update() (float64, error) {
	sums := make([][]float32, len(m.prog.Buckets))
	for i, bk := range m.prog.Buckets {
		sums[i] = make([]float32, bk.Size)
	}
	best := 0.0
	for r := 0; r < m.reps; r++ {
		t0 := time.Now()
		if err := m.prog.Apply(sums, r+1); err != nil {
			return 0, err
		}
		if d := time.Since(t0).Seconds(); r == 0 || d < best {
			best = d
		}
	}
	return best, nil
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
