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

// TestTraceAndCollector runs a job whose rank 1 loses packets and comes
// late to one call, and checks each rank's timeline and counters: a span
// per call and per lane, barriers, retransmission bursts on the lossy
// rank and waits for the late peer on the other.
func TestTraceAndCollector(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	const workers, lanes, elements, calls, late = 2, 2, 20_000, 4, 2
	traces := make([]bytes.Buffer, workers)
	sessions := make([]*switchml.Session, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for r := range workers {
		wg.Go(func() {
			cfg := switchml.Config{Controller: fab.ControllerAddr(), Job: "traced", Rank: r, Workers: workers, Lanes: lanes, Window: 8, Trace: &traces[r]}
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
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sessions[0].Collector(), sessions[1].Collector())
	for call := range calls {
		for r, s := range sessions {
			wg.Go(func() {
				if err := s.Barrier(ctx, "start"); err != nil {
					errs[r] = err
					return
				}
				if r == 1 && call == late {
					time.Sleep(100 * time.Millisecond)
				}
				x := make([]float32, elements)
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
	if n := testutil.CollectAndCount(reg, "switchml_worker_allreduce_duration_seconds"); n != workers {
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
switchml_worker_reduced_elements_total{job="traced",rank="0"} `+itoa(calls*elements)+`
switchml_worker_reduced_elements_total{job="traced",rank="1"} `+itoa(calls*elements)+`
`), "switchml_worker_retransmissions_total", "switchml_worker_reduced_elements_total"); err != nil {
		t.Error(err)
	}
	for _, s := range sessions {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.CollectAndCount(reg); n != 0 {
		t.Errorf("closed sessions still report %d series", n)
	}

	for r := range workers {
		var tr switchml.TraceJSON
		if err := json.Unmarshal(traces[r].Bytes(), &tr); err != nil {
			t.Fatalf("rank %d: trace is not JSON: %v\n%s", r, err, traces[r].String())
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
				if e.Tid != 0 || e.Args["elements"] != float64(elements) || e.Ts < lastCall {
					t.Errorf("rank %d: allreduce span %+v", r, e)
				}
				lastCall = e.Ts
			case "lane":
				if e.Tid < 1 || e.Tid > lanes || e.Args["elements"].(float64) <= 0 {
					t.Errorf("rank %d: lane span %+v", r, e)
				}
			case "wait for peers":
				lateWait = lateWait || e.Dur >= 50_000
			}
		}
		if count["allreduce"] != calls || count["lane"] != calls*lanes || count["barrier"] != calls {
			t.Errorf("rank %d: spans %v, want %d allreduce, %d lane and %d barrier", r, count, calls, calls*lanes, calls)
		}
		if r == 0 && !lateWait {
			t.Errorf("rank 0 waited 100 ms for rank 1 in call %d, and no wait for peers shows it: %v", late, count)
		}
		if r == 1 && count["retransmit burst"] == 0 {
			t.Errorf("rank 1 retransmitted %d packets, and no burst shows it: %v", retx, count)
		}
	}
}

func itoa[T int | uint64](v T) string {
	b, _ := json.Marshal(v)
	return string(b)
}
