package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/internal/rackrun"
	"github.com/switchml/switchml-go/trainers/profile"
	"github.com/switchml/switchml-go/trainers/train"
)

// Measured is a point's real training: medians over rank 0's timed steps.
type Measured struct {
	StepS    float64   `json:"step_s"`
	ComputeS float64   `json:"compute_s"`
	CommS    float64   `json:"comm_s"`
	Steps    []float64 `json:"steps_s"`
	Loss     float64   `json:"loss"`
}

// Replayed is the profile replay of the same point: medians over rank 0's
// timed steps.
type Replayed struct {
	StepS    float64              `json:"step_s"`
	ComputeS float64              `json:"compute_s"`
	CommS    float64              `json:"comm_s"`
	Steps    []profile.StepResult `json:"steps"`
}

// StepPoint is one (rate, model, backend) of the step-time table.
type StepPoint struct {
	RateMbit   float64 `json:"rate_mbit"`
	Workers    int     `json:"workers"`
	Model      string  `json:"model"`
	Backend    string  `json:"backend"`
	Batch      int     `json:"batch"`
	Parameters int64   `json:"parameters"`
	// ProfileCPUs is the CPUs the profile's compute had: its TensorFlow
	// threads, at most the machine's CPUs.
	ProfileCPUs float64   `json:"profile_cpus,omitempty"`
	Measured    *Measured `json:"measured,omitempty"`
	Replayed    *Replayed `json:"replayed,omitempty"`
	Others      []string  `json:"others,omitempty"`
	Error       string    `json:"error,omitempty"`
}

// StepsReport is steps.json.
type StepsReport struct {
	Date        string      `json:"date"`
	Command     string      `json:"command"`
	Commit      string      `json:"commit"`
	CPUs        int         `json:"cpus"`
	StepsTimed  int         `json:"steps_timed"`
	Warmup      int         `json:"warmup_steps"`
	BucketElems int         `json:"bucket_elems"`
	Threads     int         `json:"intra_op_threads"`
	Settings    string      `json:"settings"`
	Points      []StepPoint `json:"points"`
}

func steps(ctx context.Context, args []string) error {
	f, err := parseStepsFlags(args)
	if err != nil {
		return err
	}
	pl, err := f.plan()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "rackbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sr := &stepsRun{f: f, pl: pl, trainBin: filepath.Join(tmp, "train"), replayBin: filepath.Join(tmp, "replaybench")}
	if err := rackrun.Build(ctx, sr.trainBin, "./cmd/train"); err != nil {
		return err
	}
	if err := rackrun.Build(ctx, sr.replayBin, "./cmd/replaybench"); err != nil {
		return err
	}
	if sr.rack, err = f.rf.start(ctx, pl.rates[0]); err != nil {
		return err
	}
	defer sr.rack.Close()

	rep := &StepsReport{Date: time.Now().UTC().Format(time.RFC3339), Command: "rackbench steps " + strings.Join(args, " "),
		Commit: rackrun.Commit(ctx), CPUs: runtime.NumCPU(), StepsTimed: f.timed, Warmup: f.warmup, BucketElems: f.bucketElems, Threads: f.threads,
		Settings: fmt.Sprintf("MTU %d; switchml: the library's 4 lanes and window 64, %d values per packet (0 = 256); momentum update; replay without overlap (--sequential)", f.rf.mtu, f.rf.packetElems)}
	if err := sr.runAll(ctx, rep); err != nil {
		return err
	}
	fmt.Print(stepsMarkdown(rep))
	return nil
}

// stepsFlags are the flags of `rackbench steps`.
type stepsFlags struct {
	rf                                              rackFlags
	models, rates, workerCounts, backends, profiles string
	timed, warmup, bucketElems, threads             int
	out, name                                       string
}

