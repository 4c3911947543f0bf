package jobcore

// A running session: barriers and broadcasts, leases, leaving and aborting.

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc/codes"
)

// checkName refuses a job, barrier or broadcast name longer than the
// controller keeps, before anything stores or logs it.
func checkName(what, name string) error {
	if len(name) > maxNameLen {
		return Invalid("%s name of %d bytes, want at most %d", what, len(name), maxNameLen)
	}
	return nil
}

// lookup finds the active generation a call refers to, without checking
// the caller's secret, except against a session that ended: the cause is
// told to its ranks alone.
func (c *Core) lookup(name string, rank uint32, session uint64, secret []byte) (*job, error) {
	if err := checkName("job", name); err != nil {
		return nil, err
	}
	if e, ok := c.ended[session]; ok {
		if err := e.keys.check(rank, secret); err != nil {
			return nil, err
		}
		return nil, Refuse(codes.Aborted, "the session this call names is over: %s", e.why)
	}
	j := c.jobs[name]
	if (j == nil || j.resp.GetSessionId() != session) && len(c.detached) > 0 {
		// The session may be one of those found on the switch, whose
		// ranks have not all taken their leases up again yet.
		return nil, Refuse(codes.Unavailable, "the controller restarted and is taking its running jobs over; retry in a moment")
	}
	if j == nil || j.state != jobActive {
		return nil, Refuse(codes.NotFound, "job %q has no active session (register first)", name)
	}
	if j.resp.GetSessionId() != session {
		return nil, Refuse(codes.FailedPrecondition, "the session this call names is not job %q's current one: the job was restarted (join again)", name)
	}
	if rank >= uint32(len(j.ranks)) {
		return nil, Invalid("rank %d outside 0..%d", rank, len(j.ranks)-1)
	}
	return j, nil
}

// session finds the active generation a call of rank's refers to, and
// refuses a call without the rank's secret.
func (c *Core) session(name string, rank uint32, session uint64, secret []byte) (*job, error) {
	j, err := c.lookup(name, rank, session, secret)
	if err != nil {
		return nil, err
	}
	if err := j.keys.check(rank, secret); err != nil {
		return nil, err
	}
	return j, nil
}

func tooManyRounds() error {
	return Refuse(codes.ResourceExhausted, "the job uses %d barrier and broadcast names, the controller's limit: reuse names", MaxRoundsPerJob)
}

// join enters rank into its next round of the named barrier or broadcast;
// nil when the job holds too many names.
func (j *job) join(key string, rank uint32) (*round, *roundSet, int) {
	rs := j.rounds[key]
	if rs == nil && len(j.rounds) >= MaxRoundsPerJob {
		return nil, nil, 0
	}
	if rs == nil {
		rs = &roundSet{key: key, next: map[uint32]int{}, rounds: map[int]*round{}}
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
	delete(r.gaveUp, rank)
	return r, rs, k
}

// unjoin takes rank back out of round k of rs, which it just joined.
func (j *job) unjoin(rs *roundSet, r *round, k int, rank uint32) {
	delete(r.arrived, rank)
	rs.next[rank]--
	if len(r.arrived) == 0 && !r.complete {
		delete(rs.rounds, k)
	}
	j.freeIfDone(rs)
}

// freeIfDone forgets a name whose rounds are all over: every rank passed
// it the same number of times and nothing waits in it. Its next use
// starts at round 0 on every rank alike, so names used once (one per
// iteration) do not pile up.
func (j *job) freeIfDone(rs *roundSet) {
	if len(rs.rounds) != 0 || j.rounds[rs.key] != rs {
		return
	}
	first := rs.next[0]
	for r := range j.ranks {
		if rs.next[uint32(r)] != first {
			return
		}
	}
	delete(j.rounds, rs.key)
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
func (c *Core) Barrier(w Waiter, req *jobpb.BarrierRequest) error {
	if err := checkName("barrier", req.GetName()); err != nil {
		return err
	}
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId(), req.GetRankSecret())
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
				c.reply(o, Answer{})
			}
		}
		j.freeIfDone(rs)
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
				c.reply(o, Answer{})
			}
		}
	}
	c.strandedBy(j)
	return nil
}

