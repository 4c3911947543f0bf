package jobcore

// Time bounds on what a job holds: an active job's ranks must take their
// leases (Watch) within LeaseGrace, and a gathering job's ranks must all
// come within JoinTimeout. Without them, registrations that never watch
// or never complete would hold slots and table entries for ever.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
)

// lateAt is when job j runs out of time, if a bound applies to it now.
func (c *Core) lateAt(j *job) (time.Time, bool) {
	switch {
	case j.state == jobGathering && c.cfg.JoinTimeout > 0 && !j.registeredAt.IsZero():
		return j.registeredAt.Add(c.cfg.JoinTimeout), true
	case j.state == jobActive && c.cfg.LeaseGrace > 0 && !j.adopted && j.unleased() >= 0:
		return j.activeAt.Add(c.cfg.LeaseGrace), true
	}
	return time.Time{}, false
}

// unleased is the first rank that neither took its lease nor left, or -1.
func (j *job) unleased() int {
	for r := range j.ranks {
		if !j.leased[uint32(r)] && !j.left[uint32(r)] {
			return r
		}
	}
	return -1
}

// endLate ends the jobs whose time ran out by now.
func (c *Core) endLate(now time.Time) {
	for _, name := range slices.Sorted(maps.Keys(c.jobs)) {
		j := c.jobs[name]
		t, ok := c.lateAt(j)
		if !ok || now.Before(t) {
			continue
		}
		switch j.state {
		case jobGathering:
			c.releaseGathering(j)
		case jobActive:
			r := j.unleased()
			c.log.Warn("controller: rank never took its lease", "job", j.name, "rank", r, "grace", c.cfg.LeaseGrace)
			c.retire(j, EndRankLost, fmt.Sprintf("aborted: rank %d never took its lease (Watch) within %v", r, c.cfg.LeaseGrace))
		}
	}
}

// releaseGathering ends a job whose ranks did not all come within the
// join timeout, telling each waiting rank which never came.
func (c *Core) releaseGathering(j *job) {
	var missing []int
	for r, reg := range j.ranks {
		if reg == nil {
			missing = append(missing, r)
		}
	}
	c.log.Warn("controller: job released: ranks never registered", "job", j.name, "missing", missing, "join_timeout", c.cfg.JoinTimeout)
	err := Refuse(codes.DeadlineExceeded, "job %q: ranks %v of %d never registered within the controller's join timeout (%v), and the job was released (start every rank, or check the job name and world size)",
		j.name, missing, len(j.ranks), c.cfg.JoinTimeout)
	for _, w := range j.waitsOf(waitRegister) {
		c.reply(w, Answer{err: err})
	}
	c.retire(j, EndAbandoned, fmt.Sprintf("released: ranks %v never registered within the controller's join timeout (%v)", missing, c.cfg.JoinTimeout))
}
