package jobcore

// Registrations checked on their own, against the target, and against the
// jobs that hold lane addresses.

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/wire"
	"google.golang.org/grpc/codes"
)

// Checked is a registration that passed Check: its lane addresses parsed,
// and why its job cannot have the switch when only the ring can serve it.
type Checked struct {
	req     *jobpb.RegisterRequest
	addrs   []netip.AddrPort
	ringWhy string
}

// LaneAddresses are the registration's lane addresses, parsed.
func (k Checked) LaneAddresses() []netip.AddrPort { return k.addrs }

// Check validates a registration on its own, against the switch's own
// addresses, against from (the caller's IP as the job service sees it;
// invalid for a caller without one, as over an in-process connection,
// which is not checked) and against the target; it changes nothing and
// reads only the configuration, so the driver may call it without holding
// the core, and Register takes what it returns. A registration that may
// run over the ring (fallback_address) is not refused for a job larger
// than the switch serves: its job goes to the ring instead.
func (c *Core) Check(r *jobpb.RegisterRequest, from netip.Addr) (Checked, error) {
	addrs, err := checkRequest(r)
	if err != nil {
		return Checked{}, err
	}
	if c.cfg.RefuseOpen && r.GetToken() == "" {
		return Checked{}, Refuse(codes.PermissionDenied, "job %q has no token, and this controller's job service listens beyond loopback, where it takes only jobs with one: give every rank the same secret token (switchml.Config.Token), or start the controller with {AllowOpenJobs}", r.GetJob())
	}
	if err := c.checkLanes(addrs, from); err != nil {
		return Checked{}, err
	}
	if err := c.cfg.Admit(r, addrs); err != nil {
		var tooBig *TooBig
		if r.GetFallbackAddress() != "" && errors.As(err, &tooBig) {
			return Checked{req: r, addrs: addrs, ringWhy: err.Error()}, nil
		}
		return Checked{}, err
	}
	return Checked{req: r, addrs: addrs}, nil
}

// maxFallbackAddress bounds a registration's ring address, maxAddressLen
// a lane address (ipv4:port, with room for an IPv4-mapped IPv6 form).
const (
	maxFallbackAddress = 256
	maxAddressLen      = 64
)

// checkFallbackAddress validates a ring address (host:port with a port).
func checkFallbackAddress(a string) error {
	if a == "" {
		return nil
	}
	if len(a) > maxFallbackAddress {
		return Invalid("fallback_address of %d bytes, want at most %d", len(a), maxFallbackAddress)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return Invalid("fallback_address %q: want host:port", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return Invalid("fallback_address %q: want a port in 1..65535", a)
	}
	return nil
}

// checkRequest validates a registration on its own.
func checkRequest(r *jobpb.RegisterRequest) ([]netip.AddrPort, error) {
	switch {
	case r.GetJob() == "":
		return nil, Invalid("job name is empty")
	case len(r.GetJob()) > maxNameLen:
		return nil, Invalid("job name of %d bytes, want at most %d", len(r.GetJob()), maxNameLen)
	case len(r.GetToken()) > maxTokenLen:
		return nil, Invalid("token of %d bytes, want at most %d", len(r.GetToken()), maxTokenLen)
	case r.GetWorldSize() < 1 || r.GetWorldSize() > 0xffff:
		return nil, Invalid("world_size %d, want 1..65535", r.GetWorldSize())
	case r.GetRank() >= r.GetWorldSize():
		return nil, Invalid("rank %d outside 0..%d (world_size %d)", r.GetRank(), r.GetWorldSize()-1, r.GetWorldSize())
	case r.GetLanes() < 1 || r.GetLanes() > 256:
		return nil, Invalid("lanes %d, want 1..256", r.GetLanes())
	case r.GetWindow() < 1:
		return nil, Invalid("window %d, want at least 1", r.GetWindow())
	case r.GetElements() < 1:
		return nil, Invalid("elements %d, want at least 1", r.GetElements())
	case len(r.GetLaneAddresses()) != int(r.GetLanes()):
		return nil, Invalid("%d lane addresses for %d lanes", len(r.GetLaneAddresses()), r.GetLanes())
	case len(r.GetMac()) != 0 && len(r.GetMac()) != 6:
		return nil, Invalid("mac has %d bytes, want 6 or none", len(r.GetMac()))
	}
	if err := checkFallbackAddress(r.GetFallbackAddress()); err != nil {
		return nil, err
	}
	switch r.GetFormat() {
	case jobpb.Format_FORMAT_COMPAT:
		if _, ok := wire.CompatSizeCode(int(r.GetElements())); !ok {
			return nil, Invalid("elements %d cannot travel in the compatible header (32, 64, 128 or 256)", r.GetElements())
		}
	case jobpb.Format_FORMAT_EXTENDED:
		if r.GetElements() > wire.MaxElements {
			return nil, Invalid("elements %d exceeds the extended header's %d", r.GetElements(), wire.MaxElements)
		}
	default:
		return nil, Invalid("unknown format %v", r.GetFormat())
	}
	switch r.GetWireBits() {
	case 0, 32:
	case 16:
		if r.GetSparse() {
			return nil, Invalid("wire_bits 16 with the sparse mode: sparse blocks travel at 32 bits")
		}
	default:
		return nil, Invalid("wire_bits %d: want 0 (the type's default), 16 or 32", r.GetWireBits())
	}
	if r.GetSparse() && r.GetFormat() != jobpb.Format_FORMAT_EXTENDED {
		return nil, Invalid("the sparse mode needs the extended header: the compatible header has no room for its block fields")
	}
	addrs := make([]netip.AddrPort, len(r.GetLaneAddresses()))
	for i, s := range r.GetLaneAddresses() {
		if len(s) > maxAddressLen {
			return nil, Invalid("lane %d address of %d bytes, want an ipv4:port", i, len(s))
		}
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, Invalid("lane %d address %q: %v (want ipv4:port)", i, s, err)
		}
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if why := notALane(a); why != "" {
			return nil, Invalid("lane %d address %v: %s; give the IPv4 address and port of the rank's lane socket as the switch sees it", i, a, why)
		}
		addrs[i] = a
	}
	return addrs, nil
}

