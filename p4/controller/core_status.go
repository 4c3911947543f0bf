package controller

// What the core tells an operator: the job table and the counts of how
// jobs ended, read by the driver under its lock.

import (
	"maps"
	"slices"
	"time"

	"github.com/switchml/switchml-go/p4/controller/controllerpb"
)

// endCause classifies why a generation ended, for the counters.
type endCause uint8

const (
	endFinished   endCause = iota // every rank left
	endRestarted                  // a rank registered again: a new run
	endRankFailed                 // a rank aborted the session
	endRankLost                   // a rank's lease lapsed, or it did not come back after a restart
	endAbandoned                  // every rank gave up waiting while the job gathered
	endSwitchLost                 // the controller lost the switch
	endUnclaimed                  // found on the switch after a restart, and no rank took it back
	endFailed                     // it could not be placed or the switch refused it
	endFallback                   // the switch could not take it, and its ranks went to the ring
	numEndCauses
)

var endCauseNames = [numEndCauses]string{
	"finished", "restarted", "rank_failed", "rank_lost", "abandoned", "switch_lost", "unclaimed", "failed", "fallback",
}

func (c endCause) String() string { return endCauseNames[c] }

// stateUnclaimed is the state the job table reports for a job found on
// the switch that no rank has taken back yet.
const stateUnclaimed = "unclaimed"

// jobsByState counts the generations that hold or wait for switch room.
func (c *core) jobsByState() map[string]int {
	n := map[string]int{}
	for _, j := range c.jobs {
		n[j.state.String()]++
	}
	for _, j := range c.draining {
		n[j.state.String()]++
	}
	n[stateUnclaimed] += len(c.detached)
	return n
}

// slotsInUse counts the slots held by jobs on the switch: installing,
// active, draining and unclaimed ones.
func (c *core) slotsInUse() int {
	used := 0
	for _, j := range c.liveJobs() {
		used += int(j.resp.GetPoolSize())
	}
	return used
}

// liveJobs lists the generations that hold a partition, in partition
// order.
func (c *core) liveJobs() []*job {
	var out []*job
	for _, j := range c.jobs {
		if j.state == jobInstalling || j.state == jobActive {
			out = append(out, j)
		}
	}
	for _, gen := range slices.Sorted(maps.Keys(c.draining)) {
		out = append(out, c.draining[gen])
	}
	for _, id := range slices.Sorted(maps.Keys(c.detached)) {
		out = append(out, c.detached[id])
	}
	slices.SortStableFunc(out, func(a, b *job) int { return int(a.resp.GetPoolBase()) - int(b.resp.GetPoolBase()) })
	return out
}

// statusJobs describes every generation of the job table for an operator,
// the live ones first in partition order, then those still gathering or
// queued by name. It reveals no secret: no token, no session id (which
// the session's calls present as their proof of membership).
func (c *core) statusJobs(now time.Time) []*controllerpb.JobStatus {
	var out []*controllerpb.JobStatus
	add := func(j *job, state string) {
		js := &controllerpb.JobStatus{
			Name: j.name, State: state, WorldSize: uint32(len(j.ranks)),
			Lanes: j.params.GetLanes(), Window: j.params.GetWindow(), PacketElements: j.params.GetElements(),
			JobId: j.resp.GetJobId(), PoolBase: j.resp.GetPoolBase(), PoolSize: j.resp.GetPoolSize(),
		}
		if !j.registeredAt.IsZero() {
			js.AgeSeconds = now.Sub(j.registeredAt).Seconds()
		}
		for r, reg := range j.ranks {
			if reg == nil {
				continue
			}
			rs := &controllerpb.RankStatus{Rank: uint32(r), LaneAddresses: reg.req.GetLaneAddresses(),
				Leased: j.leased[uint32(r)], Left: j.left[uint32(r)]}
			js.Ranks = append(js.Ranks, rs)
		}
		out = append(out, js)
	}
	for _, j := range c.liveJobs() {
		state := j.state.String()
		if c.detached[j.resp.GetJobId()] == j {
			state = stateUnclaimed
		}
		add(j, state)
	}
	for _, n := range slices.Sorted(maps.Keys(c.jobs)) {
		if j := c.jobs[n]; j.state == jobGathering || j.state == jobQueued {
			add(j, j.state.String())
		}
	}
	return out
}
