package benchmarks

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// opName is the collective a point timed: all_reduce where Op is empty.
func opName(r result) string {
	if r.Op == "" {
		return "all_reduce"
	}
	return r.Op
}

// modelBytes is what one rank sends (and receives) per call in the
// traffic model of docs/design.md, in units of the tensor S (the full
// tensor of the call: all_reduce's, reduce_scatter's input,
// all_gather's output), headers aside: a ring moves 2(n-1)/n of S for an
// allreduce and (n-1)/n for the others; the switchml backend sends and
// receives all of S for each (reduce_scatter is an allreduce of S of
// which the rank keeps its shard, all_gather an exact sum of S in which
// each rank's S/n sits in its own stretch).
func modelBytes(system, op string, n int) float64 {
	if runsOnSwitch(system) {
		return 1
	}
	ring := float64(n-1) / float64(n)
	if op == "all_reduce" {
		return 2 * ring
	}
	return ring
}

// collectivesSweep sets each collective's TAT over Gloo beside the switchml
// backend's, rate by rate, and the bytes each rank's port moved against
// the traffic model, with a plot per rate.
func (w *reportWriter) collectivesSweep() error {
	p, o, x, dir := w.p, w.o, w.x, w.dir
	rs := x.in("collectives", "rack")
	if len(rs) == 0 {
		return nil
	}
	systems := systemsIn(rs)
	n := rs[0].Workers
	p("## Rack: collectives through torch.distributed (%d workers, %s, %s)\n\n", n, FormatSize(o.Size), rateList(rs))
	p("S = %s is the full tensor of every call: all_reduce of S; reduce_scatter_tensor of S into S/n per rank; all_gather_into_tensor of S/n per rank into S. "+
		"Both systems run `torch_allreduce.py --op`, one process per rank in the worker namespaces, differing only in the backend's name; torch %v. "+
		"TAT: median of %d timed calls after %d warm-up (the slowest rank's time of each), with the fastest and slowest of them; every result checked exactly. "+
		"Ideal ring / switch is the ratio the traffic model gives at line rate: a ring's bytes per rank over the switchml backend's (see the bytes table).\n\n",
		FormatSize(o.Size), cmp.Or(w.env["torch"], any("unknown")), o.Iters, o.Warmup)
	cols := []string{"rate (Mbit/s)", "collective"}
	for _, s := range systems {
		cols = append(cols, systemNames[s]+" TAT (s)", "min–max (s)")
	}
	cols = append(cols, "Gloo / PyTorch-SwitchML", "ideal ring / switch", "verified")
	p("| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, rate := range values(rs, byRate) {
		for _, op := range Collectives {
			at := func(r result) bool { return r.RateMbit == rate && opName(r) == op }
			if !slices.ContainsFunc(rs, at) {
				continue
			}
			p("| %g | %s |", rate, op)
			verified := true
			found := map[string]result{}
			for _, s := range systems {
				r, ok := collectiveResult(rs, s, at)
				if ok {
					found[s] = r
					verified = verified && r.Verified
				}
				between := "–"
				if ok {
					between = fmt.Sprintf("%.3f–%.3f", r.MinTAT, r.MaxTAT)
				}
				p(" %s | %s |", cell(r, ok), between)
			}
			gl, okG := found["gloo"]
			ts, okT := found["torch-switchml"]
			p(" %s | %.2fx | %v |\n", ratio(gl, ts, okG, okT), modelBytes("gloo", op, n)/modelBytes("torch-switchml", op, n), verified && len(found) > 0)
		}
	}
	p("\n")
	w.collectiveBytes(rs, systems, n)
	for _, rate := range values(rs, byRate) {
		file := fmt.Sprintf("collectives_%gmbit.png", rate)
		var ins []sparseInput
		for _, op := range Collectives {
			at := func(r result) bool { return r.RateMbit == rate && opName(r) == op }
			if slices.ContainsFunc(rs, at) {
				ins = append(ins, sparseInput{label: op, of: func(s string) (result, bool) { return collectiveResult(rs, s, at) }})
			}
		}
		p("![collectives at %g Mbit/s](%s)\n", rate, file)
		if err := plotBars(filepath.Join(dir, file), fmt.Sprintf("Collectives through torch.distributed (%d workers, %s, %g Mbit/s ports)", n, FormatSize(o.Size), rate),
			"median TAT (s)", rs, ins); err != nil {
			return err
		}
	}
	p("\n")
	return nil
}

