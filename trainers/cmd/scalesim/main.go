// Command scalesim predicts SwitchML's training speedup over a ring
// allreduce in the setting of the SwitchML paper (8 to 64 workers, 10 and
// 100 Gbit/s, GPU compute), from the compute profiles measured here
// (profiles/*.json) and the network model of package scale. It writes
// scale.json, scale.md (the table) and scale.png (speedup against workers
// at 100 Gbit/s).
//
//	go run ./cmd/scalesim --calibrate results/replay/replay.json --out results/scale
//
// GPU compute: every profile is divided by how much faster a Pascal GPU
// (the generation of the paper's P100s) trains the model than this
// machine's CPU did. The factor comes from published forward+backward
// times on a GTX 1080 (github.com/jcjohnson/cnn-benchmarks, batch 16,
// cuDNN 5005): 153.90 ms for ResNet-50, 281.69 ms for VGG-19, against this
// machine's per-example times in profiles/resnet50.json and vgg19.json;
// the other models take the geometric mean of the two.
//
// Two scenarios: every transport at its line rate (the bandwidth argument
// alone), and every transport at the fraction of line rate this project's
// software reached on the emulated rack (--calibrate: the replay's ncf
// point at 1 Gbit/s, whose compute is negligible, so its communication time
// is the allreduces').
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/internal/rackrun"
	"github.com/switchml/switchml-go/trainers/profile"
	"github.com/switchml/switchml-go/trainers/scale"
	"github.com/switchml/switchml-go/wire"
)

// Published forward+backward time of one batch of 16 on a GTX 1080 (Pascal,
// 8.9 TFLOPS FP32; a PCIe P100 has 9.3), cuDNN 5005, from
// github.com/jcjohnson/cnn-benchmarks.
const (
	pascalBatch     = 16
	pascalResNet50S = 0.15390
	pascalVGG19S    = 0.28169
)

// Bytes of framing around a packet's payload on Ethernet: header 14, FCS
// 4, preamble and inter-frame gap 20; then IPv4 20 and UDP 8, or TCP 32
// (with timestamps), or RoCEv2's UDP 8, BTH 12 and ICRC 4.
const (
	ethernet = 14 + 4 + 20
	udpIP    = 20 + 8
	tcpIP    = 20 + 32
	roce     = 20 + 8 + 12 + 4
)

func main() {
	cli.Exit("scalesim", run(os.Args[1:]))
}

// Report is scale.json.
type Report struct {
	Date       string             `json:"date"`
	Command    string             `json:"command"`
	Commit     string             `json:"commit"`
	GPUFactors map[string]float64 `json:"gpu_factors"`
	Transports []scale.Transport  `json:"transports"`
	Calibrated string             `json:"calibrated,omitempty"`
	Points     []scale.Point      `json:"points"`
}

