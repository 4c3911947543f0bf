package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/internal/rackrun"
	"github.com/switchml/switchml-go/trainers/train"
)

// rackFlags are the flags of the rack every measurement builds.
type rackFlags struct {
	workers, mtu, packetElems int
	prefix, subnet            string
	waitQuiet                 time.Duration
}

func (f *rackFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.workers, "workers", 4, "workers, one namespace and one `train --rank` each")
	fs.IntVar(&f.mtu, "mtu", 1500, "MTU of every rack port")
	fs.IntVar(&f.packetElems, "packet-elements", 0, "switchml: values per packet (0 = the library's default, 256)")
	fs.StringVar(&f.prefix, "rack-prefix", "smle", "name prefix of the rack's namespaces (a rack of the same prefix is removed first)")
	fs.StringVar(&f.subnet, "rack-subnet", "10.215.0.0/24", "the rack's subnet")
	fs.DurationVar(&f.waitQuiet, "wait-quiet", 30*time.Minute, "before each measurement, wait up to this long for other benchmarks, tests and training on the machine to end (0: do not wait)")
}

// quiet waits for the machine to be quiet before a measurement.
func (f *rackFlags) quiet(ctx context.Context) {
	rackrun.WaitQuiet(ctx, f.waitQuiet, func(s string) { fmt.Fprintln(os.Stderr, "   "+s) })
}

// start builds the rack at rateMbit with the switch side in it.
func (f *rackFlags) start(ctx context.Context, rateMbit float64) (*rackrun.Rack, error) {
	return rackrun.Start(ctx, rack.Config{Workers: f.workers, RateMbit: rateMbit, MTU: f.mtu, Prefix: f.prefix, Subnet: f.subnet},
		harness.Config{MaxElements: max(f.packetElems, 1024), Echo: true,
			SwitchArgs: []string{"--log-level", "warn"}, ControllerArgs: []string{"--log-level", "warn"}})
}

// meetFlags are the `train --rank` flags by which the ranks of run number
// run of backend meet: the controller for switchml, every rank's address
// for the ring and exact.
func meetFlags(r *rackrun.Rack, backend string, run int) []string {
	if backend == "switchml" {
		return []string{"--controller", r.Controller(), "--job", fmt.Sprintf("rackbench-%d-%d", os.Getpid(), run)}
	}
	peers := make([]string, r.Workers())
	for i := range peers {
		peers[i] = fmt.Sprintf("%s:%d", r.WorkerIP(i), 23000+run%1000)
	}
	return []string{"--peers", strings.Join(peers, ",")}
}

// Epoch is one epoch line of rank 0 and when it arrived.
type Epoch struct {
	train.EpochResult
	// WallS is the time from starting the ranks to rank 0 printing this
	// epoch's result (start-up, meeting, training and evaluation so far).
	WallS float64 `json:"wall_s"`
}

// Eval is an evaluation within an epoch (train --eval-every) and when it
// arrived.
type Eval struct {
	train.EvalResult
	WallS float64 `json:"wall_s"`
}

