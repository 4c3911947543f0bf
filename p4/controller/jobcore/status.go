package jobcore

// What the core tells an operator: the job table and the counts of how
// jobs ended, read by the driver under its lock.

import (
	"maps"
	"slices"
	"time"

	"github.com/switchml/switchml-go/jobpb"
)

// EndCause classifies why a generation ended, for the counters.
type EndCause uint8

const (
	EndFinished   EndCause = iota // every rank left
	EndRestarted                  // a rank registered again: a new run
	EndRankFailed                 // a rank aborted the session
	EndRankLost                   // a rank's lease lapsed, or it did not come back after a restart
	EndAbandoned                  // every rank gave up waiting while the job gathered
	EndSwitchLost                 // the controller lost the switch
	EndUnclaimed                  // found on the switch after a restart, and no rank took it back
	EndFailed                     // it could not be placed or the switch refused it
	EndFallback                   // the switch could not take it, and its ranks went to the ring
	NumEndCauses
)

var endCauseNames = [NumEndCauses]string{
	"finished", "restarted", "rank_failed", "rank_lost", "abandoned", "switch_lost", "unclaimed", "failed", "fallback",
}

func (c EndCause) String() string { return endCauseNames[c] }

// StateUnclaimed is the state the job table reports for a job found on
// the switch that no rank has taken back yet.
const StateUnclaimed = "unclaimed"

// Gauges is a snapshot of the job table, for metrics and Status.
type Gauges struct {
	// ByState counts the generations that hold or wait for switch room,
	// by state (StateUnclaimed for jobs found on the switch).
	ByState map[string]int
	// SlotsInUse counts the slots of the jobs on the switch.
	SlotsInUse int
	// Ended counts the generations that ended, by cause.
	Ended [NumEndCauses]uint64
	// Live are the jobs that hold a partition, in partition order.
	Live []LiveJob
}

// LiveJob is a job that holds a partition: its name ("" for a job found on
// the switch that no rank took back yet), switch job id, slots and ranks.
type LiveJob struct {
	Name           string
	JobID          uint32
	Slots, Workers int
}

// Gauges takes a snapshot of the job table.
func (c *Core) Gauges() Gauges {
	g := Gauges{ByState: c.jobsByState(), SlotsInUse: c.slotsInUse(), Ended: c.endings}
	for _, j := range c.liveJobs() {
		g.Live = append(g.Live, LiveJob{Name: j.name, JobID: j.resp.GetJobId(), Slots: int(j.resp.GetPoolSize()), Workers: len(j.ranks)})
	}
	return g
}

// Has reports whether a generation of the named job gathers or runs.
func (c *Core) Has(name string) bool { return c.jobs[name] != nil }

// jobsByState counts the generations that hold or wait for switch room.
func (c *Core) jobsByState() map[string]int {
	n := map[string]int{}
	for _, j := range c.jobs {
		n[j.state.String()]++
	}
	for _, j := range c.draining {
		n[j.state.String()]++
	}
	n[StateUnclaimed] += len(c.detached)
	return n
}

// slotsInUse counts the slots held by jobs on the switch: installing,
// active, draining and unclaimed ones.
func (c *Core) slotsInUse() int {
	used := 0
	for _, j := range c.liveJobs() {
		used += int(j.resp.GetPoolSize())
	}
	return used
}

// liveJobs lists the generations that hold a partition, in partition
// order.
func (c *Core) liveJobs() []*job {
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

// StatusView says how much of the job table a Status reply shows: all of
// it to an operator; to others (Redact) only the jobs that Client started
// or registered a rank of, without addresses or switch-side placement; and
// how many bytes of lane addresses one reply may carry.
type StatusView struct {
	Redact    bool
	Client    string
	RankBytes int
}

// shows reports whether v shows j: an operator sees every job, anyone
// else only those it started or registered a rank of.
func (v StatusView) shows(j *job) bool {
	if !v.Redact {
		return true
	}
	// j.bytes counts the registrations of each client with a rank in j,
	// so the check visits no rank.
	return v.Client != "" && (j.client == v.Client || j.bytes[v.Client] > 0)
}

// StatusJobs describes a page of the job table for an operator: size
// generations from index first in the table's order (the live ones in
// partition order, then those still gathering or queued by name), and the
// index the next page starts at (0: none follows). It reveals no secret:
// no token, session id or rank secret. Lane addresses stop at
// v.RankBytes per page; the ranks left out are counted.
func (c *Core) StatusJobs(now time.Time, first, size int, v StatusView) ([]*jobpb.JobStatus, int) {
	type entry struct {
		j     *job
		state string
	}
	var all []entry
	for _, j := range c.liveJobs() {
		if !v.shows(j) {
			continue
		}
		state := j.state.String()
		if c.detached[j.resp.GetJobId()] == j {
			state = StateUnclaimed
		}
		all = append(all, entry{j, state})
	}
	for _, n := range slices.Sorted(maps.Keys(c.jobs)) {
		if j := c.jobs[n]; (j.state == jobGathering || j.state == jobQueued) && v.shows(j) {
			all = append(all, entry{j, j.state.String()})
		}
	}
	if first >= len(all) {
		return nil, 0
	}
	next := 0
	if first+size < len(all) {
		next = first + size
	}
	all = all[first:min(first+size, len(all))]
	budget := v.RankBytes
	out := make([]*jobpb.JobStatus, 0, len(all))
	for _, e := range all {
		j := e.j
		js := &jobpb.JobStatus{
			Name: j.name, State: e.state, WorldSize: uint32(len(j.ranks)),
			Lanes: j.params.GetLanes(), Window: j.params.GetWindow(), PacketElements: j.params.GetElements(), Sparse: j.params.GetSparse(),
			PoolSize: j.resp.GetPoolSize(),
		}
		if !v.Redact {
			js.JobId, js.PoolBase = j.resp.GetJobId(), j.resp.GetPoolBase()
		}
		if !j.registeredAt.IsZero() {
			js.AgeSeconds = now.Sub(j.registeredAt).Seconds()
		}
		for r, reg := range j.ranks {
			if reg == nil {
				continue
			}
			rs := &jobpb.RankStatus{Rank: uint32(r), Leased: j.leased[uint32(r)], Left: j.left[uint32(r)]}
			if !v.Redact {
				need := 16
				for _, a := range reg.req.GetLaneAddresses() {
					need += len(a) + 2
				}
				if need > budget {
					js.RanksOmitted++
					continue
				}
				budget -= need
				rs.LaneAddresses = slices.Clone(reg.req.GetLaneAddresses())
			}
			js.Ranks = append(js.Ranks, rs)
		}
		out = append(out, js)
	}
	return out, next
}

// States are the states Gauges.ByState counts, in the order of a job's
// life, then StateUnclaimed.
func States() []string {
	return []string{jobGathering.String(), jobQueued.String(), jobInstalling.String(), jobActive.String(), jobDraining.String(), jobQuarantined.String(), StateUnclaimed}
}
