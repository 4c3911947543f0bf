package benchmarks

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/switchml/switchml-go/switchml/dtype"
)

// The block-sparse mode's benchmarks: the density sweep (generated tensors
// with a share of empty blocks) and the gradients sweep (recorded
// gradients), each comparing switchml-sparse with switchml and the
// baselines, with the blocks' density per worker and over all workers.

// gradientFile is rank's file in a directory of recorded gradients.
func gradientFile(dir string, rank int) string {
	return filepath.Join(dir, fmt.Sprintf("rank%d.f32", rank))
}

// checkGradients checks that dir holds a gradient file for each of the
// workers' ranks, all of one size in whole float32 values, and returns
// that size in bytes.
func checkGradients(dir string, workers int) (int64, error) {
	var size int64
	for r := 0; r < workers; r++ {
		fi, err := os.Stat(gradientFile(dir, r))
		if err != nil {
			return 0, fmt.Errorf("gradients %s: %w (want rank<r>.f32 for each of the %d ranks, raw little-endian float32)", dir, err, workers)
		}
		switch {
		case fi.Size() == 0 || fi.Size()%4 != 0:
			return 0, fmt.Errorf("gradients %s: %s holds %d bytes, want a positive whole number of float32 values", dir, fi.Name(), fi.Size())
		case r > 0 && fi.Size() != size:
			return 0, fmt.Errorf("gradients %s: %s holds %d bytes, rank0.f32 %d: every rank's gradient must have the same size", dir, fi.Name(), fi.Size(), size)
		}
		size = fi.Size()
	}
	return size, nil
}

