package wirebytes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchml/switchml-go/benchmarks"
)

// Files a run writes in its directory: the results, and the summary
// written from them.
const (
	ResultsFile = "capture.json"
	SummaryFile = "summary.md"
)

// Write writes r as ResultsFile in dir, and the summary written from it as
// SummaryFile, which it returns.
func (r *Results) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return writeSummary(dir, r)
}

// Report rewrites SummaryFile in dir from its ResultsFile, and returns it.
func Report(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	if err != nil {
		return "", err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, ResultsFile), err)
	}
	if err := r.check(); err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, ResultsFile), err)
	}
	return writeSummary(dir, &r)
}

// check refuses results a summary cannot be written from.
func (r *Results) check() error {
	if r.Workers < 1 || r.Elements < 1 || r.Iters < 1 || r.Warmup < 0 {
		return fmt.Errorf("workers %d, elements %d, iters %d, warmup %d: not a run", r.Workers, r.Elements, r.Iters, r.Warmup)
	}
	for _, c := range r.Cases {
		if len(c.Calls) != r.Warmup+r.Iters || len(c.Reports) == 0 {
			return fmt.Errorf("%s: %d calls and %d reports, want %d calls and a report per rank", c.Name(), len(c.Calls), len(c.Reports), r.Warmup+r.Iters)
		}
	}
	return nil
}

func writeSummary(dir string, r *Results) (string, error) {
	s := r.Summary()
	return s, os.WriteFile(filepath.Join(dir, SummaryFile), []byte(s), 0o644)
}

// Summary is the Markdown table of r: per case, the bytes per element its
// workers sent, and their ratio to float32's.
func (r *Results) Summary() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Bytes on the wire per element: the 32-bit and the 16-bit wire\n\n")
	p("%d workers on loopback, each reducing %d elements, through a software switch; per case one job of %d warm-up and %d timed allreduce calls, every sum verified by every rank. ",
		r.Workers, r.Elements, r.Warmup, r.Iters)
	p("An AF_PACKET socket on `lo` counted every UDP datagram the workers sent to the switch's data-plane port (a segmentation-offloaded run as the datagrams it carries), and a retransmission by its lane and packet id. ")
	p("Bytes per element: what the workers sent once per timed call, over workers x elements; median (smallest-largest) over the %d timed calls. Payload is the UDP payload (SwitchML header and values); frames add each datagram's UDP, IPv4 and Ethernet headers.\n\n", r.Iters)
	p("| case | wire | values per packet | bytes per element, payload | bytes per element, frames | ratio to float32 | retransmitted | captured = sent_bytes | verified | TAT (s) |\n")
	p("|---|---|---|---|---|---|---|---|---|---|\n")
	for i, c := range r.Cases {
		values := c.PacketElements
		if c.WireBits == 16 {
			values *= 2
		}
		ratio := "-"
		if x, ok := r.Ratio(i); ok {
			ratio = fmt.Sprintf("%.3f", x)
		}
		match := "yes"
		if got := r.Captured(i); got != c.ReportedBytes {
			match = fmt.Sprintf("no: %d captured, %d reported", got, c.ReportedBytes)
		}
		p("| %s | %d bits | %d | %s | %s | %s | %.2f%% | %s | %v | %s |\n", c.Name(), c.WireBits, values,
			benchmarks.MedianSpread(r.PerElement(i, false), "%.3f"), benchmarks.MedianSpread(r.PerElement(i, true), "%.3f"), ratio,
			100*r.Retransmitted(i), match, c.Verified, benchmarks.MedianSpread(r.TATs(i), "%.3f"))
	}
	p("\nRatio: median payload bytes per element over float32's (32-bit wire). Retransmitted: the timed calls' datagrams that were retransmissions. Captured = sent_bytes: the payload bytes captured over every call (warm-up and retransmissions included) equal the workers' own count. TAT: per timed call, the slowest rank's.\n")
	if r.Command != "" {
		p("\nCommand: `%s`\n", r.Command)
	}
	if env := r.Environment; env != nil {
		var keys []string
		for _, k := range []string{"time", "cpu", "cpus", "kernel", "go", "commit", "loadavg_start"} {
			if v, ok := env[k]; ok {
				keys = append(keys, fmt.Sprintf("%s %v", k, v))
			}
		}
		p("\nEnvironment: %s.\n", strings.Join(keys, ", "))
	}
	return b.String()
}
