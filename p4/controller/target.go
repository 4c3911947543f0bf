package controller

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/targets"
	"google.golang.org/grpc/codes"
)

// Kinds of target the controller programs (package targets describes
// each).
const (
	KindSoftswitch = targets.Softswitch
	KindBMv2       = targets.BMv2
	KindTofino     = targets.Tofino
)

// DefaultSoftswitchMaxElements is the software switch's default largest
// packet (its --max-elements).
const DefaultSoftswitchMaxElements = targets.DefaultSoftswitchMaxElements

// DefaultSoftswitchMaxWorkers is the software switch's default largest job
// (its --max-workers).
const DefaultSoftswitchMaxWorkers = 256

// Target is what the switch behind the controller takes. Registrations that
// ask for more are refused with an error that says what the switch takes.
type Target struct {
	Kind string
	// PacketElements lists the packet sizes (int32 values) the switch
	// aggregates with the compatible header.
	PacketElements []int
	// MaxExtendedElements is the largest packet with the extended header;
	// 0 means the switch does not parse the extended header.
	MaxExtendedElements int
	// MaxWorkers is the largest job with the compatible header (the width
	// of a slot's worker bitmap), and with any header on a P4 switch.
	MaxWorkers int
	// SoftswitchMaxWorkers is the software switch's --max-workers, the
	// largest job it takes with the extended header (0: its default,
	// DefaultSoftswitchMaxWorkers).
	SoftswitchMaxWorkers int
	// Ports maps a worker's IP address to the switch port that reaches it.
	// A P4 switch replicates results to ports and cannot learn them, so it
	// needs the map; nil means the software switch, which sends through its
	// host's stack (the replica's port is then the rank).
	Ports map[netip.Addr]uint32
	// NeedsMAC: results are addressed to the worker's Ethernet address, so
	// registrations must carry it.
	NeedsMAC bool
	// Auth: the switch checks a tag on every packet (a software switch
	// started with --auth). Each job gets a random key, handed to the
	// switch over P4Runtime (the job-key extern, p4info.ExternJobKeyType)
	// and to the job's ranks in RegisterResponse.auth_key; Describe tells
	// workers. The controller checks at connect that the switch agrees.
	Auth bool

	// dataplane, set by Run for a switch that answers probes, refuses
	// registrations while the switch does not answer at the data-plane
	// address the controller hands out.
	dataplane *dataplaneCheck
}

// TargetFor returns what a kind of target takes, as the registry of
// targets describes it. For the software switch, maxElements is its
// --max-elements (0: the default).
func TargetFor(kind string, maxElements int) (Target, error) {
	k, err := targets.Lookup(kind)
	if err != nil {
		return Target{}, fmt.Errorf("controller: %w", err)
	}
	c, err := k.Capabilities(maxElements)
	if err != nil {
		return Target{}, fmt.Errorf("controller: %w", err)
	}
	return Target{Kind: k.Kind, PacketElements: c.PacketElements, MaxExtendedElements: c.MaxExtendedElements, MaxWorkers: c.MaxWorkers, NeedsMAC: c.NeedsMAC}, nil
}

// P4 reports whether the target is a P4 switch: it replicates results to
// ports, so it needs a port map (targets.Capabilities.NeedsPortMap).
func (t Target) P4() bool { return t.capabilities().NeedsPortMap }

// capabilities are what the registry says the target's kind takes (none
// for a kind it does not know).
func (t Target) capabilities() targets.Capabilities {
	k, err := targets.Lookup(t.Kind)
	if err != nil || t.Kind == "" {
		return targets.Capabilities{}
	}
	c, _ := k.Capabilities(t.MaxExtendedElements)
	return c
}

// describe is the Describe answer for this target.
func (t Target) describe(slots int) *jobpb.DescribeResponse {
	r := &jobpb.DescribeResponse{
		TargetKind: t.Kind, MaxExtendedElements: uint32(t.MaxExtendedElements),
		MaxWorkers: uint32(t.MaxWorkers), Slots: uint32(slots), NeedsMac: t.NeedsMAC, Auth: t.Auth,
	}
	for _, k := range t.PacketElements {
		r.PacketElements = append(r.PacketElements, uint32(k))
	}
	return r
}