// Broadcast enters a rank into a broadcast; w is answered with the root's
// data once the root has sent it.
func (c *Core) Broadcast(w Waiter, req *jobpb.BroadcastRequest) error {
	if err := checkName("broadcast", req.GetName()); err != nil {
		return err
	}
	if len(req.GetData()) > maxBroadcastData {
		return Invalid("broadcast data of %d bytes, want at most %d", len(req.GetData()), maxBroadcastData)
	}
	j, err := c.session(req.GetJob(), req.GetRank(), req.GetSessionId(), req.GetRankSecret())
	if err != nil {
		return err
	}
	rank, root := req.GetRank(), req.GetRoot()
	if root >= uint32(len(j.ranks)) {
		return Invalid("root %d outside 0..%d", root, len(j.ranks)-1)
	}
	r, rs, k := j.join("broadcast/"+req.GetName(), rank)
	if r == nil {
		return tooManyRounds()
	}
	if r.hasRoot && r.root != root {
		j.unjoin(rs, r, k, rank)
		return Refuse(codes.FailedPrecondition, "job %q broadcast %q: rank %d names root %d, others named %d",
			j.name, req.GetName(), rank, root, r.root)
	}
	if rank == root && j.held+len(req.GetData()) > maxBroadcastHeld {
		j.unjoin(rs, r, k, rank)
		return Refuse(codes.ResourceExhausted, "job %q holds %d bytes of broadcasts not every rank fetched yet, the controller's limit is %d: let the ranks fetch them first", j.name, j.held, maxBroadcastHeld)
	}
	if rank == root {
		if err := c.withinBytes(j.client, len(req.GetData()), fmt.Sprintf("job %q's broadcast %q", j.name, req.GetName())); err != nil {
			j.unjoin(rs, r, k, rank)
			return err
		}
	}
	r.root, r.hasRoot = root, true
	c.addWait(w, &wait{kind: waitBroadcast, job: j, rank: rank, name: req.GetName(), set: rs, k: k, round: r})
	if rank == root {
		r.data = append([]byte(nil), req.GetData()...)
		j.held += len(r.data)
		r.complete = true
	}
	if r.complete {
		for _, o := range j.waitsOf(waitBroadcast) {
			if j.waits[o].round == r {
				r.fetched++
				c.reply(o, Answer{data: r.data})
			}
		}
		if r.fetched >= len(j.ranks) {
			delete(rs.rounds, k)
			j.held -= len(r.data)
			j.freeIfDone(rs)
		}
	}
	c.strandedBy(j)
	return nil
}

// ongoing finds the session a Leave or Abort refers to: nil, and no
// error, when the session is already over, which they take as done.
func (c *Core) ongoing(name string, rank uint32, session uint64, secret []byte) (*job, error) {
	j, err := c.session(name, rank, session, secret)
	switch CodeOf(err) {
	case codes.NotFound, codes.FailedPrecondition, codes.Aborted:
		return nil, nil
	}
	return j, err
}

// Leave records that a rank is done with its session; the job ends when
// every rank left.
func (c *Core) Leave(req *jobpb.LeaveRequest) error {
	j, err := c.ongoing(req.GetJob(), req.GetRank(), req.GetSessionId(), req.GetRankSecret())
	if j == nil {
		return err
	}
	j.left[req.GetRank()] = true
	if len(j.left) == len(j.ranks) {
		c.retire(j, EndFinished, "finished: every rank left")
		return nil
	}
	c.strandedBy(j)
	return nil
}

// LeftEarly says where the job a rank just left sits, and its generation,
// when its other ranks run on (gen 0 otherwise): the driver then asks the
// switch whether the job's slots wait for the rank's share.
func (c *Core) LeftEarly(req *jobpb.LeaveRequest) (Partition, uint64) {
	j := c.jobs[req.GetJob()]
	if j == nil || j.state != jobActive || !j.left[req.GetRank()] || len(j.ranks) < 2 {
		return Partition{}, 0
	}
	return Partition{Job: j.name, Base: int(j.resp.GetPoolBase()), Size: int(j.resp.GetPoolSize()), World: len(j.ranks)}, j.gen
}

// LeftMidCall ends generation gen, whose rank left while slots of the job
// wait for its share (the driver read them from the switch): its peers are
// inside a call the rank will never make.
func (c *Core) LeftMidCall(gen uint64, rank uint32, slots int) {
	for _, j := range c.jobs {
		if j.gen == gen && j.state == jobActive && j.left[rank] {
			c.retire(j, EndRankFailed, fmt.Sprintf("aborted: rank %d closed its session (left) while %d of the job's slots wait for its share", rank, slots))
			return
		}
	}
}

