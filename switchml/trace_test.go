package switchml_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/transport"
)

// The traced job: two ranks of two lanes making four calls, rank 1 coming
// late to call 2.
const (
	traceWorkers, traceLanes, traceElements, traceCalls = 2, 2, 20_000, 4
	traceLate                                           = 2
)

// TestTraceAndCollector runs a job whose rank 1 loses packets and comes
// late to one call, and checks each rank's timeline and counters: a span
// per call and per lane, barriers, retransmission bursts on the lossy
// rank and waits for the late peer on the other.
func TestTraceAndCollector(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	traces := make([]bytes.Buffer, traceWorkers)
	sessions := joinTraced(ctx, t, fab.ControllerAddr(), traces)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sessions[0].Collector(), sessions[1].Collector())
	for call := range traceCalls {
		runTracedCall(ctx, t, sessions, call)
	}
	retx := checkTraceMetrics(t, reg, sessions)
	for _, s := range sessions {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.CollectAndCount(reg); n != 0 {
		t.Errorf("closed sessions still report %d series", n)
	}
	for r := range traceWorkers {
		checkTrace(t, r, traces[r].Bytes(), retx)
	}
}

// joinTraced joins the traced job's ranks, each tracing to its buffer;
// rank 1 drops 5% of its packets.
func joinTraced(ctx context.Context, t *testing.T, controller string, traces []bytes.Buffer) []*switchml.Session {
	t.Helper()
	sessions := make([]*switchml.Session, traceWorkers)
	errs := make([]error, traceWorkers)
	var wg sync.WaitGroup
	for r := range traceWorkers {
		wg.Go(func() {
			cfg := switchml.Config{Controller: controller, Job: "traced", Rank: r, Workers: traceWorkers, Lanes: traceLanes, Window: 8, Trace: &traces[r]}
			if r == 1 {
				cfg.Faults = transport.Faults{Drop: 0.05, Seed: 3}
			}
			sessions[r], errs[r] = switchml.Join(ctx, cfg)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return sessions
}

// runTracedCall has every rank pass a barrier and make one allreduce call;
// rank 1 comes 100 ms late to call traceLate.
func runTracedCall(ctx context.Context, t *testing.T, sessions []*switchml.Session, call int) {
	t.Helper()
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for r, s := range sessions {
		wg.Go(func() {
			if err := s.Barrier(ctx, "start"); err != nil {
				errs[r] = err
				return
			}
			if r == 1 && call == traceLate {
				time.Sleep(100 * time.Millisecond)
			}
			x := make([]float32, traceElements)
			for i := range x {
				x[i] = float32(i % 7)
			}
			errs[r] = s.AllReduceFloat32(ctx, x)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// checkTraceMetrics checks the sessions' collectors: a duration histogram
// per rank, retransmissions on the lossy rank and the reduced elements.
// It returns rank 1's retransmissions.
func checkTraceMetrics(t *testing.T, reg *prometheus.Registry, sessions []*switchml.Session) uint64 {
	t.Helper()
	if n := testutil.CollectAndCount(reg, "switchml_worker_allreduce_duration_seconds"); n != traceWorkers {
		t.Errorf("%d duration histograms, want one per rank", n)
	}
	retx := sessions[1].Stats().Retransmits
	if retx == 0 {
		t.Fatal("rank 1 dropped 5% of its packets and retransmitted none")
	}
	if err := testutil.GatherAndCompare(reg, bytes.NewBufferString(`
# HELP switchml_worker_retransmissions_total Packets sent again after their timer expired.
# TYPE switchml_worker_retransmissions_total counter
switchml_worker_retransmissions_total{job="traced",rank="0"} `+itoa(sessions[0].Stats().Retransmits)+`
switchml_worker_retransmissions_total{job="traced",rank="1"} `+itoa(retx)+`
# HELP switchml_worker_reduced_elements_total Elements summed by completed allreduce calls.
# TYPE switchml_worker_reduced_elements_total counter
switchml_worker_reduced_elements_total{job="traced",rank="0"} `+itoa(traceCalls*traceElements)+`
switchml_worker_reduced_elements_total{job="traced",rank="1"} `+itoa(traceCalls*traceElements)+`
`), "switchml_worker_retransmissions_total", "switchml_worker_reduced_elements_total"); err != nil {
		t.Error(err)
	}
	return retx
}

// checkTrace checks rank r's trace: complete spans only in its process,
// one allreduce span per call in order, one lane span per call and lane,
// a barrier per call; on rank 0 a wait for the late peer, on rank 1 a
// retransmission burst.
func checkTrace(t *testing.T, r int, trace []byte, retx uint64) {
	t.Helper()
	var tr switchml.TraceJSON
	if err := json.Unmarshal(trace, &tr); err != nil {
		t.Fatalf("rank %d: trace is not JSON: %v\n%s", r, err, trace)
	}
	count := map[string]int{}
	var lateWait bool
	var lastCall float64
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		count[e.Name]++
		if e.Pid != r {
			t.Errorf("rank %d: event %s in process %d", r, e.Name, e.Pid)
		}
		switch e.Name {
		case "allreduce":
			if e.Tid != 0 || e.Args["elements"] != float64(traceElements) || e.Ts < lastCall {
				t.Errorf("rank %d: allreduce span %+v", r, e)
			}
			lastCall = e.Ts
		case "lane":
			if e.Tid < 1 || e.Tid > traceLanes || e.Args["elements"].(float64) <= 0 {
				t.Errorf("rank %d: lane span %+v", r, e)
			}
		case "wait for peers":
			lateWait = lateWait || e.Dur >= 50_000
		}
	}
	if count["allreduce"] != traceCalls || count["lane"] != traceCalls*traceLanes || count["barrier"] != traceCalls {
		t.Errorf("rank %d: spans %v, want %d allreduce, %d lane and %d barrier", r, count, traceCalls, traceCalls*traceLanes, traceCalls)
	}
	if r == 0 && !lateWait {
		t.Errorf("rank 0 waited 100 ms for rank 1 in call %d, and no wait for peers shows it: %v", traceLate, count)
	}
	if r == 1 && count["retransmit burst"] == 0 {
		t.Errorf("rank 1 retransmitted %d packets, and no burst shows it: %v", retx, count)
	}
}

func itoa[T int | uint64](v T) string {
	b, _ := json.Marshal(v)
	return string(b)
}
