package density

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/trainers/profile"
)

// PaperProfiles pairs each profile whose density Papers estimates with the
// measured model whose embedding density it takes.
var PaperProfiles = []struct{ Profile, From string }{
	{"ncf", "ncf"},
	{"deeplight", "deeplight"},
	{"deeplight-paper", "deeplight"},
	{"lstm", "lstm"},
	{"lstm-paper", "lstm"},
}

// PaperRow is the estimated density of a profiled model (Paper): its
// embedding unit's share of the gradient s, and s*d + (1-s) for the
// measured embedding densities d.
type PaperRow struct {
	Kind                string  `json:"kind"` // "paper"
	Profile             string  `json:"profile"`
	From                string  `json:"from"`
	Parameters          int64   `json:"parameters"`
	EmbeddingParameters int64   `json:"embedding_parameters"`
	EmbeddingShare      float64 `json:"embedding_share"`
	// Worker and Union (by worker count) by block size; mean embedding
	// densities of the measured model put into Paper.
	Worker map[string]float64            `json:"worker"`
	Union  map[string]map[string]float64 `json:"union"`
}

// Papers estimates the density of every profile in PaperProfiles whose
// measured model is in results.
func Papers(dir string, results []*ModelResult) ([]*PaperRow, error) {
	by := map[string]*ModelResult{}
	for _, r := range results {
		by[r.Model] = r
	}
	var rows []*PaperRow
	for _, pp := range PaperProfiles {
		m := by[pp.From]
		if m == nil {
			continue
		}
		p, err := profile.Load(filepath.Join(dir, pp.Profile+".json"))
		if err != nil {
			return nil, err
		}
		row := &PaperRow{Kind: "paper", Profile: pp.Profile, From: pp.From, Parameters: p.Parameters,
			Worker: map[string]float64{}, Union: map[string]map[string]float64{}}
		for _, u := range p.Units {
			if u.Name == m.EmbeddingUnit {
				row.EmbeddingParameters = u.Parameters
			}
		}
		if row.EmbeddingParameters == 0 || p.Parameters == 0 {
			return nil, fmt.Errorf("density: profile %s has no unit %q (the embedding unit of %s)", pp.Profile, m.EmbeddingUnit, pp.From)
		}
		s := float64(row.EmbeddingParameters) / float64(p.Parameters)
		row.EmbeddingShare = s
		for k, bs := range m.Blocks {
			row.Worker[k] = Paper(s, bs.Worker.Embedding.Mean)
			row.Union[k] = map[string]float64{}
			for n, u := range bs.Union {
				row.Union[k][n] = Paper(s, u.Embedding.Mean)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteJSONL writes one line per value.
func WriteJSONL(w io.Writer, vs ...any) error {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

// Header says how a report was made.
type Header struct {
	Kind    string `json:"kind"` // "run"
	Command string `json:"command"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
	CPUs    int    `json:"cpus"`
	Options struct {
		Workers     int    `json:"workers"`
		Unions      []int  `json:"unions"`
		BlockSizes  []int  `json:"block_sizes"`
		Warmup      int    `json:"warmup"`
		BucketElems int    `json:"bucket_elems"`
		Optimizer   string `json:"optimizer"`
		Seed        int64  `json:"seed"`
		Threads     int    `json:"threads"`
	} `json:"options"`
}

func pct(v float64) string { return strconv.FormatFloat(100*v, 'f', 2, 64) + "%" }

func statCell(s Stat) string {
	return fmt.Sprintf("%s (%s-%s)", pct(s.Mean), pct(s.Min), pct(s.Max))
}

func group(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// densityHeader writes a table's header rows: lead's columns, a density
// column per block size and one per union of n workers at each block
// size, then tail's columns; leadAlign and tailAlign are their alignment
// cells.
func densityHeader(w io.Writer, ks, unions []int, lead, leadAlign, tail, tailAlign string) {
	fmt.Fprint(w, lead)
	for _, k := range ks {
		fmt.Fprintf(w, " per worker at %d |", k)
	}
	for _, n := range unions {
		for _, k := range ks {
			fmt.Fprintf(w, " union of %d at %d |", n, k)
		}
	}
	fmt.Fprintf(w, "%s\n%s", tail, leadAlign)
	for range (1 + len(unions)) * len(ks) {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintf(w, "%s\n", tailAlign)
}

// Markdown writes the tables: the density of each model, its embedding
// and other blocks apart, and the estimates for the profiled models.
func Markdown(w io.Writer, h *Header, results []*ModelResult, papers []*PaperRow) {
	ks := h.Options.BlockSizes
	fmt.Fprintf(w, "# Block density of the gradients\n\n")
	fmt.Fprintf(w, "Made by `%s` at commit %s on %s (%d CPUs).\n\n", h.Command, h.Commit, h.Date, h.CPUs)
	fmt.Fprintf(w, "Real TensorFlow training steps (%s, buckets of %d values as `train --bucket-elems` hands them to the allreduce, %d TensorFlow threads): at each step %d simulated workers compute their gradients from the same weights on %d different batches, and their average updates the weights. "+
		"A block is the values of one packet of a bucket, from the bucket's start (the last block of a bucket may be short); it is non-zero when one of its values is. "+
		"Density: the share of a worker's blocks that are non-zero, mean (min-max) over every worker of every measured step after %d warm-up step(s). "+
		"Union of n: the share of blocks non-zero at any of the step's first n workers, what comes back to every worker, mean (min-max) over the steps.\n\n",
		h.Options.Optimizer, h.Options.BucketElems, h.Options.Threads, h.Options.Workers, h.Options.Workers, h.Options.Warmup)
	fmt.Fprintf(w, "Input: %s.\n\n", Input)

	densityHeader(w, ks, h.Options.Unions, "| model | batch | elements | embedding share |", "|---|---:|---:|---:|", " steps |", "---:|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %d | %s | %s |", r.Model, r.Batch, group(r.Elements), pct(r.EmbeddingShare))
		for _, k := range ks {
			fmt.Fprintf(w, " %s |", statCell(r.Blocks[strconv.Itoa(k)].Worker.All))
		}
		for _, n := range h.Options.Unions {
			for _, k := range ks {
				fmt.Fprintf(w, " %s |", statCell(r.Blocks[strconv.Itoa(k)].Union[strconv.Itoa(n)].All))
			}
		}
		fmt.Fprintf(w, " %d |\n", r.Steps)
	}

	fmt.Fprintf(w, "\nThe embedding blocks (every value in the embedding unit's variables) and the other blocks apart, means over the same steps:\n\n")
	fmt.Fprintf(w, "| model | block | embedding unit | embedding blocks | embedding: per worker |")
	for _, n := range h.Options.Unions {
		fmt.Fprintf(w, " embedding: union of %d |", n)
	}
	fmt.Fprintf(w, " other blocks | other: per worker |")
	for _, n := range h.Options.Unions {
		fmt.Fprintf(w, " other: union of %d |", n)
	}
	fmt.Fprintf(w, "\n|---|---:|---|---:|---:|")
	for range h.Options.Unions {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintf(w, "---:|---:|")
	for range h.Options.Unions {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, r := range results {
		for _, k := range ks {
			bs := r.Blocks[strconv.Itoa(k)]
			fmt.Fprintf(w, "| %s | %d | `%s` | %s | %s |", r.Model, k, r.EmbeddingUnit, group(bs.EmbeddingBlocks), pct(bs.Worker.Embedding.Mean))
			for _, n := range h.Options.Unions {
				fmt.Fprintf(w, " %s |", pct(bs.Union[strconv.Itoa(n)].Embedding.Mean))
			}
			fmt.Fprintf(w, " %s | %s |", group(bs.Blocks-bs.EmbeddingBlocks), pct(bs.Worker.Rest.Mean))
			for _, n := range h.Options.Unions {
				fmt.Fprintf(w, " %s |", pct(bs.Union[strconv.Itoa(n)].Rest.Mean))
			}
			fmt.Fprintln(w)
		}
	}

	if len(papers) == 0 {
		return
	}
	fmt.Fprintf(w, "\nProfiled models (`profiles/<profile>.json`): s is the embedding unit's share of the parameters in the profile; "+
		"the density is s*d + (1-s), with d the measured model's mean embedding-block density (per worker, or of the union), every other block counted non-zero. "+
		"It keeps d as measured at the harness's table sizes and batch; a larger table at the same batch would have a lower d.\n\n")
	densityHeader(w, ks, h.Options.Unions, "| profile | from | parameters | embedding parameters | s |", "|---|---|---:|---:|---:|", "", "")
	for _, p := range papers {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |", p.Profile, p.From, group(int(p.Parameters)), group(int(p.EmbeddingParameters)), pct(p.EmbeddingShare))
		for _, k := range ks {
			fmt.Fprintf(w, " %s |", pct(p.Worker[strconv.Itoa(k)]))
		}
		for _, n := range h.Options.Unions {
			for _, k := range ks {
				fmt.Fprintf(w, " %s |", pct(p.Union[strconv.Itoa(k)][strconv.Itoa(n)]))
			}
		}
		fmt.Fprintln(w)
	}
}
