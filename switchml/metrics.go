package switchml

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// newDurations is the histogram of a session's completed allreduce calls.
func newDurations(cfg Config) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "switchml_worker_allreduce_duration_seconds",
		Help:        "Time of completed allreduce calls, from the start of the call's turn to its result.",
		Buckets:     prometheus.ExponentialBuckets(1e-4, 2, 21), // 100 µs .. 105 s
		ConstLabels: sessionLabels(cfg),
	})
}

func sessionLabels(cfg Config) prometheus.Labels {
	return prometheus.Labels{"job": cfg.Job, "rank": strconv.Itoa(cfg.Rank)}
}

// sessionCollector exposes a session's Stats.
type sessionCollector struct {
	s     *Session
	descs []*prometheus.Desc
	// read picks each desc's value out of Stats.
	read []func(Stats) (float64, prometheus.ValueType)
}

// Collector returns a prometheus.Collector of the session, labelled with
// its job and rank: allreduce durations (a histogram), calls that failed,
// packets, bytes, retransmissions and timeouts sent, elements reduced, and
// the round-trip and timeout estimates. The counters move once per
// completed call. Once the session is closed it reports nothing, so that
// a job's series end with the job; a program that runs many sessions
// registers each one's collector and unregisters it after Close.
func (s *Session) Collector() prometheus.Collector {
	c := &sessionCollector{s: s}
	labels := sessionLabels(s.cfg)
	add := func(name, help string, typ prometheus.ValueType, v func(Stats) float64) {
		c.descs = append(c.descs, prometheus.NewDesc(name, help, nil, labels))
		c.read = append(c.read, func(st Stats) (float64, prometheus.ValueType) { return v(st), typ })
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	add("switchml_worker_allreduce_errors_total", "Allreduce calls that failed once started.", counter, func(st Stats) float64 { return float64(st.Failed) })
	add("switchml_worker_sent_packets_total", "Packets sent to the switch, retransmissions included.", counter, func(st Stats) float64 { return float64(st.Packets) })
	add("switchml_worker_sent_bytes_total", "Bytes of the packets sent to the switch, SwitchML headers included.", counter, func(st Stats) float64 { return float64(st.SentBytes) })
	add("switchml_worker_retransmissions_total", "Packets sent again after their timer expired.", counter, func(st Stats) float64 { return float64(st.Retransmits) })
	add("switchml_worker_timeouts_total", "Retransmission timers that expired.", counter, func(st Stats) float64 { return float64(st.Timeouts) })
	add("switchml_worker_reduced_elements_total", "Elements summed by completed allreduce calls.", counter, func(st Stats) float64 { return float64(st.Elements) })
	add("switchml_worker_ring_allreduces_total", "Allreduce calls completed over the ring instead of the switch (Config.Fallback).", counter, func(st Stats) float64 { return float64(st.Ring) })
	add("switchml_worker_rtt_lower_quartile_seconds", "The lanes' largest estimate of the lower quartile of result round trips (the estimate the retransmission timeout follows).", gauge, func(st Stats) float64 { return st.RTT.Seconds() })
	add("switchml_worker_retransmission_timeout_seconds", "The lanes' largest retransmission timeout.", gauge, func(st Stats) float64 { return st.Timeout.Seconds() })
	return c
}

func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	c.s.durations.Describe(ch)
}

func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.st.mu.Lock()
	closed, st := c.s.st.closed, c.s.st.stats
	c.s.st.mu.Unlock()
	if closed {
		return
	}
	for i, d := range c.descs {
		v, typ := c.read[i](st)
		ch <- prometheus.MustNewConstMetric(d, typ, v)
	}
	c.s.durations.Collect(ch)
}
