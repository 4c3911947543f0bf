package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	"sync"
	"time"

	"github.com/switchml/switchml-go/benchmarks/progress"
	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/p4/fabric"
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
}

// Report is the file replaybench writes.
type Report struct {
	Date        string   `json:"date"`
	Command     string   `json:"command"`
	Workers     int      `json:"workers"`
	RatesMbit   []string `json:"rates_mbit"`
	BucketElems int      `json:"bucket_elems"`
	StepsTimed  int      `json:"steps_timed"`
	Warmup      int      `json:"warmup_steps"`
	CPUs        int      `json:"cpus"`
	SwitchML    string   `json:"switchml_settings"`
	Points      []Point  `json:"points"`
}

type benchFlags struct {
	models, backends, rates, profiles, out, python, glooScript, prefix, subnet string
	workers, steps, warmup, lanes, window, packetElems, mtu                    int
	bucketMB                                                                   float64
	pointTimeout                                                               time.Duration
	quiet                                                                      bool
}

func bench(ctx context.Context, args []string) error {
	var f benchFlags
	fs := flag.NewFlagSet("replaybench", flag.ContinueOnError)
	fs.StringVar(&f.models, "models", "ncf,deeplight,resnet50,lstm,bert,vgg19,ssd", "models to replay (profiles/<model>.json)")
	fs.StringVar(&f.backends, "backends", "switchml,ring,gloo", "backends: switchml, ring, gloo, exact")
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
	fs.DurationVar(&f.pointTimeout, "point-timeout", 30*time.Minute, "give up on one point after this long")
	fs.BoolVar(&f.quiet, "quiet", false, "no status line of the running point (it is drawn only on a terminal)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the emulated rack needs root")
	}
	bucketElems := int(f.bucketMB * 1e6 / 4)
	var rates []float64
	for _, s := range strings.Split(f.rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("bad rate %q", s)
		}
		rates = append(rates, v)
	}
	models := strings.Split(f.models, ",")
	backends := strings.Split(f.backends, ",")
	profs := map[string]*profile.Profile{}
	for _, m := range models {
		p, err := profile.Load(filepath.Join(f.profiles, m+".json"))
		if err != nil {
			return err
		}
		profs[m] = p
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "replaybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The switch and controller are the project's switchml command.
	swbin := filepath.Join(tmp, "switchml")
	build := exec.CommandContext(ctx, "go", "build", "-o", swbin, "github.com/switchml/switchml-go/cmd/switchml")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building cmd/switchml: %w", err)
	}

	r, err := rack.New(ctx, rack.Config{Workers: f.workers, RateMbit: rates[0], MTU: f.mtu, Prefix: f.prefix, Subnet: f.subnet})
	if err != nil {
		return err
	}
	defer r.Close()
	// The switch and the controller run in the rack's switch namespace;
	// their logs are echoed at warn level and above.
	fab, err := fabric.Start(ctx, r.Fabric(ctx, swbin, fabric.Config{
		MaxElements: max(f.packetElems, 1024), Echo: true,
		SwitchArgs: []string{"--log-level", "warn"}, ControllerArgs: []string{"--log-level", "warn"},
	}))
	if err != nil {
		return err
	}
	defer fab.Close()

	rep := &Report{Date: time.Now().UTC().Format(time.RFC3339), Command: "replaybench " + strings.Join(args, " "),
		Workers: f.workers, BucketElems: bucketElems, StepsTimed: f.steps, Warmup: f.warmup, CPUs: runtime.NumCPU(),
		SwitchML: fmt.Sprintf("%d lanes, window %d, %d values per packet, MTU %d", f.lanes, f.window, f.packetElems, f.mtu)}
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
				pt := Point{RateMbit: rate, Model: m, Backend: be, Workers: f.workers, Parameters: p.Parameters}
				pctx, cancel := context.WithTimeout(ctx, f.pointTimeout)
				res, err := runPoint(pctx, r, &f, exe, filepath.Join(f.profiles, m+".json"), be, run, bucketElems)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					pt.Error = err.Error()
					fmt.Fprintf(line, "   failed: %v\n", err)
				} else {
					pt.Buckets, pt.Steps = res.Buckets, res.Steps
					pt.StepS, pt.ComputeS, pt.ExposedCommS = medians(res.Steps)
					fmt.Fprintf(line, "   step %.3fs, compute %.3fs, exposed comm %.3fs\n", pt.StepS, pt.ComputeS, pt.ExposedCommS)
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

// runPoint runs every worker of one backend in its namespace and returns
// rank 0's result.
func runPoint(ctx context.Context, r *rack.Rack, f *benchFlags, exe, prof, backend string, run, bucketElems int) (*WorkerResult, error) {
	n := f.workers
	cmds := make([]*exec.Cmd, n)
	outs := make([]bytes.Buffer, n)
	errs := make([]bytes.Buffer, n)
	var ring []string
	for i := 0; i < n; i++ {
		ring = append(ring, fmt.Sprintf("%s:%d", r.WorkerIP(i), 21000+run%500*8+i))
	}
	for i := 0; i < n; i++ {
		var c *exec.Cmd
		common := []string{"--steps", strconv.Itoa(f.steps), "--warmup", strconv.Itoa(f.warmup), "--bucket-elems", strconv.Itoa(bucketElems)}
		switch backend {
		case "gloo":
			c = r.Command(ctx, r.WorkerNS(i), f.python, append([]string{f.glooScript, "--profile", prof, "--rank", strconv.Itoa(i),
				"--world", strconv.Itoa(n), "--master-addr", r.WorkerIP(0), "--master-port", strconv.Itoa(29500 + run%500),
				"--ifname", "eth0"}, common...)...)
		case "switchml", "ring":
			c = r.Command(ctx, r.WorkerNS(i), exe, append([]string{"worker", "--profile", prof, "--backend", backend,
				"--rank", strconv.Itoa(i), "--workers", strconv.Itoa(n), "--ring-addrs", strings.Join(ring, ","),
				"--controller", r.SwitchIP() + ":50051", "--job", fmt.Sprintf("replay-%d", run),
				"--lanes", strconv.Itoa(f.lanes), "--window", strconv.Itoa(f.window), "--packet-elements", strconv.Itoa(f.packetElems)}, common...)...)
		default:
			return nil, fmt.Errorf("unknown backend %q", backend)
		}
		c.Stdout = &outs[i]
		if i == 0 {
			c.Stderr = io.MultiWriter(os.Stderr, &errs[i])
		} else {
			c.Stderr = &errs[i]
		}
		c.Cancel = func() error { return c.Process.Kill() }
		c.WaitDelay = 5 * time.Second
		if err := c.Start(); err != nil {
			return nil, err
		}
		cmds[i] = c
	}
	var wg sync.WaitGroup
	werr := make([]error, n)
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			werr[i] = c.Wait()
			if werr[i] != nil {
				// One rank failing leaves the others waiting: stop them.
				for _, o := range cmds {
					if o.ProcessState == nil {
						o.Process.Kill()
					}
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range werr {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %v: %s", i, err, lastLines(errs[i].String(), 5))
		}
	}
	var res WorkerResult
	if err := json.Unmarshal(outs[0].Bytes(), &res); err != nil {
		return nil, fmt.Errorf("rank 0 printed %q: %w", outs[0].String(), err)
	}
	return &res, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
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
	if len(dirs) == 0 {
		return fmt.Errorf("replaybench report: name the result directories (each holding replay.json)")
	}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "replay.json"))
		if err != nil {
			return err
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("%s/replay.json: %w", dir, err)
		}
		var models, backends []string
		var rates []float64
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
		if err := writeReport(dir, &rep, models, backends, rates); err != nil {
			return err
		}
	}
	return nil
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
	for _, rate := range rates {
		fmt.Fprintf(&sb, "### %g Mbit/s per port\n\n| model | parameters | compute/step (s) |", rate)
		for _, b := range backends {
			fmt.Fprintf(&sb, " %s step (s) |", b)
		}
		sb.WriteString(" switchml vs gloo | switchml vs ring |\n|---|---:|---:|")
		for range backends {
			sb.WriteString("---:|")
		}
		sb.WriteString("---:|---:|\n")
		for _, m := range models {
			var params int64
			compute := 0.0
			for _, b := range backends {
				if p := find(rep, rate, m, b); p != nil {
					params, compute = p.Parameters, p.ComputeS
				}
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
			sb.WriteString("\n")
		}
		sb.WriteString("\n")
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
