package controller

// A running session: barriers and broadcasts, leases, leaving and aborting.

import (
	"fmt"
	"maps"
	"slices"

	"github.com/switchml/switchml-go/p4/controller/controllerpb"
	"google.golang.org/grpc/codes"
)

// session finds the active generation a call refers to.
func (c *core) session(name string, rank uint32, session uint64) (*job, error) {
	if why, ok := c.ended[session]; ok {
		return nil, refuse(codes.Aborted, "session %d is over: %s", session, why)
	}
	j := c.jobs[name]
	if (j == nil || j.resp.GetSessionId() != session) && len(c.detached) > 0 {
		// The session may be one of those found on the switch, whose
		// ranks have not all taken their leases up again yet.
		return nil, refuse(codes.Unavailable, "the controller restarted and is taking its running jobs over; retry in a moment")
	}
	if j == nil || j.state != jobActive {
		return nil, refuse(codes.NotFound, "job %q has no active session (register first)", name)
	}
	if j.resp.GetSessionId() != session {
		return nil, refuse(codes.FailedPrecondition, "session %d of job %q is over; the current session is %d (the job was restarted)",
			session, name, j.resp.GetSessionId())
	}
	if rank >= uint32(len(j.ranks)) {
		return nil, invalid("rank %d outside 0..%d", rank, len(j.ranks)-1)
	}
	return j, nil
}

func tooManyRounds() error {
	return refuse(codes.ResourceExhausted, "the job uses %d barrier and broadcast names, the controller's limit: reuse names", maxRoundsPerJob)
}

// join enters rank into its next round of the named barrier or broadcast;
// nil when the job holds too many names.
func (j *job) join(key string, rank uint32) (*round, *roundSet, int) {
	rs := j.rounds[key]
	if rs == nil && len(j.rounds) >= maxRoundsPerJob {
		return nil, nil, 0
	}
	if rs == nil {
		rs = &roundSet{next: map[uint32]int{}, rounds: map[int]*round{}}
		j.rounds[key] = rs
	}
	k := rs.next[rank]
	rs.next[rank]++
	r := rs.rounds[k]
	if r == nil {
		r = &round{arrived: map[uint32]bool{}}
		rs.rounds[k] = r
	}
	r.arrived[rank] = true
	return r, rs, k
}

// othersPast reports whether every rank but rank has made a later barrier
// call than its seq-th.
func (j *job) othersPast(rank uint32, seq uint64) bool {
	// Only a job taken over after a controller restart can have lost a
	// round; elsewhere a barrier completes by its arrivals alone (which
	// also keeps concurrent barriers of one rank exact).
	if seq == 0 || !j.adopted {
		return false
	}
	for r := range j.ranks {
		if uint32(r) != rank && j.barrierSeq[uint32(r)] <= seq {
			return false
		}
	}
	return true
}

// Barrier enters a rank into a barrier; w is answered when every rank has
// arrived.
func (c *core) Barrier(w waiter, req *controllerpb.BarrierRequest) error {
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		return err
	}
	rank := req.GetRank()
	r, rs, k := j.join("barrier/"+req.GetName(), rank)
	if r == nil {
		return tooManyRounds()
	}
	c.addWait(w, &wait{kind: waitBarrier, job: j, rank: rank, name: req.GetName(), set: rs, k: k, round: r, seq: req.GetSeq()})
	if len(r.arrived) == len(j.ranks) {
		r.complete = true
		delete(rs.rounds, k)
		for _, o := range j.waitsOf(waitBarrier) {
			if j.waits[o].round == r {
				c.reply(o, answer{})
			}
		}
	}
	if req.GetSeq() > j.barrierSeq[rank] {
		j.barrierSeq[rank] = req.GetSeq()
	}
	if j.adopted {
		// Waiting ranks whose peers have all counted past their barrier,
		// on a controller that has since restarted and lost the round,
		// are through.
		for _, o := range j.waitsOf(waitBarrier) {
			if wt := j.waits[o]; j.othersPast(wt.rank, wt.seq) {
				c.reply(o, answer{})
			}
		}
	}
	c.strandedBy(j)
	return nil
}

