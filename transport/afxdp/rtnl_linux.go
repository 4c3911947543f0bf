package afxdp

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rtnl asks the kernel's route netlink for what the fast path needs: the
// route to a destination, its next hop's MAC address, and what is attached
// at an interface's XDP hook. It answers for the network namespace it was
// opened in, whichever thread asks later, and is safe for concurrent use
// (the Conns of a device share it).
type rtnl struct {
	h *netlink.Handle
}

func openRTNL() (*rtnl, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("afxdp: cannot open a route netlink socket: %w", err)
	}
	// A reply never takes long; a timeout keeps a lost one from hanging
	// a sender.
	if err := h.SetSocketTimeout(time.Second); err != nil {
		h.Close()
		return nil, fmt.Errorf("afxdp: cannot set a timeout on a route netlink socket: %w", err)
	}
	return &rtnl{h: h}, nil
}

func (r *rtnl) close() error {
	r.h.Close()
	return nil
}

// route is the kernel's routing decision for a destination.
type route struct {
	typ uint8 // RTN_UNICAST, RTN_LOCAL, ...
	oif int
	gw  [4]byte
	via bool // gw is set
}

// routeTo asks the kernel how it would send to dst.
func (r *rtnl) routeTo(dst [4]byte) (route, error) {
	routes, err := r.h.RouteGet(net.IP(dst[:]))
	if err != nil {
		return route{}, err
	}
	if len(routes) == 0 {
		return route{}, errors.New("no route in the reply")
	}
	rt := route{typ: uint8(routes[0].Type), oif: routes[0].LinkIndex}
	if gw := routes[0].Gw.To4(); gw != nil {
		rt.gw, rt.via = [4]byte(gw), true
	}
	return rt, nil
}

// nudValid are the neighbour states whose link-layer address can be used.
const nudValid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE | unix.NUD_PROBE | unix.NUD_STALE | unix.NUD_DELAY

// neighbour looks ip up in the kernel's IPv4 neighbour table of ifindex.
func (r *rtnl) neighbour(ifindex int, ip [4]byte) (mac [6]byte, ok bool, err error) {
	neighs, err := r.h.NeighList(ifindex, unix.AF_INET)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return mac, false, err
	}
	for _, n := range neighs {
		if n.LinkIndex != ifindex || n.State&nudValid == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		if dst := n.IP.To4(); dst != nil && [4]byte(dst) == ip {
			return [6]byte(n.HardwareAddr), true, nil
		}
	}
	// A dump interrupted by a change may have missed the entry: the
	// datagram goes through the kernel, and the lookup is tried again.
	return mac, false, nil
}

// xdpState is what is attached at an interface's XDP hook.
type xdpState struct {
	attached uint8 // XDP_ATTACHED_NONE (0), DRV, SKB, HW, MULTI
	progID   uint32
}

func (s xdpState) mode() string {
	switch s.attached {
	case 0:
		return "none"
	case 1:
		return "native"
	case 2:
		return "generic"
	case 3:
		return "offloaded"
	}
	return "several modes"
}

// linkXDP reports the XDP program attached to ifindex.
func (r *rtnl) linkXDP(ifindex int) (xdpState, error) {
	l, err := r.h.LinkByIndex(ifindex)
	if err != nil {
		return xdpState{}, err
	}
	x := l.Attrs().Xdp
	if x == nil {
		return xdpState{}, nil
	}
	return xdpState{attached: uint8(x.AttachMode), progID: x.ProgId}, nil
}