// AccuracyRun is one backend's training.
type AccuracyRun struct {
	Backend string  `json:"backend"`
	Epochs  []Epoch `json:"epochs"`
	Evals   []Eval  `json:"evals,omitempty"`
	// TargetEpoch is the first epoch at or above the target accuracy (0:
	// never). TargetProgress is the first evaluation at or above it, in
	// epochs (the same as TargetEpoch without evaluations within epochs);
	// TimeToTargetS its WallS; TrainToTargetS the training and evaluation
	// time up to it, without start-up.
	TargetEpoch    int     `json:"target_epoch"`
	TargetProgress float64 `json:"target_progress"`
	TimeToTargetS  float64 `json:"time_to_target_s"`
	TrainToTargetS float64 `json:"train_to_target_s"`
	// Others are the heavy processes that ran beside it on the machine.
	Others []string `json:"others,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// AccuracyReport is accuracy.json.
type AccuracyReport struct {
	Date     string  `json:"date"`
	Command  string  `json:"command"`
	Commit   string  `json:"commit"`
	CPUs     int     `json:"cpus"`
	Workers  int     `json:"workers"`
	RateMbit float64 `json:"rate_mbit"`
	Model    string  `json:"model"`
	Batch    int     `json:"batch"`
	Seed     int64   `json:"seed"`
	Target   float64 `json:"target"`
	Threads  int     `json:"intra_op_threads"`
	// EvalEvery is train's --eval-every (0: at the end of each epoch).
	EvalEvery int           `json:"eval_every,omitempty"`
	Settings  string        `json:"settings"`
	Runs      []AccuracyRun `json:"runs"`
}

func accuracy(ctx context.Context, args []string) error {
	var rf rackFlags
	fs := cli.NewFlagSet("rackbench accuracy", "[flags]", "Time to a test accuracy per backend, with the accuracy of every epoch (Fashion-MNIST), on the emulated rack.")
	rf.register(fs)
	rate := fs.Float64("rate", 200, "port rate in Mbit/s")
	backends := fs.String("backends", "switchml,ring", "backends, run one after the other: switchml, ring, exact")
	model := fs.String("model", "cnn", "model (a Fashion-MNIST one: cnn, cnn-wide or mlp)")
	epochs := fs.Int("epochs", 5, "epochs per backend (every epoch is evaluated)")
	batch := fs.Int("batch", 64, "batch per worker")
	seed := fs.Int64("seed", 1, "seed (the same for every backend)")
	target := fs.Float64("target", 0.88, "test accuracy to reach")
	threads := fs.Int("threads", 1, "TensorFlow intra-op threads per rank (the ranks share this machine's cores)")
	trainLimit := fs.Int("train-limit", 0, "first N training examples only (0 = all; for a quick try)")
	testLimit := fs.Int("test-limit", 0, "first N test examples only (0 = all)")
	evalEvery := fs.Int("eval-every", 0, "also evaluate every N steps within an epoch (train --eval-every), for a finer time to the target")
	out := fs.String("out", "results/rack-e2e", "output directory")
	name := fs.String("name", "accuracy", "results file names: NAME.json, NAME.md and NAME.png in --out")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *target <= 0 || *target > 1 {
		return cli.Usagef("rackbench accuracy", "--target %v: want a fraction in (0, 1], such as 0.88", *target)
	}
	bes := strings.Split(*backends, ",")
	for _, b := range bes {
		if b != "switchml" && b != "ring" && b != "exact" {
			return cli.Usagef("rackbench accuracy", "--backends: unknown backend %q: want switchml, ring or exact", b)
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "rackbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	trainBin := filepath.Join(tmp, "train")
	if err := rackrun.Build(ctx, trainBin, "./cmd/train"); err != nil {
		return err
	}
	r, err := rf.start(ctx, *rate)
	if err != nil {
		return err
	}
	defer r.Close()

	rep := &AccuracyReport{Date: time.Now().UTC().Format(time.RFC3339), Command: "rackbench accuracy " + strings.Join(args, " "),
		Commit: rackrun.Commit(ctx), CPUs: runtime.NumCPU(), Workers: rf.workers, RateMbit: *rate, Model: *model,
		Batch: *batch, Seed: *seed, Target: *target, Threads: *threads, EvalEvery: *evalEvery,
		Settings: fmt.Sprintf("MTU %d; switchml %d values per packet (0 = default), library's lanes and window", rf.mtu, rf.packetElems)}
	for i, be := range bes {
		fmt.Fprintf(os.Stderr, "== %s: %d ranks, %g Mbit/s, %s, %d epochs\n", be, rf.workers, *rate, *model, *epochs)
		args := []string{"--workers", strconv.Itoa(rf.workers), "--backend", be, "--model", *model, "--dataset", "fashion-mnist",
			"--epochs", strconv.Itoa(*epochs), "--batch", strconv.Itoa(*batch), "--seed", strconv.FormatInt(*seed, 10),
			"--intra-op-threads", strconv.Itoa(*threads), "--train-limit", strconv.Itoa(*trainLimit), "--test-limit", strconv.Itoa(*testLimit),
			"--packet-elements", strconv.Itoa(rf.packetElems), "--eval-every", strconv.Itoa(*evalEvery), "--join-timeout", "2m", "--json", "--quiet"}
		if be != "switchml" {
			args = slicesWithout(args, "--packet-elements")
		}
		args = append(args, meetFlags(r, be, i)...)
		rf.quiet(ctx)
		run := AccuracyRun{Backend: be, Others: rackrun.Others()}
		epochs, evals, err := trainRanks(ctx, r, trainBin, args)
		run.Epochs, run.Evals = epochs, evals
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			run.Error = err.Error()
			fmt.Fprintf(os.Stderr, "   failed: %v\n", err)
		}
		run.Others = mergeOthers(run.Others, rackrun.Others())
		run.reached(*target)
		rep.Runs = append(rep.Runs, run)
		if err := writeAccuracy(filepath.Join(*out, *name), rep); err != nil {
			return err
		}
	}
	fmt.Print(accuracyMarkdown(rep))
	return nil
}

// point is one evaluation of a run, within an epoch or at its end.
type point struct {
	progress, accuracy, wallS, trainS float64
}

// points are the run's evaluations in training order.
func (run *AccuracyRun) points() []point {
	var out []point
	done, k := 0.0, 0 // training time of the finished epochs
	for _, e := range run.Epochs {
		for ; k < len(run.Evals) && run.Evals[k].Epoch == e.Epoch; k++ {
			v := run.Evals[k]
			out = append(out, point{v.Progress, v.TestAccuracy, v.WallS, done + v.ElapsedS})
		}
		done += e.EpochS
		out = append(out, point{float64(e.Epoch), e.TestAccuracy, e.WallS, done})
	}
	return out
}

// reached sets the first epoch and the first evaluation at or above
// target and the times to it.
func (run *AccuracyRun) reached(target float64) {
	run.TargetEpoch, run.TargetProgress, run.TimeToTargetS, run.TrainToTargetS = 0, 0, 0, 0
	for _, e := range run.Epochs {
		if e.TestAccuracy >= target {
			run.TargetEpoch = e.Epoch
			break
		}
	}
	for _, p := range run.points() {
		if p.accuracy >= target {
			run.TargetProgress, run.TimeToTargetS, run.TrainToTargetS = p.progress, p.wallS, p.trainS
			return
		}
	}
}

// evalsMarkdown is the table of every evaluation of every run, by training
// progress.
func evalsMarkdown(rep *AccuracyReport) string {
	var progress []float64
	acc := map[string]map[float64]point{}
	for _, run := range rep.Runs {
		acc[run.Backend] = map[float64]point{}
		for _, p := range run.points() {
			acc[run.Backend][p.progress] = p
			if !slices.Contains(progress, p.progress) {
				progress = append(progress, p.progress)
			}
		}
	}
	slices.Sort(progress)
	var sb strings.Builder
	sb.WriteString("\n| epochs done |")
	for _, run := range rep.Runs {
		fmt.Fprintf(&sb, " %s (%%) | %s (s) |", run.Backend, run.Backend)
	}
	sb.WriteString("\n|---:|")
	for range rep.Runs {
		sb.WriteString("---:|---:|")
	}
	sb.WriteString("\n")
	for _, pr := range progress {
		fmt.Fprintf(&sb, "| %.2f |", pr)
		for _, run := range rep.Runs {
			if p, ok := acc[run.Backend][pr]; ok {
				fmt.Fprintf(&sb, " %.2f | %.1f |", 100*p.accuracy, p.wallS)
			} else {
				sb.WriteString(" — | — |")
			}
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// runOf is the run of backend, or nil.
func runOf(rep *AccuracyReport, backend string) *AccuracyRun {
	for i := range rep.Runs {
		if rep.Runs[i].Backend == backend && rep.Runs[i].Error == "" {
			return &rep.Runs[i]
		}
	}
	return nil
}

// slicesWithout drops flag name and its value from args.
func slicesWithout(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == name {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

func mergeOthers(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// trainRanks runs `train --rank i` in every worker namespace and returns
// rank 0's epochs, timed as they arrive. It checks that every rank
// reports the same accuracies (they evaluate one model together).
func trainRanks(ctx context.Context, r *rackrun.Rack, bin string, args []string) ([]Epoch, []Eval, error) {
	n := r.Workers()
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	pr, pw := io.Pipe()
	var epochs []Epoch
	var evals []Eval
	var parseErr error
	var wg sync.WaitGroup
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Bytes()
			outs[0].Write(append(line, '\n'))
			wall := time.Since(start).Seconds()
			var kind struct {
				Kind string `json:"kind"`
			}
			json.Unmarshal(line, &kind)
			if kind.Kind == "eval" {
				v := Eval{WallS: wall}
				if err := json.Unmarshal(line, &v.EvalResult); err != nil {
					parseErr = fmt.Errorf("rank 0 printed %q: %w", line, err)
				}
				fmt.Fprintf(os.Stderr, "   epoch %.2f: test accuracy %.2f%%, %.0fs since start\n", v.Progress, 100*v.TestAccuracy, v.WallS)
				evals = append(evals, v)
				continue
			}
			var e Epoch
			if err := json.Unmarshal(line, &e.EpochResult); err != nil {
				parseErr = fmt.Errorf("rank 0 printed %q: %w", line, err)
				continue
			}
			e.WallS = wall
			fmt.Fprintf(os.Stderr, "   epoch %d: test accuracy %.2f%%, %.1f ms/step, comm %.1fs, %.0fs since start\n",
				e.Epoch, 100*e.TestAccuracy, 1e3*e.StepS, e.CommS, e.WallS)
			epochs = append(epochs, e)
		}
		io.Copy(io.Discard, pr)
	}()
	for i := range cmds {
		c := r.Command(ctx, r.WorkerNS(i), bin, append([]string{"--rank", strconv.Itoa(i)}, args...)...)
		if i == 0 {
			c.Stdout = pw
		} else {
			c.Stdout = &outs[i]
		}
		cmds[i] = c
	}
	err := rackrun.Run(cmds, os.Stderr)
	pw.Close()
	wg.Wait()
	if err != nil {
		return epochs, evals, err
	}
	if parseErr != nil {
		return epochs, evals, parseErr
	}
	for i := 1; i < n; i++ {
		if err := sameAccuracies(outs[0].Bytes(), outs[i].Bytes()); err != nil {
			return epochs, evals, fmt.Errorf("rank %d: %w", i, err)
		}
	}
	return epochs, evals, nil
}

// sameAccuracies checks that another rank printed rank 0's test
// accuracies, line by line (they evaluate one model together).
func sameAccuracies(rank0, other []byte) error {
	type line struct {
		Epoch        int     `json:"epoch"`
		Step         int     `json:"step"`
		TestAccuracy float64 `json:"test_accuracy"`
	}
	read := func(b []byte) ([]line, error) {
		var out []line
		dec := json.NewDecoder(bytes.NewReader(b))
		for {
			var l line
			if err := dec.Decode(&l); err == io.EOF {
				return out, nil
			} else if err != nil {
				return nil, fmt.Errorf("output: %w", err)
			}
			out = append(out, l)
		}
	}
	a, err := read(rank0)
	if err != nil {
		return err
	}
	b, err := read(other)
	if err != nil {
		return err
	}
	if len(a) != len(b) {
		return fmt.Errorf("printed %d results, rank 0 %d", len(b), len(a))
	}
	for k := range a {
		if a[k] != b[k] {
			return fmt.Errorf("epoch %d step %d: test accuracy %v differs from rank 0's %v", b[k].Epoch, b[k].Step, b[k].TestAccuracy, a[k].TestAccuracy)
		}
	}
	return nil
}

// writeAccuracy writes base.json, base.md and base.png.
func writeAccuracy(base string, rep *AccuracyReport) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(base+".md", []byte(accuracyMarkdown(rep)), 0o644); err != nil {
		return err
	}
	return plotAccuracy(base+".png", rep)
}

func accuracyMarkdown(rep *AccuracyReport) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Time to %.0f%% test accuracy: %s on Fashion-MNIST, %d workers (one `train --rank` per namespace), %g Mbit/s per port, batch %d per worker, seed %d, %d TensorFlow thread(s) per rank on %d CPUs; %s.\n\n",
		100*rep.Target, rep.Model, rep.Workers, rep.RateMbit, rep.Batch, rep.Seed, rep.Threads, rep.CPUs, rep.Settings)
	fmt.Fprintf(&sb, "```sh\n%s\n```\n\ncommit %s, %s\n\n", rep.Command, rep.Commit, rep.Date)
	fmt.Fprintf(&sb, "| backend | reached at epoch | wall clock to %.0f%% (s) | training to %.0f%% (s) | mean step (s) | allreduce per epoch (s) | TensorFlow per epoch (s) |\n|---|---:|---:|---:|---:|---:|---:|\n",
		100*rep.Target, 100*rep.Target)
	for _, run := range rep.Runs {
		if run.Error != "" {
			fmt.Fprintf(&sb, "| %s | failed: %s | | | | | |\n", run.Backend, run.Error)
			continue
		}
		var step, comm, compute float64
		for _, e := range run.Epochs {
			step += e.StepS
			comm += e.CommS
			compute += e.ComputeS
		}
		k := float64(max(1, len(run.Epochs)))
		reached, tt, tr := "not reached", "—", "—"
		if run.TargetProgress > 0 {
			reached, tt, tr = strconv.FormatFloat(run.TargetProgress, 'f', 2, 64), fmt.Sprintf("%.1f", run.TimeToTargetS), fmt.Sprintf("%.1f", run.TrainToTargetS)
			if run.TargetProgress == math.Trunc(run.TargetProgress) {
				reached = strconv.Itoa(int(run.TargetProgress))
			}
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %.3f | %.1f | %.1f |\n", run.Backend, reached, tt, tr, step/k, comm/k, compute/k)
	}
	if rep.EvalEvery > 0 {
		fmt.Fprintf(&sb, "\nEvaluated every %d steps and at the end of each epoch; \"reached at epoch\" is the training done, in epochs, at the first evaluation at or above the target.\n", rep.EvalEvery)
		sb.WriteString(evalsMarkdown(rep))
	}
	sb.WriteString("\nTest accuracy (%) after each epoch, and wall clock since start (s):\n\n| epoch |")
	for _, run := range rep.Runs {
		fmt.Fprintf(&sb, " %s | %s (s) |", run.Backend, run.Backend)
	}
	sml, ring := runOf(rep, "switchml"), runOf(rep, "ring")
	pair := sml != nil && ring != nil
	if len(rep.Runs) >= 2 {
		sb.WriteString(" largest difference (points) |")
	}
	if pair {
		sb.WriteString(" switchml - ring (points) |")
	}
	sb.WriteString("\n|---:|")
	for range rep.Runs {
		sb.WriteString("---:|---:|")
	}
	if len(rep.Runs) >= 2 {
		sb.WriteString("---:|")
	}
	if pair {
		sb.WriteString("---:|")
	}
	sb.WriteString("\n")
	most := 0
	for _, run := range rep.Runs {
		most = max(most, len(run.Epochs))
	}
	for k := 0; k < most; k++ {
		fmt.Fprintf(&sb, "| %d |", k+1)
		lo, hi, all := 101.0, -1.0, true
		for _, run := range rep.Runs {
			if k < len(run.Epochs) {
				a := 100 * run.Epochs[k].TestAccuracy
				lo, hi = min(lo, a), max(hi, a)
				fmt.Fprintf(&sb, " %.2f | %.1f |", a, run.Epochs[k].WallS)
			} else {
				all = false
				sb.WriteString(" — | — |")
			}
		}
		if len(rep.Runs) >= 2 {
			if all {
				fmt.Fprintf(&sb, " %.2f |", hi-lo)
			} else {
				sb.WriteString(" — |")
			}
		}
		if pair {
			if k < len(sml.Epochs) && k < len(ring.Epochs) {
				fmt.Fprintf(&sb, " %+.2f |", 100*(sml.Epochs[k].TestAccuracy-ring.Epochs[k].TestAccuracy))
			} else {
				sb.WriteString(" — |")
			}
		}
		sb.WriteString("\n")
	}
	shared := false
	for _, run := range rep.Runs {
		if others := rackrun.Heavy(run.Others); len(others) > 0 {
			if !shared {
				sb.WriteString("\nOther heavy processes on the machine at the start or the end of a run (they shared the CPUs):\n\n")
				shared = true
			}
			fmt.Fprintf(&sb, "- %s: %s\n", run.Backend, strings.Join(others, "; "))
		}
	}
	if !shared {
		sb.WriteString("\nNo other benchmark, test or training process was running at the start or the end of any run.\n")
	}
	return sb.String()
}