func parseStepsFlags(args []string) (*stepsFlags, error) {
	f := &stepsFlags{}
	fs := cli.NewFlagSet("rackbench steps", "[flags]", "Step time of benchmark models on synthetic input, each beside the profile replay's prediction, on the emulated rack.")
	f.rf.register(fs)
	fs.StringVar(&f.models, "models", "ncf,deeplight,lstm,resnet50", "benchmark models (each with profiles/<model>.json; the batch is the profile's)")
	fs.StringVar(&f.rates, "rates", "200,1000", "port rates in Mbit/s")
	fs.StringVar(&f.workerCounts, "worker-counts", "", "job sizes to run (comma-separated, each at most --workers; default --workers)")
	fs.StringVar(&f.backends, "backends", "switchml,ring", "backends: switchml, ring")
	fs.StringVar(&f.profiles, "profiles", "profiles", "directory of the profiles")
	fs.IntVar(&f.timed, "steps", 5, "timed steps per point")
	fs.IntVar(&f.warmup, "warmup", 1, "untimed steps before them")
	fs.IntVar(&f.bucketElems, "bucket-elems", 25e6/4, "gradient values per allreduce bucket, for training and replay alike (DDP's 25 MB)")
	fs.IntVar(&f.threads, "threads", 1, "TensorFlow intra-op threads per rank")
	fs.StringVar(&f.out, "out", "results/rack-e2e", "output directory")
	fs.StringVar(&f.name, "name", "steps", "results file names: NAME.json and NAME.md in --out")
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if f.timed < 1 || f.warmup < 0 {
		return nil, cli.Usagef("rackbench steps", "--steps %d --warmup %d: want at least one timed step", f.timed, f.warmup)
	}
	return f, nil
}

// stepsPlan is what `rackbench steps` runs: every rate, job size, model
// (with its profile) and backend.
type stepsPlan struct {
	rates    []float64
	counts   []int
	models   []string
	profs    map[string]*profile.Profile
	backends []string
}

// plan checks the lists of the flags and loads the models' profiles.
func (f *stepsFlags) plan() (*stepsPlan, error) {
	rateList, err := rackrun.Floats(f.rates)
	if err != nil {
		return nil, fmt.Errorf("--rates: %w", err)
	}
	pl := &stepsPlan{rates: rateList, counts: []int{f.rf.workers}, profs: map[string]*profile.Profile{}}
	if f.workerCounts != "" {
		pl.counts = nil
		for _, s := range strings.Split(f.workerCounts, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 || n > f.rf.workers {
				return nil, fmt.Errorf("--worker-counts: %q: want job sizes from 1 to --workers (%d)", s, f.rf.workers)
			}
			pl.counts = append(pl.counts, n)
		}
	}
	pl.backends = strings.Split(f.backends, ",")
	for _, b := range pl.backends {
		if b != "switchml" && b != "ring" {
			return nil, fmt.Errorf("--backends: unknown backend %q (want switchml or ring)", b)
		}
	}
	pl.models = strings.Split(f.models, ",")
	for _, m := range pl.models {
		p, err := profile.Load(filepath.Join(f.profiles, m+".json"))
		if err != nil {
			return nil, fmt.Errorf("--models %s: %w (measure it with `train --model %s --profile-out`)", m, err, m)
		}
		pl.profs[m] = p
	}
	return pl, nil
}

// stepsRun runs the points of a plan on the rack.
type stepsRun struct {
	f                   *stepsFlags
	pl                  *stepsPlan
	rack                *rackrun.Rack
	trainBin, replayBin string
	run                 int // points started, numbering each point's two jobs
}

