package controller

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
func (c *core) claim(req *jobpb.WatchRequest) error {
	j := c.detached[req.GetJobId()]
	if j == nil || req.GetJobId() == 0 {
		return nil
	}
	switch {
	case req.GetRank() >= uint32(len(j.ranks)):
		return invalid("rank %d outside 0..%d of the job on the switch", req.GetRank(), len(j.ranks)-1)
	case req.GetJob() == "" || req.GetSessionId() == 0:
		return invalid("a claim names the job and its session")
	case c.jobs[req.GetJob()] != nil:
		return refuse(codes.AlreadyExists, "job %q already runs under another session", req.GetJob())
	}
	delete(c.detached, req.GetJobId())
	j.name = req.GetJob()
	j.owner = sha256.Sum256([]byte(req.GetToken()))
	j.resp.SessionId = req.GetSessionId()
	j.params = &jobpb.RegisterRequest{Job: j.name, WorldSize: uint32(len(j.ranks))}
	c.jobs[j.name] = j
	c.log.Info("controller: job taken over from the switch", "job", j.name, "job_id", req.GetJobId(), "workers", len(j.ranks))
	return nil
}

// Adopt keeps the jobs a switch holds (its tables, as an earlier controller
// left them): their partitions stay taken, and their ranks take them back
// by watching their sessions again with the switch job id. At now+grace,
// jobs nobody claimed are removed, and so are claimed jobs whose ranks did
// not all come back.
func (c *core) Adopt(workers []WorkerEntry, replies []ReplyEntry, groups map[uint16][]Replica, now time.Time, grace time.Duration) {
	found := map[uint32]*job{}
	for _, w := range workers {
		j := found[w.JobID]
		if j == nil {
			j = c.newJob("", int(w.NumWorkers))
			j.state, j.adopted, j.keys = jobActive, true, learnedKeys()
			j.entries = JobEntries{MulticastGroup: w.MulticastGroup, Replicas: groups[w.MulticastGroup]}
			j.resp = &jobpb.RegisterResponse{JobId: w.JobID, PoolBase: w.PoolBase, PoolSize: w.PoolSize, SwitchDataplane: c.cfg.Dataplane.String()}
			found[w.JobID] = j
		}
		j.entries.Workers = append(j.entries.Workers, w)
		if int(w.Rank) < len(j.ranks) {
			reg := j.ranks[w.Rank]
			if reg == nil {
				reg = &registration{req: &jobpb.RegisterRequest{Rank: uint32(w.Rank), WorldSize: uint32(w.NumWorkers)}}
				j.ranks[w.Rank] = reg
			}
			reg.req.LaneAddresses = append(reg.req.LaneAddresses, w.Addr.String())
			reg.addrs = append(reg.addrs, w.Addr)
		}
	}
	for _, r := range replies {
		if j := found[r.JobID]; j != nil {
			j.entries.Replies = append(j.entries.Replies, r)
		}
	}
	for id, j := range found {
		lanes := 0
		for _, w := range j.entries.Workers {
			lanes = max(lanes, int(w.Lane)+1)
		}
		j.resp.LaneDataplanes = c.laneDataplanes(id, lanes)
		c.detached[id] = j
		c.jobID = max(c.jobID, id)
	}
	if len(found) > 0 {
		c.log.Info("controller: jobs found on the switch, waiting for their ranks", "jobs", len(found), "grace", grace)
	}
	c.adoptions = append(c.adoptions, adoption{deadline: now.Add(grace), found: found})
}

// endUnclaimed removes the adopted jobs that nobody took back, and those
// some of whose ranks did not take their leases up again.
func (c *core) endUnclaimed(a adoption) {
	ids := slices.Sorted(maps.Keys(a.found))
	for _, id := range ids {
		j := a.found[id]
		if c.detached[id] == j {
			delete(c.detached, id)
			c.retire(j, endUnclaimed, "removed: found on the switch after a controller restart, and no rank took it back")
			continue
		}
		for r := range j.ranks {
			if !j.leased[uint32(r)] && !j.state.retired() {
				c.retire(j, endRankLost, fmt.Sprintf("aborted: rank %d did not come back after the controller restarted", r))
				break
			}
		}
	}
}
