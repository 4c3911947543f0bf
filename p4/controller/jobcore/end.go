package jobcore

// How jobs and waits end: retirement, callers giving up, time, and the
// switch going away.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"google.golang.org/grpc/codes"
)

// retire ends a generation: its waiting calls hear why, and its switch
// entries are removed; cause classifies why for the counters.
func (c *Core) retire(j *job, cause EndCause, why string) { c.end(j, cause, why, false) }

// end retires a generation; with switchGone its entries went with the
// switch, and nothing is removed.
func (c *Core) end(j *job, cause EndCause, why string, switchGone bool) {
	c.dropJob(j)
	if j.state.retired() {
		return
	}
	if id := j.place.JobID; id != 0 {
		c.out.Forgets = append(c.out.Forgets, id)
	}
	c.keepOwner(j)
	c.endings[cause]++
	was := j.state
	j.cause = why
	if id := j.resp.GetSessionId(); id != 0 {
		c.ended[id] = endedSession{why: fmt.Sprintf("job %q %s", j.name, why), keys: j.keys}
		c.endedOrder = append(c.endedOrder, id)
		if len(c.endedOrder) > endedRemembered {
			delete(c.ended, c.endedOrder[0])
			c.endedOrder = c.endedOrder[1:]
		}
	}
	ws := slices.Sorted(maps.Keys(j.waits))
	for _, w := range ws {
		wt := j.waits[w]
		switch wt.kind {
		case waitRegister:
			j.err = Refuse(codes.Aborted, "job %q %s before all ranks registered", j.name, why)
			c.reply(w, Answer{err: j.err})
		case waitBarrier:
			c.reply(w, Answer{err: Refuse(codes.Aborted, "barrier %q: job %q %s", wt.name, j.name, why)})
		case waitBroadcast:
			c.reply(w, Answer{err: Refuse(codes.Aborted, "broadcast %q: job %q %s", wt.name, j.name, why)})
		case waitLease:
			c.reply(w, Answer{ended: fmt.Sprintf("job %q %s", j.name, why), cause: cause})
		}
	}
	switch {
	case was < jobInstalling || switchGone:
		j.state = jobGone
	default:
		c.log.Info("controller: job removed", "job", j.name, "why", why)
		j.state = jobDraining
		c.draining[j.gen] = j
		if was == jobActive {
			c.out.Removals = append(c.out.Removals, Removal{Gen: j.gen, Job: j.name, Place: j.place})
		}
		// An installing job's entries go once its programming ends
		// (Installed): removing them sooner could race the install.
	}
}

// GiveUp ends a waiting registration, barrier or broadcast whose caller's
// deadline came (code is the context's), and says what the caller was
// still waiting for.
func (c *Core) GiveUp(w Waiter, code codes.Code) error {
	wt := c.waits[w]
	if wt == nil {
		return nil
	}
	c.dropWait(w)
	switch wt.kind {
	case waitRegister:
		return c.giveUpRegistration(w, wt, code)
	case waitBarrier, waitBroadcast:
		return giveUpRound(wt, code)
	}
	return nil
}

// giveUpRegistration takes a registration whose caller gave up out of its
// job, and names the ranks that never came. It costs the same whatever
// the world size: the count of missing ranks is kept as ranks come and go,
// and at most missingNamed of them are named, found among the first
// missingScan ranks.
func (c *Core) giveUpRegistration(w Waiter, wt *wait, code codes.Code) error {
	j, rank := wt.job, wt.rank
	if reg := j.ranks[rank]; reg != nil && reg.by == w {
		c.setRank(j, rank, nil)
		// Other ranks timing out at the same moment must not name
		// this one as never registered.
		j.expired[rank] = true
		if j.state == jobQueued {
			j.state = jobGathering
		}
	}
	if j.arrived == 0 && j.state == jobGathering && c.jobs[j.name] == j {
		// Nobody waits for this job any more: forget it, or
		// registrations that give up would pile up jobs.
		c.retire(j, EndAbandoned, "abandoned: every rank gave up waiting")
	}
	// Registered and expired ranks are disjoint (a rank that registers
	// again leaves expired), so the rest never came.
	missing := len(j.ranks) - j.arrived - len(j.expired)
	return Refuse(code, "job %q: %s of %d never registered before rank %d's deadline (start every rank, or check the job name and world size)",
		j.name, j.missingText(missing), len(j.ranks), rank)
}

// missingNamed bounds the ranks a give-up names, missingScan the ranks
// it looks at to find them.
const (
	missingNamed = 3
	missingScan  = 1024
)

// missingText names the job's missing ranks (missing of them) in bounded
// work and text: "rank 3", "ranks 3, 7 and 9", "ranks 3, 7, 9 and 65530
// others", or "65530 ranks" when none is among the first missingScan.
func (j *job) missingText(missing int) string {
	return nameMissing(len(j.ranks), missing, func(r int) bool { return j.ranks[r] == nil && !j.expired[uint32(r)] })
}

