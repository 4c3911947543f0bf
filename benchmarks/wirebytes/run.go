// Package wirebytes measures the bytes the workers of a job put on the
// wire per element, on the 32-bit and the 16-bit wire: a software switch
// and its controller on loopback (internal/harness), one job per case of
// worker processes (`switchml allreduce`, verifying every sum), and an
// AF_PACKET capture on loopback that counts every UDP datagram they send
// to the switch's data-plane port. The counts come from the packets, not
// from the workers: their own count (sent_bytes) is checked against them.
// `switchml wire-bytes` is its command line; benchmarks/results/
// wire16-capture holds a run.
package wirebytes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/internal/harness"
)

// Case is one job of a run: its element type and the width asked for.
type Case struct {
	DType string `json:"dtype"`
	// WireBitsFlag is the workers' --wire-bits: 0 takes the type's
	// width (16 for bfloat16 and float16, 32 for float32).
	WireBitsFlag int `json:"wire_bits_flag"`
}

// Name is how tables name c: its type and, when set, the width asked for.
func (c Case) Name() string {
	if c.WireBitsFlag == 0 {
		return c.DType
	}
	return fmt.Sprintf("%s --wire-bits %d", c.DType, c.WireBitsFlag)
}

// DefaultCases are float32 (32 bits), bfloat16 (16 bits), float32 at 16
// bits and bfloat16 at 32 bits; the first is the others' reference.
var DefaultCases = []Case{{"float32", 0}, {"bfloat16", 0}, {"float32", 16}, {"bfloat16", 32}}

// Config describes a run.
type Config struct {
	Workers, Elements int // ranks of each job, and the elements each reduces
	Warmup, Iters     int // untimed, then timed allreduce calls of each job
	// Lanes, Window and PacketElements are the workers' flags (0: theirs
	// and the switch's defaults).
	Lanes, Window, PacketElements int
	Cases                         []Case // DefaultCases when empty
	// Command returns the command that runs `switchml ARGS...`
	// (required).
	Command func(args ...string) *exec.Cmd
	Verbose bool      // echo every process's log
	Out     io.Writer // a line per case, as it ends (nil: none)
}

