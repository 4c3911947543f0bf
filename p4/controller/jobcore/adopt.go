package jobcore

// Jobs a restarted controller finds on the switch, and how their ranks take
// them back.

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc/codes"
)

// claim hands a job found on the switch to the first rank that names it
// (by switch job id) after a controller restart.
func (c *Core) claim(req *jobpb.WatchRequest) error {
	j := c.detached[req.GetJobId()]
	if j == nil || req.GetJobId() == 0 {
		return nil
	}
	switch {
	case req.GetRank() >= uint32(len(j.ranks)):
		return Invalid("rank %d outside 0..%d of the job on the switch", req.GetRank(), len(j.ranks)-1)
	case req.GetJob() == "" || req.GetSessionId() == 0:
		return Invalid("a claim names the job and its session")
	case c.jobs[req.GetJob()] != nil:
		return Refuse(codes.AlreadyExists, "job %q already runs under another session", req.GetJob())
	}
	delete(c.detached, req.GetJobId())
	j.name = req.GetJob()
	j.owner = sha256.Sum256([]byte(req.GetToken()))
	j.resp.SessionId = req.GetSessionId()
	j.params = &jobpb.RegisterRequest{Job: j.name, WorldSize: uint32(len(j.ranks))}
	c.addJob(j)
	c.log.Info("controller: job taken over from the switch", "job", j.name, "job_id", req.GetJobId(), "workers", len(j.ranks))
	return nil
}

// Adopt keeps the jobs a switch holds (found: its tables, as an earlier
// controller left them, a placement per switch job id): their partitions
// stay taken, and their ranks take them back by watching their sessions
// again with the switch job id. At now+grace, jobs nobody claimed are
// removed, and so are claimed jobs whose ranks did not all come back.
func (c *Core) Adopt(found []Placement, now time.Time, grace time.Duration) {
	jobs := map[uint32]*job{}
	for _, p := range found {
		if jobs[p.JobID] != nil {
			continue // one placement per switch job id
		}
		j := c.newJob("", p.World)
		j.state, j.adopted, j.keys, j.place = jobActive, true, learnedKeys(), p
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
		c.detached[p.JobID] = j
		c.jobID = max(c.jobID, p.JobID)
	}
	if len(jobs) > 0 {
		c.log.Info("controller: jobs found on the switch, waiting for their ranks", "jobs", len(jobs), "grace", grace)
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
			c.retire(j, EndUnclaimed, "removed: found on the switch after a controller restart, and no rank took it back")
			continue
		}
		for r := range j.ranks {
			if !j.leased[uint32(r)] && !j.state.retired() {
				c.retire(j, EndRankLost, fmt.Sprintf("aborted: rank %d did not come back after the controller restarted", r))
				break
			}
		}
	}
}