// broadcast4 is the IPv4 limited broadcast address.
var broadcast4 = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// notALane says why a can be no lane socket's address, the switch sending
// the lane's results there: "" if it can be.
func notALane(a netip.AddrPort) string {
	ip := a.Addr()
	switch {
	case ip.IsUnspecified():
		return "an unspecified address"
	case !ip.Is4():
		return "not an IPv4 address"
	case ip == broadcast4:
		return "the broadcast address (the switch would send results to every host)"
	case ip.IsMulticast():
		return "a multicast address (the switch would send results to a group)"
	case a.Port() == 0:
		return "port 0"
	}
	return ""
}

// checkLanes refuses lane addresses that would make the switch send to
// itself or to a subnet's broadcast address, and, unless
// Config.AllowLaneAddressMismatch, lane addresses on another host than
// the caller's: the switch sends each lane's results to its address, so a
// registration naming someone else's would aim the switch at them. A
// loopback caller may name any loopback address (workers on the
// controller's host bind 127.0.0.0/8 addresses of their own).
func (c *Core) checkLanes(addrs []netip.AddrPort, from netip.Addr) error {
	from = from.Unmap()
	for i, a := range addrs {
		if a == c.cfg.Dataplane || slices.Contains(c.cfg.Shards, a) || slices.Contains(c.cfg.SwitchAddresses, a) {
			return Invalid("lane %d address %v is the switch's own data-plane address: the switch would send results to itself; give the address of the rank's lane socket", i, a)
		}
		for _, p := range c.cfg.Subnets {
			if p.Addr().Is4() && p.Bits() < 31 && p.Contains(a.Addr()) && a.Addr() == lastOf(p) {
				return Invalid("lane %d address %v is the broadcast address of the workers' subnet %v: the switch would send results to every host on it; give the address of the rank's lane socket", i, a, p)
			}
		}
		if c.cfg.AllowLaneAddressMismatch || !from.IsValid() || a.Addr() == from || (from.IsLoopback() && a.Addr().IsLoopback()) {
			continue
		}
		return Invalid("lane %d address %v is not on the caller's host %v: the switch sends each lane's results to its address, so a rank registers only sockets of its own; bind the lanes to the address that reaches the controller (switchml.Config.Bind), or, where the controller sees workers through NAT or on another network than their data plane, start the controller with {AllowLaneAddressMismatch}", i, a, from)
	}
	return nil
}

// lastOf is the last address of an IPv4 prefix (its broadcast address).
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])|(1<<(32-p.Bits())-1))
	return netip.AddrFrom4(b)
}

