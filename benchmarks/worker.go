package benchmarks

import (
	"context"
	"errors"
	"syscall"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
	"github.com/switchml/switchml-go/switchml/ring"
)

// WorkerReport is the JSON object one worker prints on stdout with --json,
// both `switchml allreduce` (SwitchML) and `switchml ring` (the Go ring
// baseline): the suite, the demo and the chaos run read it.
type WorkerReport struct {
	Workers        int    `json:"workers"`
	Rank           int    `json:"rank"`
	Elements       int    `json:"elements"`
	DType          string `json:"dtype"`
	Iters          int    `json:"iters"`
	Lanes          int    `json:"lanes"`
	Window         int    `json:"window"`
	PacketElements int    `json:"packet_elements"`
	// WireBits is the width the values travelled at, 16 or 32 (0: an
	// older worker, or another system), and SentBytes the bytes of the
	// packets this rank sent to the switch, SwitchML headers included,
	// over every call (warm-up and retransmissions too).
	WireBits  int    `json:"wire_bits,omitempty"`
	SentBytes uint64 `json:"sent_bytes,omitempty"`
	// Sparse says the run used the block-sparse mode; Density is the
	// share of blocks its generated tensors held values in (1: all), and
	// Gradients the directory of recorded gradients it reduced instead.
	Sparse    bool    `json:"sparse,omitempty"`
	Density   float64 `json:"density,omitempty"`
	Gradients string  `json:"gradients,omitempty"`
	// Transport is what the lanes used: "udp", "shm" or "afxdp" (empty: an
	// older worker, or another system).
	Transport   string    `json:"transport,omitempty"`
	TATs        []float64 `json:"tat_s"`
	MedianTAT   float64   `json:"median_tat_s"`
	GoodputGbps float64   `json:"goodput_gbps"`
	Verified    bool      `json:"verified"`
	Error       string    `json:"error,omitempty"`
	// Cause is what the error says happened, a name of Causes ("" on
	// success, CauseOther for none of them): programs that read other
	// workers' reports (the chaos run) tell failures apart by it, never by
	// the wording of Error.
	Cause       string `json:"cause,omitempty"`
	Retransmits uint64 `json:"retransmits"`
	// Packets counts the packets the worker sent to the switch over all
	// its calls, warm-up and retransmissions included.
	Packets       uint64  `json:"packets,omitempty"`
	RTTMillis     float64 `json:"rtt_ms"`
	TimeoutMillis float64 `json:"timeout_ms"`
	// CPUUserS and CPUSysS are the process's whole CPU time.
	CPUUserS float64 `json:"cpu_user_s"`
	CPUSysS  float64 `json:"cpu_sys_s"`
	// CPULoop* is the process's CPU time during the allreduce calls alone
	// (warm-up included); nil when the worker did not measure it.
	CPULoopUserS *float64 `json:"cpu_loop_user_s,omitempty"`
	CPULoopSysS  *float64 `json:"cpu_loop_sys_s,omitempty"`
	// Fallback says why the worker ran over the ring instead of the
	// switch (--fallback ring), RingCalls how many calls did; empty and 0
	// on the switch.
	Fallback  string `json:"fallback,omitempty"`
	RingCalls uint64 `json:"ring_calls,omitempty"`
	// TimedStart and TimedEnd bound the timed calls (Unix seconds): when
	// several jobs run at once, they show how long the jobs overlapped.
	TimedStart float64 `json:"timed_start_unix_s,omitempty"`
	TimedEnd   float64 `json:"timed_end_unix_s,omitempty"`
}

// Fail records err as the worker's failure: its text, its cause, and
// that nothing was verified.
func (r *WorkerReport) Fail(err error) {
	r.Error, r.Cause, r.Verified = err.Error(), CauseOf(err), false
}

// Cause is a failure a worker tells apart: its name in reports, and the
// library error that says it happened.
type Cause struct {
	Name string
	Err  error
}

// Causes are the failures a worker tells apart in its report
// (WorkerReport.Cause), each with the library error it stands for, in
// the order CauseOf tests them: a failure that holds several (a restarted
// controller's abort, which also says the switch was lost) takes the
// first.
var Causes = []Cause{
	{"wrong-sum", dtype.ErrUnexpected},
	{"controller-restarted", switchml.ErrControllerRestarted},
	{"rank-lost", switchml.ErrRankLost},
	{"switch-lost", switchml.ErrSwitchLost},
	{"rank-failed", switchml.ErrRankFailed},
	{"switch-silent", switchml.ErrTimeoutBudget},
	{"ranks-missing", switchml.ErrRanksMissing},
	{"aborted", switchml.ErrAborted},
	{"controller-unreachable", switchml.ErrControllerUnreachable},
	{"job-mismatch", switchml.ErrJobMismatch},
	{"ring-broken", ring.ErrBroken},
	{"ring-stalled", ring.ErrStalled},
	{"interrupted", context.Canceled},
	{"deadline", context.DeadlineExceeded},
	{"closed", switchml.ErrClosed},
}

// CauseOther is the cause of a failure that holds none of Causes' errors.
const CauseOther = "other"

// CauseOf is the name of err's cause in Causes: "" for nil, CauseOther
// for an error that holds none of them.
func CauseOf(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range Causes {
		if errors.Is(err, c.Err) {
			return c.Name
		}
	}
	return CauseOther
}

// FirstPackets is how many packets the worker's protocol chose to send:
// Packets without the retransmissions. Retransmissions grow with the load
// on the machine (a late result times out); what the protocol chose does
// not, so bounds on the protocol's traffic count this.
func (r WorkerReport) FirstPackets() uint64 {
	if r.Retransmits > r.Packets { // a report of another system: no packet count
		return 0
	}
	return r.Packets - r.Retransmits
}

// ProcessCPU is this process's CPU time so far, user and system, in
// seconds; ok is false where the system does not say.
func ProcessCPU() (user, sys float64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime), tv(ru.Stime), true
}

// CPUMeter adds up this process's CPU time over timed regions (the
// allreduce calls), leaving out input generation and verification.
type CPUMeter struct {
	startUser, startSys float64
	started             bool
	user, sys           float64
}

// Begin starts a timed region.
func (m *CPUMeter) Begin() { m.startUser, m.startSys, m.started = ProcessCPU() }

// End ends the timed region Begin started.
func (m *CPUMeter) End() {
	if !m.started {
		return
	}
	if u, s, ok := ProcessCPU(); ok {
		m.user += u - m.startUser
		m.sys += s - m.startSys
	}
	m.started = false
}

// Report stores the sums in rep's CPULoop fields.
func (m *CPUMeter) Report(rep *WorkerReport) {
	u, s := m.user, m.sys
	rep.CPULoopUserS, rep.CPULoopSysS = &u, &s
}