// check refuses a registration the target cannot serve. addrs are the
// request's lane addresses (already parsed).
func (t Target) check(r *jobpb.RegisterRequest, addrs []netip.AddrPort) error {
	if why := t.dataplane.refusal(); why != "" {
		return refuse(codes.FailedPrecondition, "%s", why)
	}
	k := int(r.GetElements())
	if t.Auth && r.GetFormat() != jobpb.Format_FORMAT_EXTENDED {
		return invalid("the switch checks a tag on every packet, and the compatible header has no room for one: join with switchml.Config.Extended and Auth")
	}
	if r.GetSparse() && t.P4() {
		return invalid("the sparse mode runs on the software switch: the %s switch's program has no sparse pipeline (docs/design.md, \"Block-sparse aggregation\"); join without switchml.Config.Sparse", t.Kind)
	}
	switch r.GetFormat() {
	case jobpb.Format_FORMAT_EXTENDED:
		if t.MaxExtendedElements == 0 {
			return invalid("the %s switch takes only the compatible header: join with the compatible header and %s values per packet", t.Kind, sizesText(t.PacketElements))
		}
		if k > t.MaxExtendedElements {
			return invalid("%d values per packet: the %s switch takes at most %d (its MaxElements); use fewer", k, t.Kind, t.MaxExtendedElements)
		}
	default:
		if !slices.Contains(t.PacketElements, k) {
			return invalid("%d values per packet: the %s switch aggregates %s with the compatible header; join with that packet size", k, t.Kind, sizesText(t.PacketElements))
		}
		if int(r.GetWorldSize()) > t.MaxWorkers {
			return &jobcore.TooBig{Refusal: refuse(codes.InvalidArgument, "world size %d: the %s switch serves at most %d workers per job with the compatible header", r.GetWorldSize(), t.Kind, t.MaxWorkers).(*jobcore.Refusal)}
		}
	}
	if limit, from := t.maxJobWorkers(r.GetFormat()); int(r.GetWorldSize()) > limit {
		return &jobcore.TooBig{Refusal: refuse(codes.InvalidArgument, "world size %d: the %s switch serves at most %d workers per job (%s); run fewer ranks",
			r.GetWorldSize(), t.Kind, limit, from).(*jobcore.Refusal)}
	}
	if t.NeedsMAC && len(r.GetMac()) != 6 {
		return invalid("rank %d sent no Ethernet address: the %s switch addresses results to the worker's MAC (upgrade the worker, or bind it to an Ethernet interface)", r.GetRank(), t.Kind)
	}
	if t.P4() {
		for i, a := range addrs {
			if a.Addr() != addrs[0].Addr() {
				return invalid("rank %d lane %d address %v differs from lane 0's %v: a P4 switch sends a rank's results to one port, so every lane binds one address", r.GetRank(), i, a.Addr(), addrs[0].Addr())
			}
			if _, ok := t.Ports[a.Addr()]; !ok {
				return invalid("rank %d lane %d address %v is not in the controller's port map: add \"%v PORT\" for the switch port that reaches it (Ports)", r.GetRank(), i, a.Addr(), a.Addr())
			}
		}
	}
	return nil
}

// maxJobWorkers is the largest job the switch serves with a header
// format, and where that bound comes from. The compatible header's is
// checked with the packet sizes.
func (t Target) maxJobWorkers(f jobpb.Format) (int, string) {
	switch {
	case f != jobpb.Format_FORMAT_EXTENDED:
		return t.MaxWorkers, "the width of a slot's worker bitmap with the compatible header"
	case t.P4():
		return t.MaxWorkers, "the width of its program's worker bitmap"
	case t.SoftswitchMaxWorkers > 0:
		return t.SoftswitchMaxWorkers, "the switch's MaxWorkers, as the controller's MaxWorkers gives it"
	}
	return DefaultSoftswitchMaxWorkers, "the switch's default MaxWorkers; the controller's MaxWorkers gives another"
}

// placeable refuses a job whose ranks' ports the switch cannot serve
// together: on a switch with pipes (a Tofino), ports of more than one
// pipe (targets.Capabilities.OnePipe).
func (t Target) placeable(replicas []switchjob.Replica) error {
	ports := make(map[int]uint32, len(replicas))
	for _, r := range replicas {
		ports[int(r.Instance)] = r.EgressPort
	}
	if err := t.capabilities().OnePipe(ports); err != nil {
		return refuse(codes.FailedPrecondition, "the %s switch cannot aggregate this job: %v", t.Kind, err)
	}
	return nil
}

// portOf is the switch port that reaches addr (the rank on the software
// switch, whose replicas carry no port).
func (t Target) portOf(addr netip.Addr, rank int) uint32 {
	if !t.P4() {
		return uint32(rank)
	}
	return t.Ports[addr]
}

func sizesText(sizes []int) string {
	s := make([]string, len(sizes))
	for i, k := range sizes {
		s[i] = strconv.Itoa(k)
	}
	switch len(s) {
	case 0:
		return "no sizes"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// ParsePortMap reads a port map: one "IPv4-ADDRESS PORT" per line (the
// worker's address as the switch sees it, and the switch port cabled to
// it); blank lines and text after '#' are ignored. Several addresses may
// share a port (hosts behind one cable); an address may appear once.
func ParsePortMap(r io.Reader) (map[netip.Addr]uint32, error) {
	ports := map[netip.Addr]uint32{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("port map line %d: %q: want \"IPv4-ADDRESS PORT\"", n, strings.TrimSpace(line))
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("port map line %d: %q is not an IPv4 address", n, fields[0])
		}
		p, err := strconv.ParseUint(fields[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("port map line %d: port %q is not a number", n, fields[1])
		}
		if _, dup := ports[a]; dup {
			return nil, fmt.Errorf("port map line %d: %v appears twice", n, a)
		}
		ports[a] = uint32(p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("port map: %w", err)
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("port map is empty: want one \"IPv4-ADDRESS PORT\" line per worker host")
	}
	return ports, nil
}

// checkAuth asks the switch whether it checks tags and refuses a controller
// that disagrees: keys a switch does not take, or a switch dropping every
// untagged packet, would fail each job with nothing but timeouts.
func checkAuth(ctx context.Context, cl *p4rt.Client, t Target, target string) error {
	if t.P4() {
		if t.Auth {
			return field.Errorf("{Auth}: the %s program cannot check a MAC on packets (see p4/README.md for the fabric isolation it needs instead); {Auth} needs the software switch", t.Kind)
		}
		return nil // P4 targets never see the extern
	}
	switchAuth, err := cl.ChecksTags(ctx)
	cl.KeyJobs(switchAuth && t.Auth)
	switch {
	case t.Auth && !switchAuth:
		return field.Errorf("{Auth}: the switch at %s does not check tags (%v): start the switch with its Auth set too", target, err)
	case !t.Auth && switchAuth:
		return field.Errorf("{Auth} off: the switch at %s checks a tag on every packet (its Auth is set): start the controller with {Auth} too, or the switch without it", target)
	}
	return nil
}
