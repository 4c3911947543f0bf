package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	tf "github.com/wamuir/graft/tensorflow"

	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/nn"
	"github.com/switchml/switchml-go/trainers/profile"
	"github.com/switchml/switchml-go/trainers/train"
)

// Description is what --describe prints.
type Description struct {
	Model      string  `json:"model"`
	Parameters int64   `json:"parameters"`
	Published  int64   `json:"published_parameters,omitempty"`
	Config     string  `json:"config,omitempty"`
	Input      []int64 `json:"input"`
	InputType  string  `json:"input_type"`
	Classes    int     `json:"classes"`
	Layers     int     `json:"top_level_layers"`
	Variables  int     `json:"trainable_variables"`
	GradientMB float64 `json:"gradient_mb"`
}

// describe builds the model's graph (no session, no weights) and prints
// one JSON object.
func describe(f *flags, w io.Writer) error {
	def, err := models.Lookup(f.model)
	if err != nil {
		return err
	}
	g := nn.NewGraph(f.seed)
	d := Description{Model: f.model}
	if b := def.Bench; b != nil {
		q := b.Build(g)
		d.Published, d.Config, d.Input, d.Classes, d.Layers = b.Published, b.Config, b.InputShape, b.Classes, len(q)
	} else {
		// The small models are built for Fashion-MNIST.
		l := def.Build(g, 28, 28, 1, 10)
		d.Input, d.Classes, d.Layers = []int64{28, 28, 1}, 10, 1
		if q, ok := l.(nn.Sequential); ok {
			d.Layers = len(q)
		}
	}
	if err := g.Scope.Err(); err != nil {
		return err
	}
	d.InputType = "float32"
	if def.InputType == tf.Int32 {
		d.InputType = "int32"
	}
	d.Parameters = nn.ParameterCount(g)
	d.Variables = len(g.VariablesWith(nn.Trainable))
	d.GradientMB = float64(4*d.Parameters) / 1e6
	enc := json.NewEncoder(w)
	return enc.Encode(d)
}

// profileModel measures the model's per-layer compute and writes the
// profile.
func profileModel(ctx context.Context, f *flags) error {
	b := models.LookupBench(f.model)
	if b == nil {
		return fmt.Errorf("--profile-out needs a benchmark model (%v)", benchNames())
	}
	o := profile.Options{Batch: f.batch, Reps: f.profileReps, Threads: f.intra}
	if !f.quiet {
		o.Progress = func(s string) { fmt.Fprintln(os.Stderr, s) }
	}
	p, err := profile.Measure(ctx, b, o)
	if err != nil {
		return err
	}
	return p.Save(f.profileOut)
}

func benchNames() []string {
	var out []string
	for _, n := range models.Names() {
		if models.LookupBench(n) != nil {
			out = append(out, n)
		}
	}
	return out
}

// runBenchWorker is a worker of a benchmark model: synthetic input, timed
// steps; when report is set it prints one JSON object.
func runBenchWorker(ctx context.Context, f *flags, b *models.Bench, o train.Options, be collective.Backend, report bool) error {
	res, err := train.RunSynthetic(ctx, o, b, f.warmupSteps, f.steps, be)
	if err != nil {
		return err
	}
	if report {
		if f.jsonOut {
			return json.NewEncoder(os.Stdout).Encode(res)
		}
		fmt.Printf("%s (%d parameters), %d workers over %s, batch %d per worker: %.3f s/step median (compute %.3f s, allreduce %.3f s) over %d steps\n",
			b.Name, res.Parameters, res.Workers, res.Backend, res.Batch, res.MedianStepS, res.MedianComputeS, res.MedianCommS, res.Steps)
	}
	return nil
}
