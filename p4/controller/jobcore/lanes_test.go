package jobcore

import (
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestCoreRefusesHostileLaneAddresses: a lane address that would make the
// switch send to itself, to a group, to every host or nowhere is refused
// with InvalidArgument naming the address and why, and the refused job
// holds nothing.
func TestCoreRefusesHostileLaneAddresses(t *testing.T) {
	r := newRig(t, 64)
	shard := netip.MustParseAddrPort("10.0.0.254:48865")
	leaf := netip.MustParseAddrPort("10.0.1.1:48864")
	r.c.cfg.Shards = []netip.AddrPort{r.c.cfg.Dataplane, shard}
	r.c.cfg.SwitchAddresses = []netip.AddrPort{leaf}
	r.c.cfg.Subnets = []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}
	for _, c := range []struct {
		addr, from, why string
	}{
		{"10.0.0.254:48864", "10.0.0.254", "the switch's own data-plane address"},
		{"10.0.0.254:48865", "10.0.0.254", "the switch's own data-plane address"},
		{"10.0.1.1:48864", "10.0.1.1", "the switch's own data-plane address"},
		{"224.0.0.1:30000", "10.0.1.5", "a multicast address"},
		{"239.1.2.3:30000", "10.0.1.5", "a multicast address"},
		{"255.255.255.255:30000", "10.0.1.5", "the broadcast address"},
		{"10.0.1.255:30000", "10.0.1.255", "the broadcast address of the workers' subnet 10.0.1.0/24"},
		{"0.0.0.0:30000", "10.0.1.5", "an unspecified address"},
		{"[::]:30000", "10.0.1.5", "an unspecified address"},
		{"[2001:db8::1]:30000", "10.0.1.5", "not an IPv4 address"},
		{"10.0.1.5:0", "10.0.1.5", "port 0"},
	} {
		req := regReq("hostile", 0, 1, 1, 4, 1)
		req.LaneAddresses = []string{c.addr}
		_, err := r.c.Check(req, netip.MustParseAddr(c.from))
		if CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.why) {
			t.Errorf("lane address %s: %v, want InvalidArgument saying %q", c.addr, err, c.why)
			continue
		}
		if !strings.Contains(err.Error(), c.addr) {
			t.Errorf("lane address %s: %v does not name the address", c.addr, err)
		}
	}
	// A worker on the switch's host, on another port, is no hostile one.
	req := regReq("fine", 0, 1, 1, 4, 1)
	req.LaneAddresses = []string{"10.0.0.254:30000"}
	if _, err := r.c.Check(req, netip.MustParseAddr("10.0.0.254")); err != nil {
		t.Errorf("a lane on the switch's host, another port: %v", err)
	}
	if len(r.c.jobs) != 0 {
		t.Errorf("%d jobs held after refusals, want none", len(r.c.jobs))
	}
}

// TestCoreLaneAddressMismatch: by default a lane address must be on the
// caller's host (a loopback caller may name any loopback address); with
// AllowLaneAddressMismatch (NAT, a separate data network) it need not.
func TestCoreLaneAddressMismatch(t *testing.T) {
	r := newRig(t, 64)
	for _, c := range []struct {
		addr, from string
		ok         bool
	}{
		{"10.0.1.5:30000", "10.0.1.5", true},
		{"10.0.1.5:30000", "::ffff:10.0.1.5", true},
		{"127.0.0.1:30000", "127.0.0.1", true},
		{"127.0.3.7:30000", "127.0.0.1", true},
		{"127.0.0.1:30000", "::1", true},
		{"10.0.1.6:30000", "10.0.1.5", false},
		{"127.0.0.1:30000", "10.0.1.5", false},
		{"10.0.1.5:30000", "127.0.0.1", false},
	} {
		req := regReq("j", 0, 1, 1, 4, 1)
		req.LaneAddresses = []string{c.addr}
		for _, allow := range []bool{false, true} {
			r.c.cfg.AllowLaneAddressMismatch = allow
			_, err := r.c.Check(req, netip.MustParseAddr(c.from))
			switch {
			case (c.ok || allow) && err != nil:
				t.Errorf("lane %s from %s (allow mismatch %v): %v, want it taken", c.addr, c.from, allow, err)
			case !c.ok && !allow && (CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not on the caller's host") ||
				!strings.Contains(err.Error(), "AllowLaneAddressMismatch") || !strings.Contains(err.Error(), c.addr)):
				t.Errorf("lane %s from %s: %v, want InvalidArgument naming the address and AllowLaneAddressMismatch", c.addr, c.from, err)
			}
		}
	}
	// A caller without an IP (an in-process connection) is not checked.
	r.c.cfg.AllowLaneAddressMismatch = false
	req := regReq("j", 0, 1, 1, 4, 1)
	if _, err := r.c.Check(req, netip.Addr{}); err != nil {
		t.Errorf("a caller without an address: %v", err)
	}
	// The switch's own address stays refused with the NAT flag.
	r.c.cfg.AllowLaneAddressMismatch = true
	req.LaneAddresses = []string{r.c.cfg.Dataplane.String()}
	if _, err := r.c.Check(req, netip.Addr{}); CodeOf(err) != codes.InvalidArgument {
		t.Errorf("the switch's own address with mismatches allowed: %v, want InvalidArgument", err)
	}
}
