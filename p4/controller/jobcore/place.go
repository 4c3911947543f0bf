package jobcore

// Placement: a gathered job's partition, multicast group and switch job
// id, and the driver's reports on programming the switch.

import (
	"sort"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// place gives room to the queued jobs: at once when no retired job's
// entries are being removed (their slots, groups and maybe the same
// worker addresses come free), else once a job has waited DrainWait, beside
// the entries that did not go.
func (c *Core) place(now time.Time) {
	var queued []*job
	removing := c.removing()
	for _, j := range c.jobs {
		if j.state == jobQueued && (removing == 0 || !now.Before(j.queuedAt.Add(c.cfg.DrainWait))) {
			queued = append(queued, j)
		}
	}
	sort.Slice(queued, func(a, b int) bool { return queued[a].gen < queued[b].gen })
	for _, j := range queued {
		switch {
		case j.ringWhy != "":
			c.cannotPlace(j, Refuse(codes.InvalidArgument, "%s", j.ringWhy))
		case c.offline != "":
			// Only registrations that may go to the ring enter while the
			// switch is away (the others wait for it outside the core).
			c.cannotPlace(j, Refuse(codes.Unavailable, "the switch is offline: %s", c.offline))
		default:
			c.activate(j)
		}
	}
}

// activate gives a job whose ranks are all in its partition, group and
// switch job id, and asks the driver to program the switch.
func (c *Core) activate(j *job) {
	p := j.params
	var replicas []switchjob.Replica
	for rank, reg := range j.ranks {
		// Every lane of a rank binds the same address (Config.Bind).
		replicas = append(replicas, switchjob.Replica{EgressPort: c.cfg.PortOf(reg.addrs[0].Addr(), rank), Instance: uint16(rank)})
	}
	if c.cfg.Placeable != nil {
		if err := c.cfg.Placeable(replicas); err != nil {
			c.cannotPlace(j, err)
			return
		}
	}
	size := p.GetLanes() * p.GetWindow()
	base, mgid, jobID, err := c.allocate(size)
	if err != nil {
		c.cannotPlace(j, err)
		return
	}
	place := switchjob.Placement{JobID: jobID, PoolBase: base, PoolSize: size, Group: mgid, World: len(j.ranks), Replicas: replicas}
	for rank, reg := range j.ranks {
		var mac [6]byte
		copy(mac[:], reg.req.GetMac())
		for lane, a := range reg.addrs {
			place.Workers = append(place.Workers, switchjob.Lane{Rank: uint16(rank), Lane: uint8(lane), Addr: a, MAC: mac})
		}
	}
	place.Replies = place.Workers
	j.resp = &jobpb.RegisterResponse{
		SessionId: c.cfg.Rand() | 1, SwitchDataplane: c.cfg.Dataplane.String(), JobId: jobID,
		PoolBase: base, PoolSize: size, FirstSeq: uint32(c.cfg.Rand()),
		FallbackAddresses: j.ringAddresses(), LaneDataplanes: c.laneDataplanes(jobID, len(j.ranks[0].addrs)),
	}
	if c.cfg.Keyed {
		place.Key = c.drawKey()
		j.resp.AuthKey = place.Key
	}
	j.state, j.place, j.keys = jobInstalling, place, c.drawKeys()
	c.installing[j.gen] = j
	c.out.Installs = append(c.out.Installs, Install{Gen: j.gen, Job: j.name, Place: place, Claim: j.claim()})
}

// laneDataplanes says which shard each of a job's lanes sends to, or nil
// for a switch with one data-plane address. Lane l of every rank uses the
// same slots, so it goes to the same shard; jobs start at different shards
// so that one-lane jobs spread too.
func (c *Core) laneDataplanes(jobID uint32, lanes int) []string {
	n := len(c.cfg.Shards)
	if n < 2 {
		return nil
	}
	out := make([]string, lanes)
	for l := range out {
		out[l] = c.cfg.Shards[(int(jobID)+l)%n].String()
	}
	return out
}

// allocate finds room for size slots beside the partitions of the jobs on
// the switch, and a free multicast group and switch job id.
func (c *Core) allocate(size uint32) (base uint32, mgid uint16, jobID uint32, err error) {
	type part struct{ base, size uint32 }
	var parts []part
	groups := map[uint16]bool{}
	ids := map[uint32]bool{}
	taken := func(j *job) {
		parts = append(parts, part{j.resp.GetPoolBase(), j.resp.GetPoolSize()})
		groups[j.place.Group] = true
		ids[j.resp.GetJobId()] = true
	}
	for _, j := range c.jobs {
		if j.state == jobInstalling || j.state == jobActive {
			taken(j)
		}
	}
	for _, j := range c.draining {
		taken(j)
	}
	for _, j := range c.detached {
		taken(j)
	}
	sort.Slice(parts, func(a, b int) bool { return parts[a].base < parts[b].base })
	next, found, largest := uint32(0), false, uint32(0)
	for _, p := range parts {
		if p.base-next >= size {
			found = true
			break
		}
		largest = max(largest, p.base-next)
		next = p.base + p.size
	}
	if !found {
		free := uint32(c.cfg.Slots) - next
		if free < size {
			return 0, 0, 0, Refuse(codes.ResourceExhausted,
				"switch has no room: the job needs lanes*window = %d slots, the largest free range has %d of %d (%d jobs active); lower window or lanes, or wait for a job to leave",
				size, max(largest, free), c.cfg.Slots, len(parts))
		}
	}
	for mgid = 1; groups[mgid]; mgid++ {
		if mgid == 0xffff {
			return 0, 0, 0, Refuse(codes.ResourceExhausted, "switch has no free multicast group")
		}
	}
	for {
		c.jobID++
		if c.jobID != 0 && !ids[c.jobID] {
			break
		}
	}
	return next, mgid, c.jobID, nil
}

// Installed is the driver's report that programming the switch for
// generation gen ended, with err if it failed (err's code says how the
// registrants should take it). When the job became ready for its ranks,
// ready is true and took is the time since its first registration.
func (c *Core) Installed(gen uint64, err error, now time.Time) (took time.Duration, ready bool) {
	j := c.installing[gen]
	if j == nil {
		return 0, false
	}
	delete(c.installing, gen)
	switch j.state {
	case jobInstalling:
		if err != nil {
			// Its room goes back: the switch did not take the entries,
			// or went away with them.
			c.cannotPlace(j, err)
			return 0, false
		}
		j.state, j.activeAt = jobActive, now
		p := j.params
		c.log.Info("controller: job ready", "job", j.name, "job_id", j.resp.GetJobId(),
			"workers", len(j.ranks), "lanes", p.GetLanes(), "pool_base", j.resp.GetPoolBase(), "pool_size", j.resp.GetPoolSize(),
			"mgid", j.place.Group)
		for _, w := range j.waitsOf(waitRegister) {
			// Each rank gets its own copy, with its own secret.
			resp := proto.Clone(j.resp).(*jobpb.RegisterResponse)
			resp.RankSecret = j.keys.secret(j.waits[w].rank)
			c.reply(w, Answer{resp: resp})
		}
		return now.Sub(j.registeredAt), !j.registeredAt.IsZero()
	case jobDraining:
		// Retired while being programmed: what went in comes out again
		// (removal tolerates entries that never made it).
		c.out.Removals = append(c.out.Removals, Removal{Gen: j.gen, Job: j.name, Place: j.place})
	}
	return 0, false
}

// Removed is the driver's report that a retired generation's entries are
// gone from the switch: its room is given back.
func (c *Core) Removed(gen uint64, now time.Time) {
	if c.draining[gen] == nil {
		return
	}
	c.draining[gen].state = jobGone
	delete(c.draining, gen)
	c.place(now)
}

// RemoveFailed is the driver's report that removing a retired generation's
// entries failed (err says why), so that they may still be on the switch:
// the generation is quarantined. Its partition, multicast group and switch
// job id stay taken, or a job placed there would meet its entries (an
// insert refused as already there) or its ranks' packets (summed into the
// new job's results); but the jobs queued behind it are placed beside it
// now. The driver tries again and reports Removed once the entries are
// gone; a switch lost meanwhile (SwitchLost) takes them with it.
func (c *Core) RemoveFailed(gen uint64, err error, now time.Time) {
	j := c.draining[gen]
	if j == nil || j.state != jobDraining {
		return
	}
	j.state = jobQuarantined
	c.log.Warn("controller: the entries of an ended job could not be removed from the switch: its slots, multicast group and switch job id are kept out of placement until they are",
		"job", j.name, "job_id", j.place.JobID, "pool_base", j.place.PoolBase, "pool_size", j.place.PoolSize, "mgid", j.place.Group, "err", err)
	c.place(now)
}

// Draining counts the retired jobs whose entries are still on the switch,
// those being removed and those quarantined.
func (c *Core) Draining() int { return len(c.draining) }

// removing counts the retired jobs whose entries are being removed (not
// those quarantined after a failed removal).
func (c *Core) removing() int {
	n := 0
	for _, j := range c.draining {
		if j.state == jobDraining {
			n++
		}
	}
	return n
}