func run(args []string) error {
	fs := cli.NewFlagSet("scalesim", "[flags]", "Predicts SwitchML's training speedup over a ring allreduce at the SwitchML paper's scale, from the measured profiles.")
	models := fs.String("models", "resnet50,vgg19,bert,ncf,lstm,deeplight,ssd,ugatit,deeplight-paper,lstm-paper", "models (profiles/<model>.json)")
	profiles := fs.String("profiles", "profiles", "directory of the profiles")
	workers := fs.String("workers", "8,16,32,64", "job sizes")
	rates := fs.String("rates", "10,100", "line rates in Gbit/s")
	bucketMB := fs.Float64("bucket-mb", 25, "gradient bucket size in MB")
	calibrate := fs.String("calibrate", "", "a replaybench replay.json to take this project's transfer efficiencies from (its ncf points at 1000 Mbit/s)")
	out := fs.String("out", "results/scale", "output directory")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	ns, err := ints(*workers)
	if err != nil {
		return cli.Usage("scalesim", fmt.Errorf("--workers: %w", err))
	}
	rs, err := rackrun.Floats(*rates)
	if err != nil {
		return cli.Usage("scalesim", fmt.Errorf("--rates: %w", err))
	}
	profs := map[string]*profile.Profile{}
	names := strings.Split(*models, ",")
	for _, m := range append([]string{"resnet50", "vgg19"}, names...) {
		if profs[m] != nil {
			continue
		}
		p, err := profile.Load(filepath.Join(*profiles, m+".json"))
		if err != nil {
			return err
		}
		profs[m] = p
	}
	factors := gpuFactors(profs["resnet50"], profs["vgg19"])

	ring := scale.Transport{Name: "ring (TCP, MTU 1500)", Efficiency: 1, Payload: 1448, Header: ethernet + tcpIP, Latency: 20e-6}
	rdma := scale.Transport{Name: "ring (RDMA, MTU 4096)", Efficiency: 1, Payload: 4096, Header: ethernet + roce, Latency: 5e-6}
	sml := scale.Transport{Name: "switchml (256 values per packet)", Efficiency: 1, Payload: 4 * 256, Header: ethernet + udpIP + wire.CompatLen, Latency: 10e-6}
	rep := &Report{Date: time.Now().UTC().Format(time.RFC3339), Command: "scalesim " + strings.Join(args, " "),
		Commit: rackrun.Commit(context.Background()), GPUFactors: map[string]float64{}, Transports: []scale.Transport{ring, rdma, sml}}
	scenarios := []struct {
		name      string
		ring, sml scale.Transport
	}{
		{"line rate, vs TCP ring", ring, sml},
		{"line rate, vs RDMA ring", rdma, sml},
	}
	if *calibrate != "" {
		ncf, err := profile.Load(filepath.Join(*profiles, "ncf.json"))
		if err != nil {
			return fmt.Errorf("--calibrate needs the ncf profile: %w", err)
		}
		ringEff, smlEff, err := efficiencies(*calibrate, ncf, ring, sml)
		if err != nil {
			return err
		}
		rc, sc := ring, sml
		rc.Efficiency, sc.Efficiency = ringEff, smlEff
		rc.Name += fmt.Sprintf(" at %.0f%% of line rate", 100*ringEff)
		sc.Name += fmt.Sprintf(" at %.0f%% of line rate", 100*smlEff)
		rep.Calibrated = fmt.Sprintf("%s: ring at %.2f, switchml at %.2f of line rate (ncf, 1000 Mbit/s)", *calibrate, ringEff, smlEff)
		rep.Transports = append(rep.Transports, rc, sc)
		scenarios = append(scenarios, struct {
			name      string
			ring, sml scale.Transport
		}{"as measured here, vs TCP ring", rc, sc})
	}
	for _, m := range names {
		f := factors[baseModel(profs[m])]
		if f == 0 {
			f = factors["other"]
		}
		rep.GPUFactors[m] = f
		model := scale.FromProfile(profs[m], int(*bucketMB*1e6/4), f)
		for _, sc := range scenarios {
			for _, r := range rs {
				for _, n := range ns {
					pt, err := scale.Compare(model, n, r, sc.ring, sc.sml, sc.name)
					if err != nil {
						return err
					}
					rep.Points = append(rep.Points, pt)
				}
			}
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "scale.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	md := markdown(rep, names, ns, rs, scenarioNames(rep))
	if err := os.WriteFile(filepath.Join(*out, "scale.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := plotScale(filepath.Join(*out, "scale.png"), rep, names, ns, rs[len(rs)-1]); err != nil {
		return err
	}
	fmt.Print(md)
	return nil
}

// baseModel is the measured model a profile comes from.
func baseModel(p *profile.Profile) string {
	if p.DerivedFrom != "" {
		return p.DerivedFrom
	}
	return p.Model
}

// gpuFactors is how many times faster the Pascal GPU trains ResNet-50 and
// VGG-19 than this machine's profiles did, per example, and their geometric
// mean for the other models.
func gpuFactors(resnet, vgg *profile.Profile) map[string]float64 {
	per := func(p *profile.Profile) float64 { return (p.ForwardS + p.BackwardS) / float64(p.Batch) }
	r := per(resnet) / (pascalResNet50S / pascalBatch)
	v := per(vgg) / (pascalVGG19S / pascalBatch)
	return map[string]float64{"resnet50": r, "vgg19": v, "other": math.Sqrt(r * v)}
}

// efficiencies takes, from a replay at 1000 Mbit/s, the fraction of line
// rate the ring and SwitchML reached on ncf: the time the allreduces would
// take at line rate over the time they took (the median comm_s of rank 0).
func efficiencies(path string, p *profile.Profile, ring, sml scale.Transport) (float64, float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var rep struct {
		BucketElems int `json:"bucket_elems"`
		Points      []struct {
			RateMbit float64 `json:"rate_mbit"`
			Model    string  `json:"model"`
			Backend  string  `json:"backend"`
			Workers  int     `json:"workers"`
			Steps    []struct {
				CommS float64 `json:"comm_s"`
			} `json:"steps"`
			Error string `json:"error"`
		} `json:"points"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	eff := map[string]float64{}
	for _, pt := range rep.Points {
		if pt.Model != "ncf" || pt.RateMbit != 1000 || pt.Error != "" || len(pt.Steps) == 0 {
			continue
		}
		var comm []float64
		for _, s := range pt.Steps {
			comm = append(comm, s.CommS)
		}
		measured := median(comm)
		t := map[string]scale.Transport{"ring": ring, "switchml": sml}[pt.Backend]
		if t.Payload == 0 || measured <= 0 {
			continue
		}
		ideal := 0.0
		for _, bk := range p.Buckets(rep.BucketElems) {
			size := 4 * float64(bk.Elems)
			if pt.Backend == "ring" {
				ideal += scale.RingTime(t, size, pt.Workers, 1e9/8)
			} else {
				ideal += scale.SwitchMLTime(t, size, pt.Workers, 1e9/8)
			}
		}
		eff[pt.Backend] = math.Min(1, ideal/measured)
	}
	if eff["ring"] == 0 || eff["switchml"] == 0 {
		return 0, 0, fmt.Errorf("%s has no ncf points of the ring and switchml at 1000 Mbit/s to calibrate from", path)
	}
	return eff["ring"], eff["switchml"], nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func scenarioNames(rep *Report) []string {
	var out []string
	for _, p := range rep.Points {
		if !slices.Contains(out, p.Scenario) {
			out = append(out, p.Scenario)
		}
	}
	return out
}

func find(rep *Report, model, scenario string, n int, rate float64) *scale.Point {
	for i := range rep.Points {
		p := &rep.Points[i]
		if p.Model == model && p.Scenario == scenario && p.Workers == n && p.RateGbit == rate {
			return p
		}
	}
	return nil
}

func markdown(rep *Report, models []string, ns []int, rates []float64, scenarios []string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Predicted SwitchML speedup over a ring allreduce (step time of the ring / step time of SwitchML), GPU compute scaled from this machine's profiles, DDP-style overlap with 25 MB buckets.\n\n```sh\n%s\n```\n\ncommit %s, %s, %d CPUs\n\n", rep.Command, rep.Commit, rep.Date, runtime.NumCPU())
	sb.WriteString("Transports:\n\n")
	for _, t := range rep.Transports {
		fmt.Fprintf(&sb, "- %s: %g payload + %g header bytes per packet, %.0f%% of line rate, %g µs latency\n", t.Name, t.Payload, t.Header, 100*t.Efficiency, t.Latency*1e6)
	}
	if rep.Calibrated != "" {
		fmt.Fprintf(&sb, "\nCalibrated from %s.\n", rep.Calibrated)
	}
	for _, sc := range scenarios {
		fmt.Fprintf(&sb, "\n### %s\n\n| model | parameters | GPU compute/step (s) |", sc)
		for _, r := range rates {
			for _, n := range ns {
				fmt.Fprintf(&sb, " %g G, %d |", r, n)
			}
		}
		sb.WriteString("\n|---|---:|---:|")
		for range rates {
			for range ns {
				sb.WriteString("---:|")
			}
		}
		sb.WriteString("\n")
		for _, m := range models {
			p := find(rep, m, sc, ns[0], rates[0])
			if p == nil {
				continue
			}
			fmt.Fprintf(&sb, "| %s | %.1f M | %.3f |", m, float64(p.Parameters)/1e6, p.ComputeS)
			for _, r := range rates {
				for _, n := range ns {
					if q := find(rep, m, sc, n, r); q != nil {
						fmt.Fprintf(&sb, " %.2fx |", q.Speedup)
					} else {
						sb.WriteString(" — |")
					}
				}
			}
			sb.WriteString("\n")
		}
	}
	sb.WriteString("\nGPU speed factors (this machine's CPU time / Pascal GPU time):")
	for _, m := range models {
		fmt.Fprintf(&sb, " %s %.0f;", m, rep.GPUFactors[m])
	}
	sb.WriteString("\n")
	return sb.String()
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad value %q: want positive integers separated by commas", f)
		}
		out = append(out, v)
	}
	return out, nil
}
