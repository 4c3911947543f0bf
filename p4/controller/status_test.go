package controller

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchml/switchml-go/jobpb"
)

// TestStatusListsLiveJobs: two live jobs appear with their ranks, lane
// addresses and disjoint partitions; no session id is revealed; the
// switch's counters come along; the metrics agree, by switch job id and
// never by name; a finished job leaves the table and is counted by cause.
func TestStatusListsLiveJobs(t *testing.T) {
	h := newJobHarness(t, 64)
	ctx := testCtx(t)
	_, cancelsA, a := joined(t, h, "alpha", 2)
	_, _, b := joined(t, h, "beta", 3)

	st, err := h.jobs.Status(ctx, &jobpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSlots() != 64 || st.GetSlotsInUse() != a.GetPoolSize()+b.GetPoolSize() {
		t.Errorf("slots %d, in use %d; want 64 and %d", st.GetSlots(), st.GetSlotsInUse(), a.GetPoolSize()+b.GetPoolSize())
	}
	want := map[string]*jobpb.RegisterResponse{"alpha": a, "beta": b}
	checkStatusJobs(t, st, want)
	checkStatusHidesSessions(t, st, want)
	if st.GetSwitchCountersError() != "" || len(st.GetSwitchCounters()) == 0 || st.GetSwitchCounters()[0].GetName() != "received" {
		t.Errorf("switch counters %v, error %q", st.GetSwitchCounters(), st.GetSwitchCountersError())
	}

	// The metrics agree with the table.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h.svc.Collector())
	checkLiveJobMetrics(t, h, reg, a, b)

	// alpha ends: its ranks leave; it is gone from the table and the
	// gauges, and counted as finished.
	for r := range uint32(2) {
		if _, err := h.jobs.Leave(ctx, &jobpb.LeaveRequest{Job: "alpha", Rank: r, SessionId: a.GetSessionId(), RankSecret: h.secret("alpha", r)}); err != nil {
			t.Fatal(err)
		}
		cancelsA[r]()
	}
	<-h.svc.Drained()
	st, err = h.jobs.Status(ctx, &jobpb.StatusRequest{SkipSwitchCounters: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetJobs()) != 1 || st.GetJobs()[0].GetName() != "beta" || st.GetEnded()["finished"] != 1 || len(st.GetSwitchCounters()) != 0 {
		t.Errorf("after alpha left: %v", st)
	}
	checkEndedJobMetrics(t, reg, b)
}

// checkStatusJobs checks the status lists exactly the jobs of want, each
// active at its partition with every rank leased, on one lane.
func checkStatusJobs(t *testing.T, st *jobpb.StatusResponse, want map[string]*jobpb.RegisterResponse) {
	t.Helper()
	if len(st.GetJobs()) != len(want) {
		t.Fatalf("status lists %d jobs, want %d: %v", len(st.GetJobs()), len(want), st.GetJobs())
	}
	for _, j := range st.GetJobs() {
		resp := want[j.GetName()]
		if resp == nil {
			t.Fatalf("unexpected job %q", j.GetName())
		}
		if j.GetState() != "active" || j.GetPoolBase() != resp.GetPoolBase() || j.GetPoolSize() != resp.GetPoolSize() || j.GetJobId() != resp.GetJobId() {
			t.Errorf("job %s: %v, want active at %d+%d, id %d", j.GetName(), j, resp.GetPoolBase(), resp.GetPoolSize(), resp.GetJobId())
		}
		if int(j.GetWorldSize()) != len(j.GetRanks()) {
			t.Errorf("job %s: %d ranks listed of %d", j.GetName(), len(j.GetRanks()), j.GetWorldSize())
		}
		for r, rs := range j.GetRanks() {
			if rs.GetRank() != uint32(r) || len(rs.GetLaneAddresses()) != 1 || !rs.GetLeased() || rs.GetLeft() {
				t.Errorf("job %s rank %d: %v", j.GetName(), r, rs)
			}
		}
	}
}

// checkStatusHidesSessions checks the status names no session and shows
// none of the jobs' session ids.
func checkStatusHidesSessions(t *testing.T, st *jobpb.StatusResponse, jobs map[string]*jobpb.RegisterResponse) {
	t.Helper()
	if strings.Contains(st.String(), "session") {
		t.Errorf("status names a session: %v", st)
	}
	for _, resp := range jobs {
		if id := resp.GetSessionId(); strings.Contains(st.String(), " "+strconv.FormatUint(id, 10)) {
			t.Errorf("status reveals session id %d", id)
		}
	}
}

// checkLiveJobMetrics checks the gauges and counters while jobs a (alpha)
// and b (beta) are live.
func checkLiveJobMetrics(t *testing.T, h *jobHarness, reg prometheus.Gatherer, a, b *jobpb.RegisterResponse) {
	t.Helper()
	if n := (metricWith(t, reg, "switchml_controller_jobs", "state", "active")); n != 2 {
		t.Errorf("active jobs %v, want 2", n)
	}
	if n := (metricWith(t, reg, "switchml_controller_job_slots", "job_id", strconv.FormatUint(uint64(b.GetJobId()), 10))); n != float64(b.GetPoolSize()) {
		t.Errorf("beta's slots %v, want %d", n, b.GetPoolSize())
	}
	if n := (metricWith(t, reg, "switchml_controller_slots_free", "", "")); n != float64(64-a.GetPoolSize()-b.GetPoolSize()) {
		t.Errorf("slots free %v", n)
	}
	// The metrics endpoint knows no caller: it names no job.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == "alpha" || l.GetValue() == "beta" {
					t.Errorf("%s{%s=%q}: the metrics name a job", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	if n := testutil.ToFloat64(h.svc.metrics.registrations.WithLabelValues("OK")); n != 5 {
		t.Errorf("%v registrations answered OK, want 5", n)
	}
	if n := testutil.CollectAndCount(h.svc.metrics.ready); n != 1 {
		t.Errorf("ready histogram: %d series", n)
	}
}

// checkEndedJobMetrics checks that after alpha finished one job is counted
// as finished and only b (beta) has slots.
func checkEndedJobMetrics(t *testing.T, reg prometheus.Gatherer, b *jobpb.RegisterResponse) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP switchml_controller_jobs_ended_total Jobs that ended, by cause (finished, restarted, rank_failed, rank_lost, abandoned, switch_lost, unclaimed, failed, fallback).
# TYPE switchml_controller_jobs_ended_total counter
switchml_controller_jobs_ended_total{cause="abandoned"} 0
switchml_controller_jobs_ended_total{cause="failed"} 0
switchml_controller_jobs_ended_total{cause="fallback"} 0
switchml_controller_jobs_ended_total{cause="finished"} 1
switchml_controller_jobs_ended_total{cause="rank_failed"} 0
switchml_controller_jobs_ended_total{cause="rank_lost"} 0
switchml_controller_jobs_ended_total{cause="restarted"} 0
switchml_controller_jobs_ended_total{cause="switch_lost"} 0
switchml_controller_jobs_ended_total{cause="unclaimed"} 0
# HELP switchml_controller_job_slots Slots of a live job's partition, by switch job id (switchml status names the job).
# TYPE switchml_controller_job_slots gauge
`+"switchml_controller_job_slots{job_id=\""+strconv.FormatUint(uint64(b.GetJobId()), 10)+"\"} "+strconv.FormatUint(uint64(b.GetPoolSize()), 10)+"\n"),
		"switchml_controller_jobs_ended_total", "switchml_controller_job_slots"); err != nil {
		t.Error(err)
	}
}

// metricWith is the value of the metric of a family with label
// name=value (name "" for a family without labels).
func metricWith(t *testing.T, g prometheus.Gatherer, family, name, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := name == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == name && l.GetValue() == value {
					match = true
				}
			}
			if match {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", family, name, value)
	return 0
}