// gradientBytes is the size of a directory's gradients (rank 0's file),
// 0 if it cannot be read (the options' check says why).
func gradientBytes(dir string) int64 {
	fi, err := os.Stat(gradientFile(dir, 0))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// checkSparseFlags refuses density and gradients options that give a
// sweep nothing to run, or inputs the sweep never reads.
func (o *Options) checkSparseFlags() error {
	gradients := slices.Contains(o.Sweeps, "gradients")
	switch {
	case slices.Contains(o.Sweeps, "density") && len(o.Densities) == 0:
		return &FlagError{"density", errors.New("the density sweep needs at least one density, like --density 0.01,0.1,1")}
	case gradients && len(o.Gradients) == 0:
		return &FlagError{"gradients", errors.New("the gradients sweep needs at least one directory of recorded gradients (--gradients DIR[,DIR...])")}
	case !gradients && len(o.Gradients) > 0:
		return &FlagError{"gradients", errors.New("no sweep reads them: add gradients to --sweeps")}
	}
	if gradients {
		for _, dir := range o.Gradients {
			if _, err := checkGradients(dir, o.BaseWorkers); err != nil {
				return &FlagError{"gradients", err}
			}
		}
	}
	return nil
}

// blockDensity is the share of blocks that hold values: per worker (the
// mean over the workers) and in the union of all workers' blocks, the
// share a block-sparse result carries.
type blockDensity struct {
	Worker float64 `json:"worker"`
	Union  float64 `json:"union"`
}

// syntheticDensity is the block density of the tensors the workers
// generate with allreduce --density d --seed seed (dtype.FillDensity).
func syntheticDensity(seed uint64, workers int, elements int64, k int, d float64) blockDensity {
	if d >= 1 {
		return blockDensity{1, 1}
	}
	blocks := int((elements + int64(k) - 1) / int64(k))
	var held, union int
	for b := 0; b < blocks; b++ {
		any := false
		for r := 0; r < workers; r++ {
			if dtype.BlockHolds(seed, r, b, d) {
				held++
				any = true
			}
		}
		if any {
			union++
		}
	}
	return blockDensity{float64(held) / float64(blocks*workers), float64(union) / float64(blocks)}
}

// fileDensity is the block density of recorded gradients: a block holds
// values when one of its k values is not zero.
func fileDensity(dir string, workers, k int) (blockDensity, error) {
	var union []bool
	var held int
	for r := 0; r < workers; r++ {
		f, err := os.Open(gradientFile(dir, r))
		if err != nil {
			return blockDensity{}, err
		}
		blocks, err := nonZeroBlocks(bufio.NewReaderSize(f, 1<<20), k)
		f.Close()
		if err != nil {
			return blockDensity{}, fmt.Errorf("%s: %w", gradientFile(dir, r), err)
		}
		if union == nil {
			union = make([]bool, len(blocks))
		}
		if len(blocks) != len(union) {
			return blockDensity{}, fmt.Errorf("%s: %d blocks, rank 0's file %d", gradientFile(dir, r), len(blocks), len(union))
		}
		for b, ok := range blocks {
			if ok {
				held++
				union[b] = true
			}
		}
	}
	if len(union) == 0 {
		return blockDensity{}, fmt.Errorf("%s: no values", dir)
	}
	n := 0
	for _, ok := range union {
		if ok {
			n++
		}
	}
	return blockDensity{float64(held) / float64(len(union)*workers), float64(n) / float64(len(union))}, nil
}

// nonZeroBlocks reads little-endian float32 values and tells for each
// block of k of them whether one is not zero.
func nonZeroBlocks(rd io.Reader, k int) ([]bool, error) {
	var out []bool
	buf := make([]byte, 4*k)
	for {
		n, err := io.ReadFull(rd, buf)
		if n%4 != 0 {
			return nil, errors.New("not a whole number of float32 values")
		}
		if n > 0 {
			held := false
			for i := 0; i < n; i += 4 {
				if math.Float32frombits(binary.LittleEndian.Uint32(buf[i:])) != 0 {
					held = true
					break
				}
			}
			out = append(out, held)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// blockDensity is the block density of a point's input, cached per input:
// nil for a point whose input is dense generated data.
func (b *driver) blockDensity(p Point) *blockDensity {
	k := cmp0(p.PacketElements, b.o.PacketElements)
	key := fmt.Sprintf("%g/%s/%d/%d/%d", p.Density, p.Gradients, p.Workers, p.Bytes, k)
	if d, ok := b.densities[key]; ok {
		return d
	}
	var d *blockDensity
	switch {
	case p.Gradients != "":
		if v, err := fileDensity(p.Gradients, p.Workers, k); err == nil {
			d = &v
		} else {
			fmt.Fprintf(b.o.Progress, "block density of %s unknown: %v\n", p.Gradients, err)
		}
	case p.Density > 0:
		// The seed every SwitchML system's single job fills from
		// (switchmlArgs: --seed 1).
		v := syntheticDensity(1, p.Workers, p.elements(), k, p.Density)
		d = &v
	}
	if b.densities == nil {
		b.densities = map[string]*blockDensity{}
	}
	b.densities[key] = d
	return d
}

// sparseInput is one row of a block-sparse table: the results of every
// system on one input.
type sparseInput struct {
	label string
	// of finds the system's successful result on this input.
	of func(system string) (result, bool)
}

// sparseInputs are the rows of the density sweep (one per density) or of
// the gradients sweep (one per directory) among rs.
func sparseInputs(rs []result, sweep string) []sparseInput {
	find := func(match func(result) bool) func(string) (result, bool) {
		return func(s string) (result, bool) {
			for _, r := range rs {
				if r.System == s && r.Error == "" && match(r) {
					return r, true
				}
			}
			return result{}, false
		}
	}
	var ins []sparseInput
	if sweep == "density" {
		for _, d := range values(rs, func(r result) float64 { return r.Density }) {
			if d == 0 {
				continue // the systems whose cost does not depend on the values
			}
			ins = append(ins, sparseInput{label: fmt.Sprintf("%g", d), of: find(func(r result) bool {
				return r.Density == d || !fillsDensity(r.System)
			})})
		}
		return ins
	}
	var dirs []string
	for _, r := range rs {
		if r.Gradients != "" && !slices.Contains(dirs, r.Gradients) {
			dirs = append(dirs, r.Gradients)
		}
	}
	for _, dir := range dirs {
		ins = append(ins, sparseInput{label: filepath.Base(dir), of: find(func(r result) bool { return r.Gradients == dir })})
	}
	return ins
}

// sparseTable writes one row per input: the blocks' density, each
// system's TAT, switchml-sparse's speedup over switchml and over Gloo, and
// the packets SwitchML's workers sent per allreduce.
func sparseTable(p func(string, ...any), rs []result, ins []sparseInput, inputHeader string, calls int) {
	systems := systemsIn(rs)
	tatHeader(p, systems, []string{inputHeader, "density per worker", "union density"}, []string{"sparse speedup over SwitchML",
		"sparse speedup over Gloo", "SwitchML packets per allreduce", "sparse packets per allreduce", "verified"})
	for _, in := range ins {
		var d *blockDensity
		for _, s := range []string{"switchml-sparse", "switchml"} {
			if r, ok := in.of(s); ok && r.BlockDensity != nil && d == nil {
				d = r.BlockDensity
			}
		}
		worker, union := "–", "–"
		if d != nil {
			worker, union = fmt.Sprintf("%.4f", d.Worker), fmt.Sprintf("%.4f", d.Union)
		}
		p("| %s | %s | %s |", in.label, worker, union)
		verified := []string{}
		for _, s := range systems {
			r, ok := in.of(s)
			p(" %s |", cell(r, ok))
			if ok && !r.Verified {
				verified = append(verified, "not "+systemNames[s])
			}
		}
		sp, okP := in.of("switchml-sparse")
		sm, okS := in.of("switchml")
		gl, okG := in.of("gloo")
		perCall := func(r result, ok bool) string {
			if !ok || r.Packets == 0 || calls == 0 {
				return "–"
			}
			return fmt.Sprintf("%d", r.Packets/uint64(calls))
		}
		v := "yes"
		if len(verified) > 0 {
			v = strings.Join(verified, ", ")
		}
		p(" %s | %s | %s | %s | %s |\n", ratio(sm, sp, okS, okP), ratio(gl, sp, okG, okP), perCall(sm, okS), perCall(sp, okP), v)
	}
	p("\n")
}

// sparse is the section of the density and gradients sweeps, with plots.
func (w *reportWriter) sparse() error {
	p, o, x, dir := w.p, w.o, w.x, w.dir
	calls := o.Warmup + o.Iters
	intro := func() {
		p("Density per worker: the share of a worker's blocks (of k values, k = the packet's values) that hold a value that is not zero, the mean over the workers; " +
			"union density: the share of blocks some worker holds, which every block-sparse result carries. Packets per allreduce: what all workers sent to the switch per call (warm-up and retransmissions included), divided by the calls. " +
			"Speedup = the other system's median TAT over SwitchML sparse's. SwitchML sparse runs with the extended header (its block keys need it); SwitchML with the header the point asks for.\n\n")
	}
	if rs := x.in("density", "rack"); len(rs) > 0 {
		n := rs[0].Workers
		p("## Rack: block-sparse aggregation against density (%d workers, %s %s, %g Mbit/s ports)\n\n", n, FormatSize(o.Size), o.dtypeName(), o.Rate)
		p("The SwitchML systems' generated tensors hold values in a share (the density) of each worker's blocks, a different random share at each worker. " +
			"The other systems run once, on a tensor of the same size: their cost does not depend on the values, so their TAT is repeated on every row.\n\n")
		intro()
		sparseTable(p, rs, sparseInputs(rs, "density"), "density (asked)", calls)
		p("![TAT against density](tat_vs_density.png)\n\n")
		var pts []result
		densities := values(rs, func(r result) float64 { return r.Density })
		for _, r := range rs {
			if fillsDensity(r.System) {
				pts = append(pts, r)
				continue
			}
			for _, d := range densities {
				if d > 0 {
					c := r
					c.Density = d
					pts = append(pts, c)
				}
			}
		}
		if err := plotSweep(filepath.Join(dir, "tat_vs_density.png"), fmt.Sprintf("TAT against block density (%d workers, %s, %g Mbit/s ports)", n, FormatSize(o.Size), o.Rate),
			"density of each worker's blocks", "median TAT (s)", pts, func(r result) float64 { return r.Density }, func(r result) float64 { return r.MedianTAT }, true); err != nil {
			return err
		}
	}
	if rs := x.in("gradients", "rack"); len(rs) > 0 {
		p("## Rack: block-sparse aggregation of recorded gradients (%d workers, %g Mbit/s ports)\n\n", rs[0].Workers, o.Rate)
		p("Rank r reduces DIR/rank<r>.f32 (raw float32). The SwitchML systems, Gloo and PyTorch-SwitchML read the files and check the sum of all ranks' files; " +
			"the Go ring and OpenMPI reduce a generated tensor of the same size (their cost does not depend on the values).\n\n")
		intro()
		ins := sparseInputs(rs, "gradients")
		sparseTable(p, rs, ins, "gradients", calls)
		p("![TAT per model](tat_gradients.png)\n\n")
		if err := plotBars(filepath.Join(dir, "tat_gradients.png"), fmt.Sprintf("Recorded gradients (%d workers, %g Mbit/s ports)", rs[0].Workers, o.Rate), "median TAT (s)", rs, ins); err != nil {
			return err
		}
	}
	return nil
}