// mismatch names the first parameter on which r disagrees with the job.
func mismatch(j, r *jobpb.RegisterRequest) string {
	type p struct {
		name string
		a, b uint32
	}
	// Before the format, which the sparse mode implies.
	if j.GetSparse() != r.GetSparse() {
		return fmt.Sprintf("sparse %v differs from %v registered by rank %d", r.GetSparse(), j.GetSparse(), j.GetRank())
	}
	if j.GetSparseCrossover() != r.GetSparseCrossover() {
		return fmt.Sprintf("sparse_crossover %v differs from %v registered by rank %d", r.GetSparseCrossover(), j.GetSparseCrossover(), j.GetRank())
	}
	for _, x := range []p{
		{"world_size", j.GetWorldSize(), r.GetWorldSize()},
		{"lanes", j.GetLanes(), r.GetLanes()},
		{"window", j.GetWindow(), r.GetWindow()},
		{"elements", j.GetElements(), r.GetElements()},
		{"format", uint32(j.GetFormat()), uint32(r.GetFormat())},
		{"wire_bits", j.GetWireBits(), r.GetWireBits()},
	} {
		if x.a != x.b {
			if x.name == "format" {
				return fmt.Sprintf("format %v differs from %v registered by rank %d", r.GetFormat(), j.GetFormat(), j.GetRank())
			}
			return fmt.Sprintf("%s %d differs from %d registered by rank %d", x.name, x.b, x.a, j.GetRank())
		}
	}
	return ""
}

// addressesFree refuses lane addresses that another live job's workers
// hold: a socket belongs to one live process, so such a registration is a
// mistake or an attempt to take the other job's traffic. A job whose
// process died is ended by its lease, which frees its addresses. It looks
// each address up, whatever the number of jobs and ranks. A job's name is
// its owner's to know: the refusal names the holding job and rank only to
// a caller with that job's token (owner is the hash of the caller's), and
// never an open job, whose owner nothing tells apart; a client identity
// does not do either, since without TLS every process of a host shares
// one.
func (c *Core) addressesFree(name string, owner [32]byte, addrs []netip.AddrPort) error {
	// Of several holders the one first by name is named, so that the
	// answer does not depend on the order of the addresses.
	var holder *laneHolder
	var addr netip.AddrPort
	for _, a := range addrs {
		h := c.lanes[a]
		if h == nil || h.job.name == name || (holder != nil && h.job.name >= holder.job.name) {
			continue
		}
		holder, addr = h, a
	}
	switch {
	case holder == nil:
	case !holder.job.open() && subtle.ConstantTimeCompare(holder.job.owner[:], owner[:]) == 1:
		return Refuse(codes.AlreadyExists, "lane address %v is held by rank %d of job %q, which is still running (if its process is gone, the controller ends that job as soon as its lease lapses)", addr, holder.rank, holder.job.name)
	default:
		return Refuse(codes.AlreadyExists, "lane address %v is held by another job, which is still running: bind the lanes to other ports (a socket belongs to one process; if the holder's process is gone, the controller ends its job as soon as its lease lapses)", addr)
	}
	return nil
}

// laneHolder is the job and rank that hold a lane address, and how many
// of their lanes use it.
type laneHolder struct {
	job  *job
	rank uint32
	n    int
}

// addJob makes j the current generation of its name, its ranks' lane
// addresses held.
func (c *Core) addJob(j *job) {
	c.jobs[j.name] = j
	for r, reg := range j.ranks {
		if reg != nil {
			c.holdLanes(j, uint32(r), reg, 1)
		}
	}
}

// dropJob forgets j as the current generation of its name, and frees its
// lane addresses.
func (c *Core) dropJob(j *job) {
	if c.jobs[j.name] != j {
		return
	}
	delete(c.jobs, j.name)
	for r, reg := range j.ranks {
		if reg != nil {
			c.holdLanes(j, uint32(r), reg, -1)
		}
	}
}

// setRank puts reg (nil: none) in rank's place of j, keeping the lane
// addresses held by the current generations.
func (c *Core) setRank(j *job, rank uint32, reg *registration) {
	current := c.jobs[j.name] == j
	if old := j.ranks[rank]; old != nil && current {
		c.holdLanes(j, rank, old, -1)
	}
	j.setRank(rank, reg)
	if reg != nil && current {
		c.holdLanes(j, rank, reg, 1)
	}
}

// holdLanes counts (by +1 or -1) reg's lane addresses as held by rank of j.
func (c *Core) holdLanes(j *job, rank uint32, reg *registration, by int) {
	for _, a := range reg.addrs {
		h := c.lanes[a]
		switch {
		case by > 0 && (h == nil || h.job != j):
			c.lanes[a] = &laneHolder{job: j, rank: rank, n: 1}
		case h == nil || h.job != j:
		case h.n+by <= 0:
			delete(c.lanes, a)
		default:
			h.n += by
		}
	}
}