func (c *Config) check() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("--workers %d: want at least 1", c.Workers)
	case c.Elements < 1:
		return fmt.Errorf("--elements %d: want at least 1", c.Elements)
	case c.Iters < 1 || c.Warmup < 0:
		return fmt.Errorf("--iters %d, --warmup %d: want at least one timed call, and no negative warm-up", c.Iters, c.Warmup)
	case c.Warmup+c.Iters > 255:
		return fmt.Errorf("--warmup %d and --iters %d: at most 255 calls in all (the header tells calls apart by 8 bits of their number)", c.Warmup, c.Iters)
	case c.Command == nil:
		return errors.New("wirebytes: Config.Command is required")
	}
	if len(c.Cases) == 0 {
		c.Cases = DefaultCases
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// Results are a run's: its settings, and per case what was captured and
// what the workers reported. capture.json holds them.
type Results struct {
	Workers        int            `json:"workers"`
	Elements       int            `json:"elements"`
	Warmup         int            `json:"warmup"`
	Iters          int            `json:"iters"`
	Lanes          int            `json:"lanes,omitempty"`
	Window         int            `json:"window,omitempty"`
	PacketElements int            `json:"packet_elements_flag,omitempty"`
	Command        string         `json:"command,omitempty"` // the command line that made it
	Environment    map[string]any `json:"environment,omitempty"`
	Cases          []CaseResult   `json:"cases"`
}

// CaseResult is one case's job.
type CaseResult struct {
	Case
	// WireBits is the width the ranks reported they used, and
	// PacketElements the 32-bit words of their packets.
	WireBits       int  `json:"wire_bits"`
	PacketElements int  `json:"packet_elements"`
	Verified       bool `json:"verified"` // every rank checked every sum
	// Calls are what the capture counted per allreduce call, in the
	// order they ran: Warmup calls, then the timed ones. Other are the
	// datagrams to the port that were no SwitchML packet.
	Calls []Call `json:"calls"`
	Other Bytes  `json:"other"`
	// ReportedBytes is the ranks' own count of the bytes they sent
	// (sent_bytes, every call), summed.
	ReportedBytes uint64                    `json:"reported_bytes"`
	Reports       []benchmarks.WorkerReport `json:"reports"`
}

// Run starts a switch and a controller, runs each case's job under a
// capture and returns what was counted. A job whose ranks fail, or whose
// capture lost packets, ends the run with an error.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fab, err := harness.Start(ctx, harness.Config{Command: cfg.Command, Echo: cfg.Verbose})
	if err != nil {
		return nil, err
	}
	defer fab.Close()
	dp, err := netip.ParseAddrPort(fab.DataplaneAddr())
	if err != nil || !dp.Addr().IsLoopback() {
		return nil, fmt.Errorf("wirebytes: the switch's data plane %q is not on loopback, where the capture reads", fab.DataplaneAddr())
	}
	res := &Results{Workers: cfg.Workers, Elements: cfg.Elements, Warmup: cfg.Warmup, Iters: cfg.Iters,
		Lanes: cfg.Lanes, Window: cfg.Window, PacketElements: cfg.PacketElements, Environment: benchmarks.Environment()}
	for i, c := range cfg.Cases {
		cr, err := runCase(ctx, &cfg, fab.ControllerAddr(), int(dp.Port()), fmt.Sprintf("wire-bytes-%d", i), c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name(), err)
		}
		res.Cases = append(res.Cases, cr)
		fmt.Fprintf(cfg.Out, "%-26s %2d bits  %.3f bytes per element (first transmissions, median of %d calls)\n",
			c.Name(), cr.WireBits, medianOf(res.PerElement(len(res.Cases)-1, false)), cfg.Iters)
	}
	return res, nil
}

// runCase runs one case's job under a capture.
func runCase(ctx context.Context, cfg *Config, controller string, port int, job string, c Case) (CaseResult, error) {
	cr := CaseResult{Case: c}
	capture, err := StartCapture("lo", port)
	if err != nil {
		return cr, err
	}
	reps, workerErr := runWorkers(ctx, cfg, controller, job, c)
	calls, other, err := capture.Stop()
	if workerErr != nil {
		return cr, workerErr
	}
	if err != nil {
		return cr, err
	}
	if len(calls) != cfg.Warmup+cfg.Iters {
		return cr, fmt.Errorf("the capture saw packets of %d allreduce calls, want %d (--warmup %d, --iters %d)", len(calls), cfg.Warmup+cfg.Iters, cfg.Warmup, cfg.Iters)
	}
	cr.Calls, cr.Other, cr.Reports = calls, other, reps
	cr.Verified = true
	for _, rep := range reps {
		if rep.WireBits != reps[0].WireBits || rep.PacketElements != reps[0].PacketElements {
			return cr, fmt.Errorf("rank %d used %d bits and %d words per packet, rank 0 %d and %d", rep.Rank, rep.WireBits, rep.PacketElements, reps[0].WireBits, reps[0].PacketElements)
		}
		cr.Verified = cr.Verified && rep.Verified
		cr.ReportedBytes += rep.SentBytes
	}
	cr.WireBits, cr.PacketElements = reps[0].WireBits, reps[0].PacketElements
	return cr, nil
}

