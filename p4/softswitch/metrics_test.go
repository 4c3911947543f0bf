package softswitch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/transport"
)

// gathered is one scrape: value by series, "name" or "name{label=value}".
type gathered map[string]float64

func gather(t *testing.T, g prometheus.Gatherer) gathered {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := gathered{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			if ls := m.GetLabel(); len(ls) > 0 {
				var parts []string
				for _, l := range ls {
					parts = append(parts, l.GetName()+"="+l.GetValue())
				}
				key += "{" + strings.Join(parts, ",") + "}"
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// The scraped job: two ranks of two lanes with a window of 16, summing
// 50,000 elements three times.
const scrapedWorkers, scrapedElements, scrapedIters = 2, 50_000, 3

// TestMetricsDuringAJob scrapes the switch's and the controller's
// collectors while a job runs through a switch that loses results, and
// checks that the counters agree with what the job did.
func TestMetricsDuringAJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := prometheus.NewPedanticRegistry()
	f, err := local.Start(ctx, local.Options{Slots: 256, Metrics: reg, Faults: transport.Faults{Drop: 0.05, Seed: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkIdleMetrics(t, gather(t, reg))

	sessions := joinScraped(ctx, t, f.ControllerAddr())
	for it := range scrapedIters {
		reduceScraped(ctx, t, sessions, it)
	}
	during := gather(t, reg)
	for _, s := range sessions {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}

	checkSwitchMetrics(t, during, sessions[0].PacketElements())
	checkControllerMetrics(t, during)
	// Labels of a job last as long as the job.
	awaitJobUnlabelled(t, reg)
	for i := range switchjob.NumStats {
		if i == switchjob.StatReceived {
			continue
		}
		if _, ok := during["switchml_switch_drops_total{reason="+strings.TrimPrefix(i.String(), "drop_")+"}"]; !ok && strings.HasPrefix(i.String(), "drop_") {
			t.Errorf("counter %s is not exposed", i)
		}
	}
}

// checkIdleMetrics checks an idle switch's scrape: a drop counter for
// every reason, and all 256 slots there and free.
func checkIdleMetrics(t *testing.T, before gathered) {
	t.Helper()
	for _, reason := range []string{"not_worker", "malformed", "out_of_partition", "stale", "mismatch", "bad_tag"} {
		if _, ok := before["switchml_switch_drops_total{reason="+reason+"}"]; !ok {
			t.Errorf("no drop counter for reason %s: %v", reason, before)
		}
	}
	if before["switchml_switch_slots"] != 256 || before["switchml_controller_slots_free"] != 256 {
		t.Errorf("an idle switch of 256 slots: %v", before)
	}
}

// joinScraped joins the scraped job's ranks.
func joinScraped(ctx context.Context, t *testing.T, controller string) []*switchml.Session {
	t.Helper()
	sessions := make([]*switchml.Session, scrapedWorkers)
	var wg sync.WaitGroup
	errs := make([]error, scrapedWorkers)
	for r := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessions[r], errs[r] = switchml.Join(ctx, switchml.Config{Controller: controller, Job: "scraped", Rank: r, Workers: scrapedWorkers, Lanes: 2, Window: 16})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return sessions
}

// reduceScraped makes the it-th allreduce call on every rank.
func reduceScraped(ctx context.Context, t *testing.T, sessions []*switchml.Session, it int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	for r, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]int32, scrapedElements)
			for i := range x {
				x[i] = int32(r + i)
			}
			errs[r] = s.AllReduceInt32(ctx, x)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("allreduce %d rank %d: %v", it, r, err)
		}
	}
}

// checkSwitchMetrics checks the switch's counters against the job's
// packets of pe elements, the loss and the UDP transport.
func checkSwitchMetrics(t *testing.T, during gathered, pe int) {
	t.Helper()
	packets := float64(scrapedIters * scrapedWorkers * ((scrapedElements + pe - 1) / pe))
	if got := during["switchml_switch_received_packets_total"]; got < packets {
		t.Errorf("switch received %v packets, want at least %v (%d x %d elements in %d-value packets from %d workers)", got, packets, scrapedIters, scrapedElements, pe, scrapedWorkers)
	}
	if got := during["switchml_switch_received_bytes_total"]; got < float64(scrapedIters*scrapedWorkers*scrapedElements*4) {
		t.Errorf("switch received %v bytes, want at least %d", got, scrapedIters*scrapedWorkers*scrapedElements*4)
	}
	if got, in := during["switchml_switch_pipeline_packets_total"], during["switchml_switch_received_packets_total"]; got != in {
		t.Errorf("pipeline saw %v packets, the data plane received %v", got, in)
	}
	if during["switchml_switch_results_multicast_total"] < packets/scrapedWorkers {
		t.Errorf("%v results multicast, want at least %v", during["switchml_switch_results_multicast_total"], packets/scrapedWorkers)
	}
	// The switch drops 5% of what it sends: workers time out and the
	// switch answers their retransmissions from completed slots.
	if during["switchml_switch_retransmissions_answered_total"] == 0 {
		t.Errorf("no retransmission answered under 5%% loss: %v", during)
	}
	if sent, replicas := during["switchml_switch_sent_packets_total"], during["switchml_switch_result_replicas_total"]+during["switchml_switch_retransmissions_answered_total"]; sent >= replicas || sent < 0.8*replicas {
		t.Errorf("sent %v packets of %v replies made: want about 95%% of them after loss", sent, replicas)
	}
	if _, ok := during["switchml_switch_shm_shared_total"]; ok {
		t.Errorf("a UDP switch exposes shared-memory counters: %v", during)
	}
}

// checkControllerMetrics checks the controller's gauges and counters while
// the job is active.
func checkControllerMetrics(t *testing.T, during gathered) {
	t.Helper()
	// The one job is the switch's first: job id 1.
	if during["switchml_controller_jobs{state=active}"] != 1 || during["switchml_controller_job_slots{job_id=1}"] != 2*16 ||
		during["switchml_controller_job_workers{job_id=1}"] != scrapedWorkers || during["switchml_controller_slots_free"] != 256-2*16 {
		t.Errorf("controller during the job: %v", during)
	}
	if during["switchml_controller_registrations_total{code=OK}"] != scrapedWorkers || during["switchml_controller_job_ready_seconds"] != 1 {
		t.Errorf("controller registrations: %v", during)
	}
}

// awaitJobUnlabelled waits for the finished job's series to go and for it
// to be counted as finished.
func awaitJobUnlabelled(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		after := gather(t, reg)
		_, still := after["switchml_controller_job_slots{job_id=1}"]
		if !still && after["switchml_controller_jobs_ended_total{cause=finished}"] == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the finished job is still labelled or not counted: %v", after)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSharedMemoryMetrics scrapes a shared-memory switch after a job: the
// results went to the workers' inboxes by reference to the switch's
// outbox, and the counters say so; a UDP switch has no such series.
func TestSharedMemoryMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := prometheus.NewPedanticRegistry()
	f, err := local.Start(ctx, local.Options{Slots: 256, Metrics: reg, Transport: "shm"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const workers, elements = 3, 40_000
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for r := range workers {
		wg.Go(func() {
			s, err := switchml.Join(ctx, switchml.Config{Controller: f.ControllerAddr(), Job: "shm-scraped", Rank: r, Workers: workers,
				Lanes: 1, Window: 32, Transport: switchml.TransportShm})
			if err != nil {
				errs[r] = err
				return
			}
			defer s.Close()
			x := make([]int32, elements)
			for i := range x {
				x[i] = int32(r + i)
			}
			if errs[r] = s.AllReduceInt32(ctx, x); errs[r] == nil && x[7] != int32(workers*7+0+1+2) {
				errs[r] = fmt.Errorf("sum [7] = %d", x[7])
			}
			if got := s.Transport(); errs[r] == nil && got != switchml.TransportShm {
				errs[r] = fmt.Errorf("lanes moved packets over %q", got)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	m := gather(t, reg)
	results := m["switchml_switch_result_replicas_total"]
	in, out, shared := m["switchml_switch_shm_datagrams_total{direction=received}"], m["switchml_switch_shm_datagrams_total{direction=sent}"], m["switchml_switch_shm_shared_total"]
	if in < m["switchml_switch_pipeline_packets_total"]*0.99 || out < results || shared == 0 || shared > out {
		t.Fatalf("shm datagrams in %v, out %v, by reference %v, for %v results: %v", in, out, shared, results, m)
	}
	if _, ok := m["switchml_switch_shm_ring_full_drops_total"]; !ok {
		t.Errorf("no ring-full counter: %v", m)
	}
}
