package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/internal/progress"
	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/internal/rackrun"
	"github.com/switchml/switchml-go/trainers/profile"
)

// Point is one (rate, model, backend) measurement.
type Point struct {
	RateMbit   float64 `json:"rate_mbit"`
	Model      string  `json:"model"`
	Backend    string  `json:"backend"`
	Workers    int     `json:"workers"`
	Parameters int64   `json:"parameters"`
	Buckets    int     `json:"buckets"`
	// Medians over the timed steps of rank 0.
	ComputeS     float64              `json:"compute_s"`
	StepS        float64              `json:"step_s"`
	ExposedCommS float64              `json:"exposed_comm_s"`
	Steps        []profile.StepResult `json:"steps"`
	Error        string               `json:"error,omitempty"`
	// Run is the index in Report.Runs of the run that measured the point.
	Run int `json:"run"`
	// Others are the heavy processes that ran on the machine at the start
	// or the end of the point: they shared its CPUs.
	Others []string `json:"others,omitempty"`
	// Gradients is the directory of the recorded gradients the buckets
	// held (empty: constants).
	Gradients string `json:"gradients,omitempty"`
	// Switch is rank 0's switchml counters over the point's whole run.
	Switch *SwitchStats `json:"switch,omitempty"`
}

// RunInfo says how a run was made: the command and the commit of the code.
type RunInfo struct {
	Command string `json:"command"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
}

// Report is the file replaybench writes. Date, Command and Commit are
// those of the last run; Runs lists every run whose points it holds (more
// than one after merge).
type Report struct {
	Date        string    `json:"date"`
	Command     string    `json:"command"`
	Commit      string    `json:"commit"`
	Runs        []RunInfo `json:"runs"`
	Workers     int       `json:"workers"`
	RatesMbit   []string  `json:"rates_mbit"`
	BucketElems int       `json:"bucket_elems"`
	// MaxBufferElems, when positive, is the buffer larger buckets went
	// through in pieces.
	MaxBufferElems int    `json:"max_buffer_elems,omitempty"`
	StepsTimed     int    `json:"steps_timed"`
	Warmup         int    `json:"warmup_steps"`
	CPUs           int    `json:"cpus"`
	SwitchML       string `json:"switchml_settings"`
	// Gradients is the --gradients directory (empty: constants).
	Gradients string  `json:"gradients,omitempty"`
	Points    []Point `json:"points"`
}

type benchFlags struct {
	models, backends, rates, profiles, out, python, glooScript, prefix, subnet, gradients string
	workers, steps, warmup, lanes, window, packetElems, mtu                               int
	bucketMB, maxBufferMB                                                                 float64
	pointTimeout, waitQuiet                                                               time.Duration
	quiet                                                                                 bool
}

// register defines the flags of a run into f.
func (f *benchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.models, "models", "ncf,deeplight,resnet50,lstm,bert,vgg19,ssd", "models to replay (profiles/<model>.json)")
	fs.StringVar(&f.backends, "backends", "switchml,ring,gloo", "backends: switchml, switchml-sparse (the block-sparse mode), ring, gloo")
	fs.StringVar(&f.rates, "rates", "200,1000", "port rates in Mbit/s")
	fs.StringVar(&f.profiles, "profiles", "profiles", "directory of the profiles")
	fs.StringVar(&f.out, "out", "results/replay", "output directory (replay.json, replay.md, replay.png)")
	fs.StringVar(&f.python, "python", "/usr/bin/python3", "python with torch for the Gloo baseline")
	fs.StringVar(&f.glooScript, "gloo-script", "scripts/replay_gloo.py", "the Gloo replay script")
	fs.StringVar(&f.prefix, "rack-prefix", "smlrp", "name prefix of the rack's namespaces")
	fs.StringVar(&f.subnet, "rack-subnet", "10.214.0.0/24", "the rack's subnet")
	fs.IntVar(&f.workers, "workers", 8, "workers")
	fs.IntVar(&f.steps, "steps", 2, "timed steps per point")
	fs.IntVar(&f.warmup, "warmup", 1, "untimed steps before them")
	fs.IntVar(&f.lanes, "lanes", 4, "switchml lanes per worker")
	fs.IntVar(&f.window, "window", 32, "switchml packets in flight per lane")
	fs.IntVar(&f.packetElems, "packet-elements", 256, "switchml values per packet (256 = 1 KiB payload, what a Tofino takes with recirculation)")
	fs.IntVar(&f.mtu, "mtu", 1500, "MTU of every rack port (9000 for jumbo frames; --packet-elements 2048 needs it)")
	fs.Float64Var(&f.bucketMB, "bucket-mb", 25, "gradient bucket size in MB (DDP's default is 25)")
	fs.Float64Var(&f.maxBufferMB, "max-buffer-mb", 0, "allreduce a bucket larger than this many MB in pieces through one buffer of this size (every backend), so that gradients of hundreds of millions of values fit in memory on every worker (0 = whole buckets)")
	fs.DurationVar(&f.pointTimeout, "point-timeout", 30*time.Minute, "give up on one point after this long")
	fs.DurationVar(&f.waitQuiet, "wait-quiet", 30*time.Minute, "before each point, wait up to this long for other benchmarks, tests and training on the machine to end (0: do not wait)")
	fs.BoolVar(&f.quiet, "quiet", false, "no status line of the running point (it is drawn only on a terminal)")
	fs.StringVar(&f.gradients, "gradients", "", "fill the buckets of rank r with the recorded gradient DIR/<model>/rank<r>.f32 (the density command's --dump) instead of constants, with every backend; a model without DIR/<model> replays constants")
}

func bench(ctx context.Context, args []string) error {
	var f benchFlags
	fs := cli.NewFlagSet("replaybench", "[flags] | worker|report|merge|derive|profiles [flags]",
		"Replays the models' compute profiles with the real allreduce on the emulated rack (needs root).\n"+
			"The subcommands: report rewrites a run's table and plot, merge combines runs, derive scales a profile,\n"+
			"profiles lists the profiles; run 'replaybench <subcommand> --help' for their flags.")
	f.register(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the emulated rack needs root")
	}
	bucketElems := int(f.bucketMB * 1e6 / 4)
	rates, err := rackrun.Floats(f.rates)
	if err != nil {
		return fmt.Errorf("--rates: %w", err)
	}
	models := strings.Split(f.models, ",")
	backends := strings.Split(f.backends, ",")
	for _, b := range backends {
		if !slices.Contains([]string{"switchml", "switchml-sparse", "ring", "gloo"}, b) {
			return cli.Usagef("replaybench", "--backends: unknown backend %q: want switchml, switchml-sparse, ring or gloo", b)
		}
	}
	profs := map[string]*profile.Profile{}
	for _, m := range models {
		p, err := profile.Load(filepath.Join(f.profiles, m+".json"))
		if err != nil {
			return err
		}
		profs[m] = p
	}
	grads, gradErr := recordedGradients(f.gradients, profs, bucketElems, f.workers, os.Stderr)
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The switch and the controller run in the rack's switch namespace;
	// their logs are echoed at warn level and above.
	r, err := rackrun.Start(ctx, rack.Config{Workers: f.workers, RateMbit: rates[0], MTU: f.mtu, Prefix: f.prefix, Subnet: f.subnet},
		harness.Config{MaxElements: max(f.packetElems, 1024), Echo: true,
			SwitchArgs: []string{"--log-level", "warn"}, ControllerArgs: []string{"--log-level", "warn"}})
	if err != nil {
		return err
	}
	defer r.Close()

	run0 := RunInfo{Command: "replaybench " + strings.Join(args, " "), Commit: rackrun.Commit(ctx), Date: time.Now().UTC().Format(time.RFC3339)}
	rep := &Report{Date: run0.Date, Command: run0.Command, Commit: run0.Commit, Runs: []RunInfo{run0},
		Workers: f.workers, BucketElems: bucketElems, MaxBufferElems: maxBufferElems(&f), StepsTimed: f.steps, Warmup: f.warmup, CPUs: runtime.NumCPU(),
		SwitchML: fmt.Sprintf("%d lanes, window %d, %d values per packet, MTU %d", f.lanes, f.window, f.packetElems, f.mtu), Gradients: f.gradients}
	for _, rate := range rates {
		rep.RatesMbit = append(rep.RatesMbit, strconv.FormatFloat(rate, 'f', -1, 64))
	}
	run := 0
	total := len(rates) * len(models) * len(backends)
	line := progress.New(os.Stderr, f.quiet)
	defer line.Done()
	begin := time.Now()
	for _, rate := range rates {
		if err := r.SetRate(rate); err != nil {
			return err
		}
		for _, m := range models {
			p := profs[m]
			for _, be := range backends {
				run++
				fmt.Fprintf(line, "== %g Mbit/s, %s, %s\n", rate, m, be)
				n, started, elapsed, done := run, time.Now(), time.Since(begin), float64(run-1)/float64(total)
				line.Show(func() string {
					return fmt.Sprintf("[%d/%d] %g Mbit/s, %s, %s: %s; %s", n, total, rate, m, be,
						progress.Round(time.Since(started)), progress.Left(done, elapsed))
				})
				rackrun.WaitQuiet(ctx, f.waitQuiet, func(s string) { fmt.Fprintln(line, "   "+s) })
				pt := Point{RateMbit: rate, Model: m, Backend: be, Workers: f.workers, Parameters: p.Parameters, Others: rackrun.Others(), Gradients: grads[m]}
				var res *WorkerResult
				err := gradErr[m]
				if err == nil {
					pctx, cancel := context.WithTimeout(ctx, f.pointTimeout)
					res, err = runPoint(pctx, r, &f, exe, filepath.Join(f.profiles, m+".json"), grads[m], be, run, bucketElems)
					cancel()
				}
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					pt.Error = err.Error()
					fmt.Fprintf(line, "   failed: %v\n", err)
				} else {
					pt.Buckets, pt.Steps, pt.Switch = res.Buckets, res.Steps, res.Switch
					pt.StepS, pt.ComputeS, pt.ExposedCommS = medians(res.Steps)
					fmt.Fprintf(line, "   step %.3fs, compute %.3fs, exposed comm %.3fs\n", pt.StepS, pt.ComputeS, pt.ExposedCommS)
				}
				for _, o := range rackrun.Others() {
					if !slices.Contains(pt.Others, o) {
						pt.Others = append(pt.Others, o)
					}
				}
				rep.Points = append(rep.Points, pt)
				if err := writeReport(f.out, rep, models, backends, rates); err != nil {
					return err
				}
			}
		}
	}
	fmt.Print(markdown(rep, models, backends, rates))
	return nil
}

// recordedGradients finds each model's recorded gradients under dir:
// grads[m] is the model's directory, gradErr[m] why its files do not fit
// the replay (which fails the model's points rather than replay other
// data than asked). A model without a directory replays constants; log
// says so.
func recordedGradients(dir string, profs map[string]*profile.Profile, bucketElems, workers int, log io.Writer) (grads map[string]string, gradErr map[string]error) {
	grads, gradErr = map[string]string{}, map[string]error{}
	if dir == "" {
		return grads, gradErr
	}
	for m, p := range profs {
		md := filepath.Join(dir, m)
		if _, err := os.Stat(md); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(log, "replaybench: %s: no recorded gradients in %s: it replays constants\n", m, md)
			continue
		}
		grads[m] = md
		if _, err := profile.OpenGradients(md, p, p.Buckets(bucketElems), workers); err != nil {
			gradErr[m] = err
			fmt.Fprintf(log, "replaybench: %s: the recorded gradients do not fit the replay, its points fail: %v\n", m, err)
		}
	}
	return grads, gradErr
}

func maxBufferElems(f *benchFlags) int { return int(f.maxBufferMB * 1e6 / 4) }

// runPoint runs every worker of one backend in its namespace and returns
// rank 0's result.
func runPoint(ctx context.Context, r *rackrun.Rack, f *benchFlags, exe, prof, gradients, backend string, run, bucketElems int) (*WorkerResult, error) {
	n := f.workers
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	var ring []string
	for i := 0; i < n; i++ {
		ring = append(ring, fmt.Sprintf("%s:%d", r.WorkerIP(i), 21000+run%500*8+i))
	}
	for i := 0; i < n; i++ {
		var c *exec.Cmd
		common := []string{"--steps", strconv.Itoa(f.steps), "--warmup", strconv.Itoa(f.warmup), "--bucket-elems", strconv.Itoa(bucketElems),
			"--max-buffer-elems", strconv.Itoa(maxBufferElems(f)), "--packet-elements", strconv.Itoa(f.packetElems)}
		if gradients != "" {
			common = append(common, "--gradients", gradients)
		}
		switch backend {
		case "gloo":
			c = r.Command(ctx, r.WorkerNS(i), f.python, append([]string{f.glooScript, "--profile", prof, "--rank", strconv.Itoa(i),
				"--world", strconv.Itoa(n), "--master-addr", r.WorkerIP(0), "--master-port", strconv.Itoa(29500 + run%500),
				"--ifname", "eth0"}, common...)...)
		case "switchml", "switchml-sparse", "ring":
			c = r.Command(ctx, r.WorkerNS(i), exe, append([]string{"worker", "--profile", prof, "--backend", backend,
				"--rank", strconv.Itoa(i), "--workers", strconv.Itoa(n), "--ring-addrs", strings.Join(ring, ","),
				"--controller", r.Controller(), "--job", fmt.Sprintf("replay-%d", run),
				"--lanes", strconv.Itoa(f.lanes), "--window", strconv.Itoa(f.window)}, common...)...)
		default:
			return nil, fmt.Errorf("unknown backend %q", backend)
		}
		c.Stdout = &outs[i]
		cmds[i] = c
	}
	if err := rackrun.Run(cmds, os.Stderr); err != nil {
		return nil, err
	}
	var res WorkerResult
	if err := json.Unmarshal(outs[0].Bytes(), &res); err != nil {
		return nil, fmt.Errorf("rank 0 printed %q: %w", outs[0].String(), err)
	}
	return &res, nil
}

func writeReport(dir string, rep *Report, models, backends []string, rates []float64) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "replay.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "replay.md"), []byte(markdown(rep, models, backends, rates)), 0o644); err != nil {
		return err
	}
	return plotSpeedups(filepath.Join(dir, "replay.png"), rep, models, rates)
}

// report rewrites replay.md and replay.png of each directory from its
// replay.json.
func report(dirs []string) error {
	fs := cli.NewFlagSet("replaybench report", "DIR...", "Rewrites the table and plot of each run directory from its replay.json.")
	if err := cli.ParseArgs(fs, dirs); err != nil {
		return err
	}
	dirs = fs.Args()
	if len(dirs) == 0 {
		return cli.Usagef("replaybench report", "name the run directories, each holding replay.json")
	}
	for _, dir := range dirs {
		rep, err := loadReport(filepath.Join(dir, "replay.json"))
		if err != nil {
			return err
		}
		models, backends, rates := rep.axes()
		if err := writeReport(dir, rep, models, backends, rates); err != nil {
			return err
		}
	}
	return nil
}

// axes lists the models, backends and rates of the points, in the order
// they were measured.
func (rep *Report) axes() (models, backends []string, rates []float64) {
	for _, p := range rep.Points {
		if !slices.Contains(models, p.Model) {
			models = append(models, p.Model)
		}
		if !slices.Contains(backends, p.Backend) {
			backends = append(backends, p.Backend)
		}
		if !slices.Contains(rates, p.RateMbit) {
			rates = append(rates, p.RateMbit)
		}
	}
	return models, backends, rates
}

func find(rep *Report, rate float64, model, backend string) *Point {
	for i := range rep.Points {
		p := &rep.Points[i]
		if p.RateMbit == rate && p.Model == model && p.Backend == backend && p.Error == "" {
			return p
		}
	}
	return nil
}

func markdown(rep *Report, models, backends []string, rates []float64) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Profile replay, %d workers on the emulated rack, %d timed steps per point after %d warm-up (medians), buckets of %d values; switchml: %s.\n\n",
		rep.Workers, rep.StepsTimed, rep.Warmup, rep.BucketElems, rep.SwitchML)
	if rep.Gradients != "" {
		fmt.Fprintf(&sb, "The buckets held the recorded gradients of %s/<model> (rank r's file rank<r>.f32), with every backend, and every value of the results was checked against the sum of every rank's file; the points whose data says constants had none.\n\n", rep.Gradients)
	}
	if rep.MaxBufferElems > 0 {
		fmt.Fprintf(&sb, "Buckets of more than %d values went through one buffer of that size in pieces, one allreduce per piece, with every backend.\n\n", rep.MaxBufferElems)
	}
	runs := rep.Runs
	if len(runs) == 0 {
		runs = []RunInfo{{Command: rep.Command, Commit: rep.Commit, Date: rep.Date}}
	}
	for i, r := range runs {
		fmt.Fprintf(&sb, "Run %d, commit %s, %s:\n\n```sh\n%s\n```\n\n", i+1, r.Commit, r.Date, r.Command)
	}
	multi := len(runs) > 1
	for _, rate := range rates {
		fmt.Fprintf(&sb, "### %g Mbit/s per port\n\n| model | parameters | compute/step (s) |", rate)
		for _, b := range backends {
			fmt.Fprintf(&sb, " %s step (s) |", b)
		}
		sb.WriteString(" switchml vs gloo | switchml vs ring |")
		if multi {
			sb.WriteString(" run |")
		}
		sb.WriteString("\n|---|---:|---:|")
		for range backends {
			sb.WriteString("---:|")
		}
		sb.WriteString("---:|---:|")
		if multi {
			sb.WriteString("---|")
		}
		sb.WriteString("\n")
		for _, m := range models {
			var params int64
			compute, any := 0.0, false
			for _, b := range backends {
				if p := find(rep, rate, m, b); p != nil {
					params, compute, any = p.Parameters, p.ComputeS, true
				}
			}
			if !any {
				continue // not measured at this rate (yet)
			}
			fmt.Fprintf(&sb, "| %s | %s | %.3f |", m, commas(params), compute)
			for _, b := range backends {
				if p := find(rep, rate, m, b); p != nil {
					fmt.Fprintf(&sb, " %.3f |", p.StepS)
				} else {
					sb.WriteString(" — |")
				}
			}
			for _, base := range []string{"gloo", "ring"} {
				s, o := find(rep, rate, m, "switchml"), find(rep, rate, m, base)
				if s != nil && o != nil && s.StepS > 0 {
					fmt.Fprintf(&sb, " %.2fx |", o.StepS/s.StepS)
				} else {
					sb.WriteString(" — |")
				}
			}
			if multi {
				var ids []string
				for _, b := range backends {
					if p := find(rep, rate, m, b); p != nil && !slices.Contains(ids, strconv.Itoa(p.Run+1)) {
						ids = append(ids, strconv.Itoa(p.Run+1))
					}
				}
				fmt.Fprintf(&sb, " %s |", strings.Join(ids, ", "))
			}
			sb.WriteString("\n")
		}
		sb.WriteString("\n")
	}
	if slices.Contains(backends, "switchml-sparse") {
		sparseTables(&sb, rep, models, backends, rates)
	}
	var shared []string
	for _, p := range rep.Points {
		if others := rackrun.Heavy(p.Others); len(others) > 0 {
			shared = append(shared, fmt.Sprintf("- %g Mbit/s, %s, %s: %s", p.RateMbit, p.Model, p.Backend, strings.Join(others, "; ")))
		}
	}
	if len(shared) > 0 {
		sb.WriteString("Other heavy processes on the machine at the start or the end of a point (they shared the CPUs):\n\n" + strings.Join(shared, "\n") + "\n")
	}
	return sb.String()
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// sparseTables writes, per rate, each model's step and exposed
// communication per backend, with the speedup of switchml-sparse over
// each (its step time divided into the other's), and what rank 0's
// switchml session sent.
func sparseTables(sb *strings.Builder, rep *Report, models, backends []string, rates []float64) {
	for _, rate := range rates {
		fmt.Fprintf(sb, "### switchml-sparse against the others, %g Mbit/s per port\n\n", rate)
		sb.WriteString("| model | data | backend | step (s) | exposed comm (s) | switchml-sparse speedup | rank 0 sent (MB) | dense calls / allreduces |\n")
		sb.WriteString("|---|---|---|---:|---:|---:|---:|---:|\n")
		for _, m := range models {
			sparse := find(rep, rate, m, "switchml-sparse")
			for _, b := range backends {
				p := find(rep, rate, m, b)
				if p == nil {
					continue
				}
				data := "constants"
				if p.Gradients != "" {
					data = "recorded"
				}
				speedup := "—"
				if sparse != nil && b != "switchml-sparse" && sparse.StepS > 0 {
					speedup = fmt.Sprintf("%.2fx", p.StepS/sparse.StepS)
				}
				sent, dense := "—", "—"
				if p.Switch != nil {
					sent = fmt.Sprintf("%.1f", float64(p.Switch.SentBytes)/1e6)
					dense = fmt.Sprintf("%d / %d", p.Switch.DenseCalls, p.Switch.AllReduces)
				}
				fmt.Fprintf(sb, "| %s | %s | %s | %.3f | %.3f | %s | %s | %s |\n", m, data, b, p.StepS, p.ExposedCommS, speedup, sent, dense)
			}
		}
		sb.WriteString("\nSent and dense calls count rank 0's whole run: the barriers, the warm-up and the timed steps.\n\n")
	}
}