// nameMissing names missing ranks of world, at most missingNamed of them,
// found by absent among the first missingScan.
func nameMissing(world, missing int, absent func(r int) bool) string {
	if missing <= 0 {
		return "no rank"
	}
	var named []string
	for r := 0; r < world && r < missingScan && len(named) < missingNamed; r++ {
		if absent(r) {
			named = append(named, strconv.Itoa(r))
		}
	}
	switch others := missing - len(named); {
	case len(named) == 0:
		return strconv.Itoa(missing) + " ranks"
	case others > 0:
		return "ranks " + strings.Join(named, ", ") + " and " + strconv.Itoa(others) + " others"
	case len(named) == 1:
		return "rank " + named[0]
	default:
		return "ranks " + strings.Join(named[:len(named)-1], ", ") + " and " + named[len(named)-1]
	}
}

// giveUpRound takes a rank whose caller gave up out of its barrier or
// broadcast round, and names who did not come, in bounded work and text
// whatever the world size (see nameMissing).
func giveUpRound(wt *wait, code codes.Code) error {
	j, rank, round := wt.job, wt.rank, wt.round
	// A rank that joins a round leaves its gaveUp: the two are disjoint,
	// and rank is among the arrived.
	missing := len(j.ranks) - len(round.arrived) - len(round.gaveUp)
	who := nameMissing(len(j.ranks), missing, func(r int) bool {
		return uint32(r) != rank && !round.arrived[uint32(r)] && !round.gaveUp[uint32(r)]
	})
	arrived := len(round.arrived)
	if round.gaveUp == nil {
		round.gaveUp = map[uint32]bool{}
	}
	round.gaveUp[rank] = true
	j.unjoin(wt.set, round, wt.k, rank)
	if wt.kind == waitBarrier {
		return Refuse(code, "job %q barrier %q: %s did not come before rank %d's deadline (%d of %d ranks arrived, %d of them gave up waiting)",
			j.name, wt.name, who, rank, arrived+len(round.gaveUp)-1, len(j.ranks), len(round.gaveUp)-1)
	}
	return Refuse(code, "job %q broadcast %q: root %d did not send before rank %d's deadline", j.name, wt.name, round.root, rank)
}

// Tick tells the core the time: adoption grace periods and waits for
// draining end by it.
func (c *Core) Tick(now time.Time) {
	c.stampOwners(now)
	kept := c.adoptions[:0]
	var due []adoption
	for _, a := range c.adoptions {
		if now.Before(a.deadline) {
			kept = append(kept, a)
		} else {
			due = append(due, a)
		}
	}
	c.adoptions = kept
	for _, a := range due {
		c.EndUnclaimed(a)
	}
	c.endLate(now)
	c.place(now)
}

// Deadline is when the core next wants a Tick.
func (c *Core) Deadline() (time.Time, bool) {
	var next time.Time
	ok := false
	earliest := func(t time.Time) {
		if !ok || t.Before(next) {
			next, ok = t, true
		}
	}
	for _, a := range c.adoptions {
		earliest(a.deadline)
	}
	for _, j := range c.jobs {
		if t, ok := c.lateAt(j); ok {
			earliest(t)
		}
	}
	if c.removing() > 0 {
		for _, j := range c.jobs {
			if j.state == jobQueued {
				earliest(j.queuedAt.Add(c.cfg.DrainWait))
			}
		}
	}
	return next, ok
}

// SwitchLost ends every job: the switch restarted or the controller lost
// it, so what the jobs had there is gone. Their entries are not removed
// (there is nothing to remove them from).
func (c *Core) SwitchLost(why string) {
	c.offline = why
	for gen, j := range c.draining {
		j.state = jobGone
		delete(c.draining, gen)
	}
	ids := slices.Sorted(maps.Keys(c.detached))
	for _, id := range ids {
		j := c.detached[id]
		delete(c.detached, id)
		c.end(j, EndSwitchLost, why, true)
	}
	names := slices.Sorted(maps.Keys(c.jobs))
	for _, n := range names {
		if j := c.jobs[n]; j.state == jobGathering && j.mayFallBack() {
			// Nothing of it is on the switch, and its ranks may go to
			// the ring: it gathers on, and goes there if the switch is
			// still away when every rank is in.
			continue
		}
		c.end(c.jobs[n], EndSwitchLost, why, true)
	}
}

// mayFallBack reports whether every rank registered so far gave a ring
// address.
func (j *job) mayFallBack() bool {
	for _, reg := range j.ranks {
		if reg != nil && reg.req.GetFallbackAddress() == "" {
			return false
		}
	}
	return true
}

// SwitchBack says the switch can be programmed again.
func (c *Core) SwitchBack() { c.offline = "" }

// Offline says why the switch cannot be programmed now ("" when it can).
func (c *Core) Offline() string { return c.offline }

// ActiveJobs lists the running jobs' names and partitions.
func (c *Core) ActiveJobs() map[string]*jobpb.RegisterResponse {
	out := map[string]*jobpb.RegisterResponse{}
	for n, j := range c.jobs {
		if j.state == jobActive {
			out[n] = j.resp
		}
	}
	return out
}
