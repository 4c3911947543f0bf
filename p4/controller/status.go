package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchml/switchml-go/p4/controller/controllerpb"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
)

// switchRef holds the switch in an atomic pointer.
type switchRef struct{ Switch }

// counterReader is a switch whose stats counter can be read (a P4Runtime
// Client).
type counterReader interface {
	ReadCounters(ctx context.Context) ([]int64, error)
}

// statusReadTimeout bounds the read of the switch's counters for Status.
const statusReadTimeout = 5 * time.Second

// dataplanes is the switch's data plane address, or its shards' addresses
// comma-separated.
func (s *JobService) dataplanes() string {
	if len(s.cfg.Shards) < 2 {
		return s.cfg.Dataplane.String()
	}
	out := make([]string, len(s.cfg.Shards))
	for i, a := range s.cfg.Shards {
		out[i] = a.String()
	}
	return strings.Join(out, ",")
}

// Status implements controllerpb.JobService: the job table as the core
// holds it, and the switch's counters read afterwards, outside the lock.
func (s *JobService) Status(ctx context.Context, req *controllerpb.StatusRequest) (*controllerpb.StatusResponse, error) {
	s.mu.Lock()
	resp := &controllerpb.StatusResponse{
		TargetKind: s.cfg.Target.Kind, Dataplane: s.dataplanes(), Slots: uint32(s.cfg.Slots),
		SlotsInUse: uint32(s.core.slotsInUse()), Offline: s.core.Offline(), Jobs: s.core.statusJobs(time.Now()),
		Ended: map[string]uint64{},
	}
	resp.ControlLost = s.ControlLost()
	for cause, n := range s.core.endings {
		resp.Ended[endCause(cause).String()] = n
	}
	s.mu.Unlock()
	// The core keeps its registrations' address lists: the answer gets
	// copies, marshalled after the lock is gone.
	for _, j := range resp.Jobs {
		for _, r := range j.Ranks {
			r.LaneAddresses = slices.Clone(r.LaneAddresses)
		}
	}
	if req.GetSkipSwitchCounters() {
		return resp, nil
	}
	cr, ok := s.current.Load().Switch.(counterReader)
	if !ok {
		resp.SwitchCountersError = "this switch connection reads no counters"
		return resp, nil
	}
	rctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
	defer cancel()
	counts, err := cr.ReadCounters(rctx)
	if err != nil {
		s.metrics.switchErrors.WithLabelValues("read_counters").Inc()
		resp.SwitchCountersError = fmt.Sprintf("reading the switch's stats counter over P4Runtime: %v", err)
		return resp, nil
	}
	for i, n := range counts {
		name := counterName(i)
		if n == 0 && i >= int(pipeline.NumStats) && name == "" {
			continue
		}
		if name == "" {
			name = fmt.Sprintf("stat(%d)", i)
		}
		resp.SwitchCounters = append(resp.SwitchCounters, &controllerpb.SwitchCounter{Index: uint32(i), Name: name, Packets: uint64(max(n, 0))})
	}
	return resp, nil
}

// counterName names an index of the stats counter: the pipeline's names,
// and the P4 programs' simulated-loss drops; "" for an unnamed index.
func counterName(i int) string {
	switch {
	case i < int(pipeline.NumStats):
		return pipeline.Stat(i).String()
	case i == p4info.StatsSize-1:
		return "drop_simulated"
	}
	return ""
}