// strandedBy ends a job whose waiting barrier or broadcast needs a rank
// that left: that rank will never call it, and its peers would wait until
// their deadlines. The cause names the rank and the call.
func (c *Core) strandedBy(j *job) {
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
				c.retire(j, EndRankFailed, fmt.Sprintf("aborted: rank %d closed its session (left) while rank %d waited for it in %s %q", r, wt.rank, what, wt.name))
				return
			}
		}
	}
}

// Abort ends a session on behalf of one of its ranks, and says how: the
// cause's word and the reason its ranks are given ("" when the session was
// already over). A rank that gave up on the switch (switch_unreachable)
// ends it as a switch loss, unless v, what the driver learned from the
// switch, shows the switch answering with slots of the job waiting for
// ranks that stopped sending: then those ranks are named.
func (c *Core) Abort(req *jobpb.AbortRequest, v Stall) (cause, why string, err error) {
	j, err := c.ongoing(req.GetJob(), req.GetRank(), req.GetSessionId(), req.GetRankSecret())
	if j == nil {
		return "", "", err
	}
	reason := req.GetReason()
	if len(reason) > maxReasonLen {
		reason = strings.ToValidUTF8(reason[:maxReasonLen], "") + "..."
	}
	end := EndRankFailed
	why = fmt.Sprintf("aborted by rank %d: %s", req.GetRank(), reason)
	stalled := ""
	if req.GetSwitchUnreachable() {
		end = EndSwitchLost
		if who, slots := v.stalled(); who != "" {
			end, stalled = EndRankFailed, who
			why = stalledCause(who, slots, int(req.GetRank()), reason)
		}
	}
	c.log.Warn("controller: rank aborted its job", "job", j.name, "rank", req.GetRank(), "reason", reason,
		"switch_unreachable", req.GetSwitchUnreachable(), "switch_checked", v.Asked, "switch_answered", v.Answered, "stalled", stalled)
	c.retire(j, end, why)
	return end.String(), fmt.Sprintf("job %q %s", j.name, why), nil
}

// PartitionOf says where the job an abort names sits in the pool, for the
// driver to ask the switch about it; ok is false when the session is over
// (or the call is not the rank's).
func (c *Core) PartitionOf(req *jobpb.AbortRequest) (p Partition, ok bool, err error) {
	j, err := c.ongoing(req.GetJob(), req.GetRank(), req.GetSessionId(), req.GetRankSecret())
	if j == nil {
		return Partition{}, false, err
	}
	return Partition{Job: j.name, Base: int(j.resp.GetPoolBase()), Size: int(j.resp.GetPoolSize()), World: len(j.ranks)}, true, nil
}

// Watch takes a rank's lease on its session; w is answered when the job
// ends.
//
// A rank of a job taken over from the switch after a controller restart
// proves itself with its secret, as always, and with the job's token.
func (c *Core) Watch(w Waiter, req *jobpb.WatchRequest) error {
	if len(req.GetToken()) > maxTokenLen {
		return Invalid("token of %d bytes, want at most %d", len(req.GetToken()), maxTokenLen)
	}
	j, err := c.lookup(req.GetJob(), req.GetRank(), req.GetSessionId(), req.GetRankSecret())
	if err != nil {
		return err
	}
	rank := req.GetRank()
	if err := j.keys.check(rank, req.GetRankSecret()); err != nil {
		return err
	}
	if j.adopted {
		token := sha256.Sum256([]byte(req.GetToken()))
		if subtle.ConstantTimeCompare(token[:], j.owner[:]) != 1 {
			return Refuse(codes.PermissionDenied, "rank %d's token does not match job %q's: a rank taking its job back after a controller restart carries the job's token", rank, j.name)
		}
	}
	j.leased[rank] = true
	c.addWait(w, &wait{kind: waitLease, job: j, rank: rank})
	return nil
}

// EndLease ends a lease the core has not answered. A lost lease, of a rank
// that did not leave, aborts the job: its process ended or its host is
// unreachable.
func (c *Core) EndLease(w Waiter, lost bool) {
	wt := c.waits[w]
	if wt == nil || wt.kind != waitLease {
		return
	}
	c.dropWait(w)
	j := wt.job
	if lost && !j.state.retired() && !j.left[wt.rank] {
		c.log.Warn("controller: rank lost", "job", j.name, "rank", wt.rank)
		c.retire(j, EndRankLost, fmt.Sprintf("aborted: rank %d lost its connection to the controller (its process ended, or its host is unreachable)", wt.rank))
	}
}