// Broadcast enters a rank into a broadcast; w is answered with the root's
// data once the root has sent it.
func (c *core) Broadcast(w waiter, req *controllerpb.BroadcastRequest) error {
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		return err
	}
	rank, root := req.GetRank(), req.GetRoot()
	if root >= uint32(len(j.ranks)) {
		return invalid("root %d outside 0..%d", root, len(j.ranks)-1)
	}
	r, rs, k := j.join("broadcast/"+req.GetName(), rank)
	if r == nil {
		return tooManyRounds()
	}
	if r.hasRoot && r.root != root {
		delete(r.arrived, rank)
		rs.next[rank]--
		return refuse(codes.FailedPrecondition, "job %q broadcast %q: rank %d names root %d, others named %d",
			j.name, req.GetName(), rank, root, r.root)
	}
	r.root, r.hasRoot = root, true
	c.addWait(w, &wait{kind: waitBroadcast, job: j, rank: rank, name: req.GetName(), set: rs, k: k, round: r})
	if rank == root {
		r.data = append([]byte(nil), req.GetData()...)
		r.complete = true
	}
	if r.complete {
		for _, o := range j.waitsOf(waitBroadcast) {
			if j.waits[o].round == r {
				r.fetched++
				c.reply(o, answer{data: r.data})
			}
		}
		if r.fetched >= len(j.ranks) {
			delete(rs.rounds, k)
		}
	}
	c.strandedBy(j)
	return nil
}

// ongoing finds the session a Leave or Abort refers to: nil, and no
// error, when the session is already over, which they take as done.
func (c *core) ongoing(name string, rank uint32, session uint64) (*job, error) {
	j, err := c.session(name, rank, session)
	switch codeOf(err) {
	case codes.NotFound, codes.FailedPrecondition, codes.Aborted:
		return nil, nil
	}
	return j, err
}

// Leave records that a rank is done with its session; the job ends when
// every rank left.
func (c *core) Leave(req *controllerpb.LeaveRequest) error {
	j, err := c.ongoing(req.GetJob(), req.GetRank(), req.GetSessionId())
	if j == nil {
		return err
	}
	j.left[req.GetRank()] = true
	if len(j.left) == len(j.ranks) {
		c.retire(j, endFinished, "finished: every rank left")
		return nil
	}
	c.strandedBy(j)
	return nil
}

// strandedBy ends a job whose waiting barrier or broadcast needs a rank
// that left: that rank will never call it, and its peers would wait until
// their deadlines. The cause names the rank and the call.
func (c *core) strandedBy(j *job) {
	for _, w := range slices.Concat(j.waitsOf(waitBarrier), j.waitsOf(waitBroadcast)) {
		wt := j.waits[w]
		if wt == nil {
			continue
		}
		for _, r := range slices.Sorted(maps.Keys(j.left)) {
			needed := !wt.round.arrived[r]
			what := "barrier"
			if wt.kind == waitBroadcast {
				needed, what = wt.round.root == r && !wt.round.complete, "broadcast"
			}
			if needed {
				c.retire(j, endRankFailed, fmt.Sprintf("aborted: rank %d closed its session (left) while rank %d waited for it in %s %q", r, wt.rank, what, wt.name))
				return
			}
		}
	}
}

// Abort ends a session on behalf of one of its ranks.
func (c *core) Abort(req *controllerpb.AbortRequest) error {
	j, err := c.ongoing(req.GetJob(), req.GetRank(), req.GetSessionId())
	if j == nil {
		return err
	}
	reason := req.GetReason()
	if len(reason) > 512 {
		reason = reason[:512] + "..."
	}
	c.log.Warn("controller: rank aborted its job", "job", j.name, "rank", req.GetRank(), "reason", reason, "switch_unreachable", req.GetSwitchUnreachable())
	cause := endRankFailed
	if req.GetSwitchUnreachable() {
		cause = endSwitchLost
	}
	c.retire(j, cause, fmt.Sprintf("aborted by rank %d: %s", req.GetRank(), reason))
	return nil
}

// Watch takes a rank's lease on its session (claiming a job found on the
// switch, if the request names one); w is answered when the job ends.
func (c *core) Watch(w waiter, req *controllerpb.WatchRequest) error {
	if err := c.claim(req); err != nil {
		return err
	}
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId())
	if err != nil {
		return err
	}
	j.leased[req.GetRank()] = true
	c.addWait(w, &wait{kind: waitLease, job: j, rank: req.GetRank()})
	return nil
}

// EndLease ends a lease the core has not answered. A lost lease, of a rank
// that did not leave, aborts the job: its process ended or its host is
// unreachable.
func (c *core) EndLease(w waiter, lost bool) {
	wt := c.waits[w]
	if wt == nil || wt.kind != waitLease {
		return
	}
	c.dropWait(w)
	j := wt.job
	if lost && !j.state.retired() && !j.left[wt.rank] {
		c.log.Warn("controller: rank lost", "job", j.name, "rank", wt.rank)
		c.retire(j, endRankLost, fmt.Sprintf("aborted: rank %d lost its connection to the controller (its process ended, or its host is unreachable)", wt.rank))
	}
}
