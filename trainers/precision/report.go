package precision

import (
	"fmt"
	"io"
	"strings"
)

// Header describes a run of the comparison, for its files.
type Header struct {
	Kind    string `json:"kind"` // "run"
	Command string `json:"command"`
	Commit  string `json:"commit,omitempty"`
	Date    string `json:"date"`
}

// Markdown writes, per model, the errors of every method over the whole
// gradient and per bucket.
func Markdown(w io.Writer, h *Header, results []*Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Precision of the sum on recorded gradients\n\n`%s`", h.Command)
	if h.Commit != "" {
		fmt.Fprintf(&b, " at %s", h.Commit)
	}
	fmt.Fprintf(&b, ", %s.\n\n", h.Date)
	b.WriteString("Against the exact sum T of the recorded float32 gradients (float64): the relative L2 error ||r − T|| / ||T||, " +
		"the largest error relative to the largest sum max|r − T| / max|T|, and the share of the values whose exact sum is not 0 " +
		"that come out 0.\n")
	for _, r := range results {
		name := r.Model
		if r.Name != "" && r.Name != r.Model {
			name = fmt.Sprintf("%s (%s)", r.Name, r.Model)
		}
		fmt.Fprintf(&b, "\n## %s: %d values in %d buckets, %d workers\n\n", name, r.Elements, len(r.Buckets), r.Workers)
		fmt.Fprintf(&b, "Recorded at step %d (after %d warm-up), batch %d per worker, seed %d (`%s`); %d packet values at 32 bits, %d at 16; "+
			"%.2f%% of the exact sums are not 0.\n\n",
			r.Step, r.Warmup, r.Batch, r.Seed, r.Dir, r.PacketElements, 2*r.PacketElements, 100*share(r.NonZero, r.Elements))
		b.WriteString("| method | relative L2 error | max error / max \\|T\\| | non-zero sums that come out 0 |\n|---|---:|---:|---:|\n")
		for _, m := range Methods {
			e := r.Errors[m]
			fmt.Fprintf(&b, "| %s | %.3g | %.3g | %.3g%% (%d) |\n", MethodNames[m], e.RelL2, e.RelMax, 100*e.Zeroed, e.ZeroedCount)
		}
		fmt.Fprintf(&b, "\n<details><summary>%s per bucket: relative L2 error, and non-zero sums that come out 0</summary>\n\n", name)
		b.WriteString("| bucket | values | non-zero |")
		for _, m := range Methods {
			fmt.Fprintf(&b, " L2 %s |", m)
		}
		for _, m := range Methods {
			if m != Wire32 && m != RingF32 {
				fmt.Fprintf(&b, " 0 %s |", m)
			}
		}
		b.WriteString("\n|---:|---:|---:|" + strings.Repeat("---:|", 2*len(Methods)-2) + "\n")
		for _, bk := range r.Buckets {
			fmt.Fprintf(&b, "| %d | %d | %.2f%% |", bk.Index, bk.Values, 100*share(bk.NonZero, bk.Values))
			for _, m := range Methods {
				fmt.Fprintf(&b, " %.3g |", bk.Errors[m].RelL2)
			}
			for _, m := range Methods {
				if m != Wire32 && m != RingF32 {
					fmt.Fprintf(&b, " %.3g%% |", 100*bk.Errors[m].Zeroed)
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n</details>\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func share(a int64, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