// runWorkers runs a job's ranks to the end and returns their reports.
func runWorkers(ctx context.Context, cfg *Config, controller, job string, c Case) ([]benchmarks.WorkerReport, error) {
	ws := make([]*harness.Proc, cfg.Workers)
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.Stop(5 * time.Second)
			}
		}
	}()
	for r := range ws {
		args := []string{"allreduce", "--controller", controller, "--job", job, "--rank", fmt.Sprint(r), "--workers", fmt.Sprint(cfg.Workers),
			"--elements", fmt.Sprint(cfg.Elements), "--dtype", c.DType, "--wire-bits", fmt.Sprint(c.WireBitsFlag),
			"--warmup", fmt.Sprint(cfg.Warmup), "--iters", fmt.Sprint(cfg.Iters), "--progress", "off", "--json"}
		for _, f := range []struct {
			name string
			v    int
		}{{"--lanes", cfg.Lanes}, {"--window", cfg.Window}, {"--packet-elements", cfg.PacketElements}} {
			if f.v > 0 {
				args = append(args, f.name, fmt.Sprint(f.v))
			}
		}
		var err error
		if ws[r], err = harness.StartProc(fmt.Sprintf("rank%d", r), cfg.Verbose, cfg.Command(args...)); err != nil {
			return nil, err
		}
	}
	reps := make([]benchmarks.WorkerReport, len(ws))
	var failed []string
	for r, w := range ws {
		select {
		case <-w.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		werr := w.Wait()
		if jerr := json.Unmarshal(bytes.TrimSpace(w.Stdout()), &reps[r]); jerr != nil || werr != nil || !reps[r].Verified {
			msg := reps[r].Error
			if msg == "" {
				msg = lastLine(w.Logs())
			}
			failed = append(failed, fmt.Sprintf("rank %d (exit %v, verified %v): %s", r, werr, reps[r].Verified, msg))
		}
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("%d of %d ranks failed: %s", len(failed), len(ws), strings.Join(failed, "; "))
	}
	return reps, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// medianOf is the median of v (at least one value).
func medianOf(v []float64) float64 {
	return benchmarks.Median(slices.Sorted(slices.Values(v)))
}

// PerElement is case i's bytes per element in each timed call: what the
// workers sent once (first transmissions), over workers times elements;
// UDP payloads, or frames (with the Ethernet, IPv4 and UDP headers of
// each datagram) when frames is set.
func (r *Results) PerElement(i int, frames bool) []float64 {
	var v []float64
	for _, c := range r.Cases[i].Calls[r.Warmup:] {
		b := c.First.Payload
		if frames {
			b = c.First.Frames
		}
		v = append(v, float64(b)/float64(r.Workers*r.Elements))
	}
	return v
}

// Retransmitted is the share of case i's timed calls' datagrams that
// were retransmissions.
func (r *Results) Retransmitted(i int) float64 {
	var all, first uint64
	for _, c := range r.Cases[i].Calls[r.Warmup:] {
		all, first = all+c.All.Datagrams, first+c.First.Datagrams
	}
	if all == 0 {
		return 0
	}
	return float64(all-first) / float64(all)
}

// Captured is the UDP payload bytes of every SwitchML datagram case i's
// workers sent, warm-up and retransmissions included: what the workers'
// own count (ReportedBytes) should be.
func (r *Results) Captured(i int) uint64 {
	var b uint64
	for _, c := range r.Cases[i].Calls {
		b += c.All.Payload
	}
	return b
}

// Reference is the index of the case the others are compared with: the
// first float32 case on the 32-bit wire, or -1.
func (r *Results) Reference() int {
	return slices.IndexFunc(r.Cases, func(c CaseResult) bool { return c.DType == "float32" && c.WireBits == 32 })
}

// Ratio is case i's median bytes per element (UDP payload) over the
// reference case's; false without a reference.
func (r *Results) Ratio(i int) (float64, bool) {
	ref := r.Reference()
	if ref < 0 {
		return 0, false
	}
	return medianOf(r.PerElement(i, false)) / medianOf(r.PerElement(ref, false)), true
}

// TATs are case i's timed calls' times, each the slowest rank's.
func (r *Results) TATs(i int) []float64 {
	reps := r.Cases[i].Reports
	v := make([]float64, len(reps[0].TATs))
	for _, rep := range reps {
		for k, t := range rep.TATs {
			if k < len(v) {
				v[k] = max(v[k], t)
			}
		}
	}
	return v
}