// runAll runs every point, adding each to rep and rewriting the results
// file after each.
func (sr *stepsRun) runAll(ctx context.Context, rep *StepsReport) error {
	for _, rate := range sr.pl.rates {
		if err := sr.rack.SetRate(rate); err != nil {
			return err
		}
		for _, n := range sr.pl.counts {
			for _, m := range sr.pl.models {
				for _, be := range sr.pl.backends {
					pt, err := sr.point(ctx, rate, n, m, be)
					if err != nil {
						return err
					}
					rep.Points = append(rep.Points, pt)
					if err := writeSteps(filepath.Join(sr.f.out, sr.f.name), rep); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// point measures real training of model m over backend be on n workers
// at rate, then replays m's profile the same way. A failure is recorded
// in the point; the error is only the context's, when it ended.
func (sr *stepsRun) point(ctx context.Context, rate float64, n int, m, be string) (StepPoint, error) {
	sr.run++
	run := sr.run
	sr.f.rf.quiet(ctx)
	p := sr.pl.profs[m]
	pt := StepPoint{RateMbit: rate, Workers: n, Model: m, Backend: be, Batch: p.Batch, Parameters: p.Parameters, ProfileCPUs: profileCPUs(p), Others: rackrun.Others()}
	fmt.Fprintf(os.Stderr, "== %g Mbit/s, %d workers, %s (batch %d), %s\n", rate, n, m, p.Batch, be)
	common := []string{"--backend", be, "--workers", strconv.Itoa(n), "--bucket-elems", strconv.Itoa(sr.f.bucketElems)}
	meas, err := measureSteps(ctx, sr.rack, sr.trainBin, n, append(common, "--model", m, "--batch", strconv.Itoa(p.Batch),
		"--steps", strconv.Itoa(sr.f.timed), "--warmup-steps", strconv.Itoa(sr.f.warmup), "--optimizer", "momentum",
		"--intra-op-threads", strconv.Itoa(sr.f.threads), "--packet-elements", strconv.Itoa(sr.f.rf.packetElems),
		"--join-timeout", "2m", "--json", "--quiet"), be, 2*run)
	if err == nil {
		pt.Measured = meas
		fmt.Fprintf(os.Stderr, "   measured: step %.3fs (TensorFlow %.3fs, allreduce %.3fs)\n", meas.StepS, meas.ComputeS, meas.CommS)
		var rp *Replayed
		rp, err = replaySteps(ctx, sr.rack, sr.replayBin, n, filepath.Join(sr.f.profiles, m+".json"), be, 2*run+1, sr.f.timed, sr.f.warmup, sr.f.bucketElems, sr.f.rf.packetElems)
		if err == nil {
			pt.Replayed = rp
			fmt.Fprintf(os.Stderr, "   replayed: step %.3fs (compute %.3fs, allreduce %.3fs)\n", rp.StepS, rp.ComputeS, rp.CommS)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return StepPoint{}, ctx.Err()
		}
		pt.Error = err.Error()
		fmt.Fprintf(os.Stderr, "   failed: %v\n", err)
	}
	pt.Others = mergeOthers(pt.Others, rackrun.Others())
	return pt, nil
}

// rankCommands returns one command per rank of an n-rank job, each in its
// worker namespace, with --rank i appended to args.
func rankCommands(ctx context.Context, r *rackrun.Rack, bin string, n int, args func(rank int) []string) ([]*exec.Cmd, []bytes.Buffer) {
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	for i := range cmds {
		cmds[i] = r.Command(ctx, r.WorkerNS(i), bin, args(i)...)
		cmds[i].Stdout = &outs[i]
	}
	return cmds, outs
}

// measureSteps runs `train --rank` on n ranks and returns rank 0's timed
// steps.
func measureSteps(ctx context.Context, r *rackrun.Rack, bin string, n int, args []string, backend string, run int) (*Measured, error) {
	if backend != "switchml" {
		args = slicesWithout(args, "--packet-elements")
	}
	args = append(args, meetFlagsN(r, backend, run, n)...)
	cmds, outs := rankCommands(ctx, r, bin, n, func(i int) []string { return append([]string{"--rank", strconv.Itoa(i)}, args...) })
	if err := rackrun.Run(cmds, os.Stderr); err != nil {
		return nil, err
	}
	var res train.ThroughputResult
	if err := json.Unmarshal(outs[0].Bytes(), &res); err != nil {
		return nil, fmt.Errorf("rank 0 printed %q: %w", outs[0].String(), err)
	}
	return &Measured{StepS: res.MedianStepS, ComputeS: res.MedianComputeS, CommS: res.MedianCommS, Steps: res.StepS, Loss: res.Loss}, nil
}

// replaySteps runs the replay worker of replaybench on n ranks with the
// same buckets, allreduces after the backward pass as train does.
func replaySteps(ctx context.Context, r *rackrun.Rack, bin string, n int, prof, backend string, run, timed, warmup, bucketElems, pe int) (*Replayed, error) {
	ring := make([]string, n)
	for i := range ring {
		ring[i] = fmt.Sprintf("%s:%d", r.WorkerIP(i), 23000+run%1000)
	}
	cmds, outs := rankCommands(ctx, r, bin, n, func(i int) []string {
		return []string{"worker", "--profile", prof, "--backend", backend, "--rank", strconv.Itoa(i), "--workers", strconv.Itoa(n),
			"--ring-addrs", strings.Join(ring, ","), "--controller", r.Controller(), "--job", fmt.Sprintf("rackbench-%d-%d", os.Getpid(), run),
			"--packet-elements", strconv.Itoa(pe), "--bucket-elems", strconv.Itoa(bucketElems),
			"--steps", strconv.Itoa(timed), "--warmup", strconv.Itoa(warmup), "--sequential"}
	})
	if err := rackrun.Run(cmds, nil); err != nil {
		return nil, err
	}
	var res struct {
		Steps []profile.StepResult `json:"steps"`
	}
	if err := json.Unmarshal(outs[0].Bytes(), &res); err != nil {
		return nil, fmt.Errorf("replay rank 0 printed %q: %w", outs[0].String(), err)
	}
	var st, co, cm []float64
	for _, s := range res.Steps {
		st, co, cm = append(st, s.StepS), append(co, s.ComputeS), append(cm, s.ExposedCommS)
	}
	return &Replayed{StepS: train.Median(st), ComputeS: train.Median(co), CommS: train.Median(cm), Steps: res.Steps}, nil
}

// meetFlagsN is meetFlags for a job of the first n workers.
func meetFlagsN(r *rackrun.Rack, backend string, run, n int) []string {
	f := meetFlags(r, backend, run)
	if backend != "switchml" {
		peers := strings.Split(f[1], ",")
		f[1] = strings.Join(peers[:n], ",")
	}
	return f
}

// writeSteps writes base.json and base.md.
func writeSteps(base string, rep *StepsReport) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".md", []byte(stepsMarkdown(rep)), 0o644)
}

// relErr is (predicted - measured) / measured.
func relErr(pred, meas float64) float64 {
	if meas == 0 {
		return math.NaN()
	}
	return (pred - meas) / meas
}

func stepsMarkdown(rep *StepsReport) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Step time of real TensorFlow training on the emulated rack (one `train --rank` per worker namespace, synthetic input of the profile's batch) beside the profile replay of the same configuration on the same rack: %d timed steps after %d warm-up, medians of rank 0; buckets of %d values; %d TensorFlow thread(s) per rank on %d CPUs; %s.\n\n",
		rep.StepsTimed, rep.Warmup, rep.BucketElems, rep.Threads, rep.CPUs, rep.Settings)
	fmt.Fprintf(&sb, "```sh\n%s\n```\n\ncommit %s, %s\n\n", rep.Command, rep.Commit, rep.Date)
	sb.WriteString("| rate (Mbit/s) | workers | model | batch | backend | measured step (s) | TensorFlow (s) | allreduce (s) | replayed step (s) | replayed compute (s) | replayed allreduce (s) | step error | allreduce error |\n")
	sb.WriteString("|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range rep.Points {
		fmt.Fprintf(&sb, "| %g | %d | %s | %d | %s |", p.RateMbit, p.Workers, p.Model, p.Batch, p.Backend)
		switch {
		case p.Measured != nil && p.Replayed != nil:
			m, q := p.Measured, p.Replayed
			fmt.Fprintf(&sb, " %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %+.0f%% | %+.0f%% |\n", m.StepS, m.ComputeS, m.CommS,
				q.StepS, q.ComputeS, q.CommS, 100*relErr(q.StepS, m.StepS), 100*relErr(q.CommS, m.CommS))
		default:
			fmt.Fprintf(&sb, " failed: %s | | | | | | | |\n", strings.ReplaceAll(p.Error, "|", "/"))
		}
	}
	sb.WriteString("\nError is (replayed - measured) / measured. The replay sleeps for the profile's compute (profiles/<model>.json, measured once by `train --profile-out` with 2 threads and the machine to itself); the measured TensorFlow time is rank 0's gradients and update while the ranks share the CPUs.\n")
	shareTable(&sb, rep)
	var shared []string
	for _, p := range rep.Points {
		if others := rackrun.Heavy(p.Others); len(others) > 0 {
			shared = append(shared, fmt.Sprintf("- %g Mbit/s, %d workers, %s, %s: %s", p.RateMbit, p.Workers, p.Model, p.Backend, strings.Join(others, "; ")))
		}
	}
	if len(shared) > 0 {
		sb.WriteString("\nOther heavy processes on the machine at the start or the end of a point (they shared the CPUs):\n\n" + strings.Join(shared, "\n") + "\n")
	} else {
		sb.WriteString("\nNo other benchmark, test or training process was running at the start or the end of any point.\n")
	}
	return sb.String()
}

// cpuShare is how many times longer a rank's compute takes on the rack
// than in its profile: the profile had ProfileCPUs, a rank gets its
// threads but at most its share of the machine's CPUs (0 when unknown).
func cpuShare(rep *StepsReport, p StepPoint) float64 {
	if p.ProfileCPUs <= 0 || rep.CPUs <= 0 || p.Workers <= 0 {
		return 0
	}
	threads := float64(max(1, rep.Threads))
	return p.ProfileCPUs / min(threads, float64(rep.CPUs)/float64(p.Workers))
}

// shareTable adds the replay's prediction with its compute stretched by
// the CPU share (cpuShare): the ranks of the rack share the machine's CPUs,
// the profile had them to itself. The replay runs sequentially (compute,
// then the allreduces), so the stretched step is the replayed allreduce
// plus the stretched compute.
func shareTable(sb *strings.Builder, rep *StepsReport) {
	var rows []string
	for _, p := range rep.Points {
		k := cpuShare(rep, p)
		if k == 0 || p.Measured == nil || p.Replayed == nil {
			continue
		}
		m, q := p.Measured, p.Replayed
		step := q.CommS + k*q.ComputeS
		rows = append(rows, fmt.Sprintf("| %g | %d | %s | %s | %.3f | %.3f | %.1f | %.3f | %+.0f%% | %+.0f%% |", p.RateMbit, p.Workers, p.Model, p.Backend,
			m.StepS, m.ComputeS, k, k*q.ComputeS, 100*relErr(k*q.ComputeS, m.ComputeS), 100*relErr(step, m.StepS)))
	}
	if len(rows) == 0 {
		return
	}
	sb.WriteString("\nThe same replay with its compute stretched by the ranks' share of the CPUs (a profile had its threads' CPUs to itself; a rank gets its threads, at most CPUs / workers of them), its step being the replayed allreduce plus the stretched compute:\n\n")
	sb.WriteString("| rate (Mbit/s) | workers | model | backend | measured step (s) | TensorFlow (s) | stretch | stretched compute (s) | compute error | step error |\n")
	sb.WriteString("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|\n")
	sb.WriteString(strings.Join(rows, "\n") + "\n")
}

// fillProfileCPUs sets ProfileCPUs of the points of a results file written
// before it was recorded, from the profiles in dir (the profiles it was
// measured with, if they have not been taken again since).
func fillProfileCPUs(rep *StepsReport, dir string) {
	for i := range rep.Points {
		p := &rep.Points[i]
		if p.ProfileCPUs > 0 {
			continue
		}
		if prof, err := profile.Load(filepath.Join(dir, p.Model+".json")); err == nil {
			p.ProfileCPUs = profileCPUs(prof)
		}
	}
}

func profileCPUs(p *profile.Profile) float64 {
	t := p.Threads
	if p.CPUs > 0 && (t <= 0 || t > p.CPUs) {
		t = p.CPUs
	}
	return float64(t)
}

// report rewrites the table (and plot) of each results file from its JSON:
// an accuracy run has "runs", a step-time run "points".
func report(args []string) error {
	fs := cli.NewFlagSet("rackbench report", "NAME.json...", "Rewrites the table and plot beside each results file of accuracy or steps.")
	if err := cli.ParseArgs(fs, args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		return cli.Usagef("rackbench report", "name the results files: NAME.json, written by accuracy or steps")
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var kind struct {
			Runs   json.RawMessage `json:"runs"`
			Points json.RawMessage `json:"points"`
		}
		if err := json.Unmarshal(b, &kind); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		base := strings.TrimSuffix(path, ".json")
		switch {
		case kind.Runs != nil:
			var rep AccuracyReport
			if err := json.Unmarshal(b, &rep); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			// Files written before target_progress was kept read
			// it as 0: derive the target's fields from the runs.
			for i := range rep.Runs {
				rep.Runs[i].reached(rep.Target)
			}
			err = writeAccuracy(base, &rep)
		case kind.Points != nil:
			var rep StepsReport
			if err := json.Unmarshal(b, &rep); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			fillProfileCPUs(&rep, "profiles")
			err = writeSteps(base, &rep)
		default:
			err = fmt.Errorf("%s is neither an accuracy nor a steps results file (no \"runs\" or \"points\")", path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
