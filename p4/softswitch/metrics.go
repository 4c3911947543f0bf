package softswitch

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/transport"
)

// switchCollector exposes a software switch's counters to Prometheus. It
// reads them at scrape time, so the packet path pays nothing for it.
type switchCollector struct {
	sw *Switch

	received, sent, receivedBytes, sentBytes, sendErrors, selfDrops *prometheus.Desc
	socketDrops, slots, maxElements                                 *prometheus.Desc
	drops                                                           *prometheus.Desc
	// The counters of a data plane with shared-memory inboxes
	// (transport.InboxCounter).
	shmDatagrams, shmShared, shmRingFull, shmDoorbells *prometheus.Desc
	// pipeline holds the description of every switchjob.Stat that is not a
	// drop (nil for drops, which share the drops family).
	pipeline [switchjob.NumStats]*prometheus.Desc
}

// pipelineMetrics names the pipeline counters that are not drops, with
// their help text; drops become switchml_switch_drops_total{reason}.
var pipelineMetrics = map[switchjob.Stat][2]string{
	switchjob.StatReceived:        {"switchml_switch_pipeline_packets_total", "Packets handed to the switch pipeline."},
	switchjob.StatAggregated:      {"switchml_switch_contributions_aggregated_total", "Contributions added to a slot."},
	switchjob.StatAbsorbed:        {"switchml_switch_contributions_absorbed_total", "Contributions added to a slot that still waits for other workers (no packet out, nothing lost)."},
	switchjob.StatMulticast:       {"switchml_switch_results_multicast_total", "Slot uses completed by every worker and multicast."},
	switchjob.StatReplicas:        {"switchml_switch_result_replicas_total", "Result copies emitted by multicast, one per worker lane."},
	switchjob.StatRetransmitReply: {"switchml_switch_retransmissions_answered_total", "Retransmissions answered by unicast from a completed slot."},
}

// dropReason is the reason label of a drop counter, or "" for a counter
// that is not a drop.
func dropReason(s switchjob.Stat) string {
	name, ok := strings.CutPrefix(s.String(), "drop_")
	if !ok {
		return ""
	}
	return name
}

// Collector returns a prometheus.Collector of the switch's data plane and
// pipeline counters: packets and bytes in and out, drops by reason, kernel
// socket drops, retransmissions answered, and a shared-memory data plane's
// own counters. Register it once per switch.
func (s *Switch) Collector() prometheus.Collector {
	c := &switchCollector{
		sw:            s,
		received:      prometheus.NewDesc("switchml_switch_received_packets_total", "Datagrams the data plane received.", nil, nil),
		sent:          prometheus.NewDesc("switchml_switch_sent_packets_total", "Datagrams the data plane handed to the kernel (after injected faults).", nil, nil),
		receivedBytes: prometheus.NewDesc("switchml_switch_received_bytes_total", "UDP payload bytes the data plane received.", nil, nil),
		sentBytes:     prometheus.NewDesc("switchml_switch_sent_bytes_total", "UDP payload bytes the data plane handed to the kernel.", nil, nil),
		sendErrors:    prometheus.NewDesc("switchml_switch_send_errors_total", "Datagrams the kernel refused to send.", nil, nil),
		selfDrops:     prometheus.NewDesc("switchml_switch_self_drops_total", "Datagrams not sent because their destination is the switch's own data-plane address.", nil, nil),
		socketDrops:   prometheus.NewDesc("switchml_switch_socket_drops_total", "Datagrams the kernel dropped at the data plane socket (receive queue full), as /proc/net/udp counts them.", nil, nil),
		slots:         prometheus.NewDesc("switchml_switch_slots", "Aggregation slots per set in the switch's pool.", nil, nil),
		maxElements:   prometheus.NewDesc("switchml_switch_max_packet_elements", "Largest number of values per packet the switch takes.", nil, nil),
		drops:         prometheus.NewDesc("switchml_switch_drops_total", "Packets the pipeline dropped, by reason (the pipeline's drop_* counters).", []string{"reason"}, nil),
		shmDatagrams:  prometheus.NewDesc("switchml_switch_shm_datagrams_total", "Datagrams a shared-memory data plane moved through inboxes rather than UDP, by direction.", []string{"direction"}, nil),
		shmShared:     prometheus.NewDesc("switchml_switch_shm_shared_total", "Results a shared-memory data plane wrote once, into its outbox, and referenced from a worker's inbox instead of copying.", nil, nil),
		shmRingFull:   prometheus.NewDesc("switchml_switch_shm_ring_full_drops_total", "Datagrams a shared-memory data plane dropped at a worker's full ring.", nil, nil),
		shmDoorbells:  prometheus.NewDesc("switchml_switch_shm_doorbells_total", "Times a shared-memory data plane woke a sleeping worker.", nil, nil),
	}
	for st := range switchjob.NumStats {
		if dropReason(st) != "" {
			continue
		}
		m, ok := pipelineMetrics[st]
		if !ok {
			m = [2]string{"switchml_switch_pipeline_" + st.String() + "_total", "Pipeline counter " + st.String() + "."}
		}
		c.pipeline[st] = prometheus.NewDesc(m[0], m[1], nil, nil)
	}
	return c
}

func (c *switchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.received, c.sent, c.receivedBytes, c.sentBytes, c.sendErrors, c.selfDrops, c.socketDrops, c.slots, c.maxElements, c.drops,
		c.shmDatagrams, c.shmShared, c.shmRingFull, c.shmDoorbells} {
		ch <- d
	}
	for _, d := range c.pipeline {
		if d != nil {
			ch <- d
		}
	}
}

func (c *switchCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.sw.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.received, st.Received.Load())
	counter(c.sent, st.Sent.Load())
	counter(c.receivedBytes, st.ReceivedBytes.Load())
	counter(c.sentBytes, st.SentBytes.Load())
	counter(c.sendErrors, st.SendErrors.Load())
	counter(c.selfDrops, st.SelfDrops.Load())
	var drops uint64
	found := false
	for _, conn := range c.sw.conns {
		if n, ok := udpSocketDrops(conn.LocalAddr()); ok {
			drops, found = drops+n, true
		}
	}
	if found {
		counter(c.socketDrops, drops)
	}
	var inbox transport.InboxCounts
	inboxFound := false
	for _, conn := range c.sw.conns {
		if ic, ok := conn.(transport.InboxCounter); ok {
			inbox.Add(ic.InboxCounts())
			inboxFound = true
		}
	}
	if inboxFound {
		counter(c.shmDatagrams, inbox.Received, "received")
		counter(c.shmDatagrams, inbox.Sent, "sent")
		counter(c.shmShared, inbox.Shared)
		counter(c.shmRingFull, inbox.RingFull)
		counter(c.shmDoorbells, inbox.Wakeups)
	}
	cfg := c.sw.srv.PipelineConfig()
	ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(cfg.Slots))
	ch <- prometheus.MustNewConstMetric(c.maxElements, prometheus.GaugeValue, float64(cfg.MaxElements))
	for i, v := range c.sw.Counters() {
		s := switchjob.Stat(i)
		if r := dropReason(s); r != "" {
			counter(c.drops, v, r)
		} else {
			counter(c.pipeline[s], v)
		}
	}
}