// collectiveBytes is the bytes table: what each rank's port sent and
// received per call, against the traffic model.
func (w *reportWriter) collectiveBytes(rs []result, systems []string, n int) {
	p := w.p
	if !slices.ContainsFunc(rs, func(r result) bool { return len(r.RankBytes) > 0 }) {
		return
	}
	p("Bytes per rank and call: what each rank's port (its namespace's eth0) sent and received, read from /proc/net/dev before the first timed call and after the last, over the calls; "+
		"the mean over the %d ranks, with the least and the most. These are frames as the interface counts them: Ethernet, IP and UDP or TCP headers, TCP's acknowledgements and the barriers between the calls included "+
		"(a segmentation-offload packet that crosses the port whole counts its headers once). "+
		"The model (docs/design.md) counts payload: a ring moves 2(n-1)/n·S per rank each way for an allreduce and (n-1)/n·S for the others; the switchml backend sends and receives S for each. "+
		"Library sent is what libswitchml sent per call (SwitchML headers included, UDP, IP and Ethernet not).\n\n", n)
	p("| rate (Mbit/s) | collective | system | sent per rank (MiB) | min–max | received per rank (MiB) | min–max | sent / S | received / S | model / S | sent / model | library sent / S |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	mib := float64(1 << 20)
	for _, rate := range values(rs, byRate) {
		for _, op := range Collectives {
			for _, s := range systems {
				r, ok := collectiveResult(rs, s, func(r result) bool { return r.RateMbit == rate && opName(r) == op })
				if !ok || len(r.RankBytes) == 0 {
					continue
				}
				sent := spread(r.RankBytes, func(b rankBytes) float64 { return b.NetSent })
				recv := spread(r.RankBytes, func(b rankBytes) float64 { return b.NetRecv })
				lib := spread(r.RankBytes, func(b rankBytes) float64 { return b.LibSent })
				size, model := float64(r.Bytes), modelBytes(s, op, r.Workers)
				libCell := "–"
				if lib[1] > 0 {
					libCell = fmt.Sprintf("%.3f", lib[1]/size)
				}
				p("| %g | %s | %s | %.1f | %.1f–%.1f | %.1f | %.1f–%.1f | %.3f | %.3f | %.3f | %.3f | %s |\n", rate, op, systemNames[s],
					sent[1]/mib, sent[0]/mib, sent[2]/mib, recv[1]/mib, recv[0]/mib, recv[2]/mib, sent[1]/size, recv[1]/size, model, sent[1]/size/model, libCell)
			}
		}
	}
	p("\n")
}

// collectiveResult is system's successful result among rs that at picks.
func collectiveResult(rs []result, system string, at func(result) bool) (result, bool) {
	for _, r := range rs {
		if r.System == system && r.Error == "" && at(r) {
			return r, true
		}
	}
	return result{}, false
}

// spread is the least, the mean and the most of f over the ranks.
func spread(bs []rankBytes, f func(rankBytes) float64) [3]float64 {
	lo, sum, hi := f(bs[0]), 0.0, f(bs[0])
	for _, b := range bs {
		v := f(b)
		lo, hi, sum = min(lo, v), max(hi, v), sum+v
	}
	return [3]float64{lo, sum / float64(len(bs)), hi}
}

// rateList names the rates of rs: "200 and 1000 Mbit/s ports".
func rateList(rs []result) string {
	var s []string
	for _, r := range values(rs, byRate) {
		s = append(s, fmt.Sprintf("%g", r))
	}
	return strings.Join(s, " and ") + " Mbit/s ports"
}
