package benchmarks

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// repetition is one timed allreduce of a point.
type repetition struct {
	// TAT is the slowest worker's time: the result is on every worker.
	TAT      float64   `json:"tat_s"`
	RankTATs []float64 `json:"rank_tat_s"`
}

type cpuTime struct {
	User float64 `json:"user_s"`
	Sys  float64 `json:"sys_s"`
}

func (c cpuTime) total() float64 { return c.User + c.Sys }

// qdiscDelta is what one shaped port counted during a point.
type qdiscDelta struct {
	Worker     int    `json:"worker"`
	Direction  string `json:"direction"`
	Packets    uint64 `json:"packets"`
	Bytes      uint64 `json:"bytes"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
}

// rankBytes is what one rank's port counted per timed call of a
// collectives-sweep point (torch_allreduce.py --count-bytes): frames as
// the interface counts them, headers included, from the barrier before the
// first timed call to the one after the last, over the number of calls;
// and, over the switchml backend, what the library sent (SwitchML headers
// included, UDP, IP and Ethernet not).
type rankBytes struct {
	NetSent        float64 `json:"net_sent_bytes"`
	NetRecv        float64 `json:"net_recv_bytes"`
	NetSentPackets float64 `json:"net_sent_packets"`
	NetRecvPackets float64 `json:"net_recv_packets"`
	LibSent        float64 `json:"lib_sent_bytes,omitempty"`
	LibPackets     float64 `json:"lib_packets,omitempty"`
}

// result is a point with everything measured on it.
type result struct {
	Point
	Runs      []repetition `json:"runs"`
	MedianTAT float64      `json:"median_tat_s"`
	MinTAT    float64      `json:"min_tat_s"`
	MaxTAT    float64      `json:"max_tat_s"`
	// GoodputMbit is tensor bits over the median TAT, per worker.
	GoodputMbit float64 `json:"goodput_mbit"`
	// LinkEfficiency is GoodputMbit over the port rate (rack only).
	LinkEfficiency float64 `json:"link_efficiency,omitempty"`
	Verified       bool    `json:"verified"`
	Retransmits    uint64  `json:"retransmits"`
	// Packets is what the workers sent to the switch, all calls (warm-up
	// and retransmissions included); the switch received as many and sent
	// about as many results (SwitchML).
	Packets uint64 `json:"packets,omitempty"`
	// BlockDensity is the share of the input's blocks that hold values,
	// per worker and over all workers (density and gradients sweeps).
	BlockDensity *blockDensity `json:"block_density,omitempty"`
	// WireBitsUsed are the widths the workers' values travelled at, as they
	// reported them (16 or 32; torch-switchml's from the library's
	// counters, see torch_allreduce.py), each width once in the order
	// seen; empty for the systems that send their type as it is.
	WireBitsUsed []int `json:"wire_bits_used,omitempty"`
	// Transports are the workers' and (last) the switch's transports
	// ("udp", "afxdp") where a system chooses one.
	Transports []string `json:"transports,omitempty"`
	// WorkerCPU is each worker's CPU time during its allreduce calls
	// (warm-up included), the same measure for every system.
	WorkerCPU []cpuTime `json:"worker_cpu"`
	// WorkerCPUPerOp is the workers' CPU seconds summed, per allreduce
	// (warm-up included in the count).
	WorkerCPUPerOp float64 `json:"worker_cpu_per_allreduce_s"`
	// SwitchCPU is the software switch's CPU time during the point.
	SwitchCPU      *cpuTime `json:"switch_cpu,omitempty"`
	SwitchCPUPerOp float64  `json:"switch_cpu_per_allreduce_s,omitempty"`
	// MachineBusy is the fraction of all CPUs busy during the point, and
	// MachineSoftirq the part of it spent in softirq (packet forwarding, tbf).
	MachineBusy    float64      `json:"machine_busy"`
	MachineSoftirq float64      `json:"machine_softirq"`
	Qdisc          []qdiscDelta `json:"qdisc,omitempty"`
	QdiscDrops     uint64       `json:"qdisc_drops"`
	WallS          float64      `json:"wall_s"`
	Error          string       `json:"error,omitempty"`
	// RankBytes are the bytes every rank's port sent and received per
	// call (collectives sweep, on the rack), rank by rank.
	RankBytes []rankBytes `json:"rank_bytes,omitempty"`
	// JobResults are the jobs of a jobs-sweep point, each on its own.
	JobResults []jobResult `json:"jobs,omitempty"`
	// AggregateGoodputMbit is every job's timed tensors over the span from
	// the first job's first timed call to the last job's last (per worker
	// port; the gaps between calls count, so it is a lower bound),
	// Fairness Jain's index of the jobs' goodputs (1: equal shares), and
	// Overlap the part of the span from the first job's first timed call
	// to the last job's last during which all jobs were in their timed
	// calls.
	AggregateGoodputMbit float64 `json:"aggregate_goodput_mbit,omitempty"`
	Fairness             float64 `json:"fairness,omitempty"`
	Overlap              float64 `json:"overlap,omitempty"`
}

// jobResult is one job of a jobs-sweep point.
type jobResult struct {
	MedianTAT   float64 `json:"median_tat_s"`
	GoodputMbit float64 `json:"goodput_mbit"`
	// Start and End bound its timed calls, in seconds from the point's
	// first timed call.
	Start    float64 `json:"start_s"`
	End      float64 `json:"end_s"`
	Verified bool    `json:"verified"`
}

// resultsFile is results.json.
type resultsFile struct {
	Options     Options        `json:"options"`
	Environment map[string]any `json:"environment"`
	Results     []result       `json:"results"`
	Fabric      map[string]any `json:"switch_logs,omitempty"`
}

// save writes f to dir/results.json.
func (f *resultsFile) save(dir string) error {
	data, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644)
}
