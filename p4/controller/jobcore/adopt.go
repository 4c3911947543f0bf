package jobcore

// Jobs a restarted controller finds on the switch, and how their ranks take
// them back: only with the proof their Claim keeps (the hash of each rank's
// secret, and of the job's token), never by naming the switch job id.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// claim is what proves j's ranks after a controller restart.
func (j *job) claim() Claim {
	return Claim{
		JobID: j.resp.GetJobId(), Job: j.name, Session: j.resp.GetSessionId(), Owner: j.owner, Client: j.client,
		Ranks: j.keys.hashesOf(len(j.ranks)), PoolBase: j.resp.GetPoolBase(), PoolSize: j.resp.GetPoolSize(), World: len(j.ranks),
	}
}

// fits reports whether cl is the claim of the job placed at p.
func (cl Claim) fits(p switchjob.Placement) bool {
	return cl.JobID == p.JobID && cl.PoolBase == p.PoolBase && cl.PoolSize == p.PoolSize &&
		cl.World == p.World && len(cl.Ranks) == p.World && cl.Job != "" && len(cl.Job) <= maxNameLen && cl.Session != 0
}

// Adopt keeps the jobs a switch holds (found: its tables, as an earlier
// controller left them, a placement per switch job id), whose partitions
// stay taken. A job with a claim that fits it (claims: those the earlier
// controller kept) runs on under its name and session, and its ranks take
// their leases up again by proving themselves with their secrets and the
// job's token. A job without one cannot be taken back. At now+grace, jobs
// whose ranks did not all come back are removed. Claims that fit no job
// found are forgotten (Effects.Forgets).
func (c *Core) Adopt(found []switchjob.Placement, claims []Claim, now time.Time, grace time.Duration) {
	byID := map[uint32]Claim{}
	for _, cl := range claims {
		byID[cl.JobID] = cl
	}
	jobs := map[uint32]*job{}
	unproven := 0
	for _, p := range found {
		if jobs[p.JobID] != nil {
			continue // one placement per switch job id
		}
		j := c.newJob("", p.World)
		j.state, j.adopted, j.place = jobActive, true, p
		j.resp = &jobpb.RegisterResponse{JobId: p.JobID, PoolBase: p.PoolBase, PoolSize: p.PoolSize, SwitchDataplane: c.cfg.Dataplane.String()}
		lanes := 0
		for _, w := range p.Workers {
			lanes = max(lanes, int(w.Lane)+1)
			if int(w.Rank) >= len(j.ranks) {
				continue
			}
			reg := j.ranks[w.Rank]
			if reg == nil {
				reg = &registration{req: &jobpb.RegisterRequest{Rank: uint32(w.Rank), WorldSize: uint32(p.World)}}
				j.ranks[w.Rank] = reg
			}
			reg.req.LaneAddresses = append(reg.req.LaneAddresses, w.Addr.String())
			reg.addrs = append(reg.addrs, w.Addr)
		}
		j.resp.LaneDataplanes = c.laneDataplanes(p.JobID, lanes)
		jobs[p.JobID] = j
		c.jobID = max(c.jobID, p.JobID)
		cl, ok := byID[p.JobID]
		delete(byID, p.JobID)
		if !ok || !cl.fits(p) || c.jobs[cl.Job] != nil {
			unproven++
			c.detached[p.JobID] = j
			continue
		}
		j.name, j.owner, j.client, j.keys = cl.Job, cl.Owner, cl.Client, claimedKeys(cl.Ranks)
		j.resp.SessionId = cl.Session
		j.params = &jobpb.RegisterRequest{Job: j.name, WorldSize: uint32(p.World)}
		c.addJob(j)
		c.log.Info("controller: job found on the switch, waiting for its ranks", "job", j.name, "job_id", p.JobID, "workers", p.World)
	}
	c.out.Forgets = append(c.out.Forgets, slices.Sorted(maps.Keys(byID))...)
	if len(jobs) > 0 {
		c.log.Info("controller: jobs found on the switch", "jobs", len(jobs), "without_claim", unproven, "grace", grace)
	}
	if unproven > 0 {
		c.log.Warn("controller: jobs found on the switch that this controller has no claim for (it kept none: its State unset, or the file was lost) cannot be taken back by their ranks; their room is freed after the grace", "jobs", unproven, "grace", grace)
	}
	c.adoptions = append(c.adoptions, adoption{deadline: now.Add(grace), found: jobs})
}

// EndUnclaimed removes the adopted jobs that nobody took back, and those
// some of whose ranks did not take their leases up again.
func (c *Core) EndUnclaimed(a adoption) {
	ids := slices.Sorted(maps.Keys(a.found))
	for _, id := range ids {
		j := a.found[id]
		if c.detached[id] == j {
			delete(c.detached, id)
			c.retire(j, EndUnclaimed, "removed: found on the switch after a controller restart, with no claim its ranks could prove themselves by")
			continue
		}
		if j.state.retired() {
			continue
		}
		if len(j.leased) == 0 {
			c.retire(j, EndUnclaimed, "removed: found on the switch after a controller restart, and no rank took it back")
			continue
		}
		for r := range j.ranks {
			if !j.leased[uint32(r)] {
				c.retire(j, EndRankLost, fmt.Sprintf("aborted: rank %d did not come back after the controller restarted", r))
				break
			}
		}
	}
}
