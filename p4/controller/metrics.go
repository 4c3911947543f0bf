package controller

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
)

// serviceMetrics are the job service's event counters; the job table's
// gauges are read from the core at scrape time.
type serviceMetrics struct {
	registrations *prometheus.CounterVec
	ready         prometheus.Histogram
	switchErrors  *prometheus.CounterVec
	switchLost    prometheus.Counter
	refusedCalls  prometheus.Counter
	// waitingForSwitch counts the Register calls waiting for the
	// controller to have the switch back.
	waitingForSwitch prometheus.Gauge
}

func newServiceMetrics() *serviceMetrics {
	return &serviceMetrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchml_controller_registrations_total",
			Help: "Register calls answered, by gRPC code (OK: the rank joined a programmed job).",
		}, []string{"code"}),
		ready: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchml_controller_job_ready_seconds",
			Help:    "Time from a job's first registration until the switch was programmed for it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms .. 262 s
		}),
		switchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchml_controller_p4runtime_errors_total",
			Help: "P4Runtime operations on the switch that failed, by operation (install, remove, read_counters).",
		}, []string{"op"}),
		switchLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchml_controller_switch_lost_total",
			Help: "Times the controller lost its P4Runtime connection to the switch (every live job ends).",
		}),
		refusedCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchml_controller_calls_refused_total",
			Help: "Calls refused as they arrived because their client identity had its bound of their kind open (Options.MaxCallsPerClient, MaxLeasesPerClient).",
		}),
		waitingForSwitch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchml_controller_registrations_waiting_for_switch",
			Help: "Register calls waiting for the controller to reconnect to the switch and clear what the jobs it lost left there.",
		}),
	}
}

// serviceCollector exposes a job service to Prometheus.
type serviceCollector struct {
	s *JobService

	jobs, slots, slotsFree, jobSlots, jobWorkers, ended *prometheus.Desc
}

// Collector returns a prometheus.Collector of the job service: jobs by
// state, slots free, slots and workers of each live job (labelled by job
// name only while the job holds its partition), jobs ended by cause,
// registrations, time to become ready and P4Runtime errors. Register it
// once per service.
func (s *JobService) Collector() prometheus.Collector {
	return &serviceCollector{
		s:          s,
		jobs:       prometheus.NewDesc("switchml_controller_jobs", "Jobs in the job table, by state (gathering, queued, installing, active, draining, unclaimed).", []string{"state"}, nil),
		slots:      prometheus.NewDesc("switchml_controller_slots", "Slots per set in the switch's pool.", nil, nil),
		slotsFree:  prometheus.NewDesc("switchml_controller_slots_free", "Slots no job holds.", nil, nil),
		jobSlots:   prometheus.NewDesc("switchml_controller_job_slots", "Slots of a live job's partition.", []string{"job"}, nil),
		jobWorkers: prometheus.NewDesc("switchml_controller_job_workers", "Ranks of a live job.", []string{"job"}, nil),
		ended:      prometheus.NewDesc("switchml_controller_jobs_ended_total", "Jobs that ended, by cause (finished, restarted, rank_failed, rank_lost, abandoned, switch_lost, unclaimed, failed, fallback).", []string{"cause"}, nil),
	}
}

// tableStates are the states the jobs gauge always reports, zero or not,
// so that a state's series does not come and go.
var tableStates = jobcore.States()

func (c *serviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobs, c.slots, c.slotsFree, c.jobSlots, c.jobWorkers, c.ended} {
		ch <- d
	}
	m := c.s.metrics
	m.registrations.Describe(ch)
	m.ready.Describe(ch)
	m.switchErrors.Describe(ch)
	m.switchLost.Describe(ch)
	m.refusedCalls.Describe(ch)
	m.waitingForSwitch.Describe(ch)
}

// liveJob is what the collector keeps of a live job once the lock is
// released.
type liveJob struct {
	name           string
	slots, workers int
}

func (c *serviceCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	g := s.core.Gauges()
	s.mu.Unlock()
	byState, used, endings := g.ByState, g.SlotsInUse, g.Ended
	var live []liveJob
	for _, j := range g.Live {
		name := j.Name
		if name == "" {
			name = "unclaimed-" + strconv.FormatUint(uint64(j.JobID), 10)
		}
		live = append(live, liveJob{name: name, slots: j.Slots, workers: j.Workers})
	}

	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for _, st := range tableStates {
		gauge(c.jobs, byState[st], st)
	}
	gauge(c.slots, s.cfg.Slots)
	gauge(c.slotsFree, s.cfg.Slots-used)
	// A retiring generation (draining) may share its name with the next
	// one: the name's series sums them.
	perJob := map[string]liveJob{}
	for _, j := range live {
		a := perJob[j.name]
		a.slots += j.slots
		a.workers = max(a.workers, j.workers)
		perJob[j.name] = a
	}
	for name, a := range perJob {
		gauge(c.jobSlots, a.slots, name)
		gauge(c.jobWorkers, a.workers, name)
	}
	for cause, n := range endings {
		ch <- prometheus.MustNewConstMetric(c.ended, prometheus.CounterValue, float64(n), jobcore.EndCause(cause).String())
	}
	m := s.metrics
	m.registrations.Collect(ch)
	m.ready.Collect(ch)
	m.switchErrors.Collect(ch)
	m.switchLost.Collect(ch)
	m.refusedCalls.Collect(ch)
	m.waitingForSwitch.Collect(ch)
}
