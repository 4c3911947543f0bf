package afxdp

import (
	"fmt"
	"net/netip"

	"github.com/switchml/switchml-go/transport"
)

// Name is the transport's name (transport.Lookup, --transport).
const Name = "afxdp"

func init() {
	transport.Register(transport.Kind{Name: Name, Lane: listenLane, Switch: listenSwitch})
}

// listenLane opens a lane's AF_XDP socket on a free port of the bind
// address's interface, or UDP where AF_XDP cannot be used.
func listenLane(s transport.LaneSpec) (transport.PacketConn, error) {
	ip, err := netip.ParseAddr(s.Bind)
	if err != nil {
		return nil, fmt.Errorf("transport %s: bind address %q: want an IP address", Name, s.Bind)
	}
	return ListenOrUDP(netip.AddrPortFrom(ip, 0), Options{}, s.UDP, s.Logf)
}

// listenSwitch opens a switch shard's AF_XDP socket, moving as many
// datagrams per call as the switch's UDP socket.
func listenSwitch(s transport.SwitchSpec) (transport.PacketConn, error) {
	ap, err := netip.ParseAddrPort(s.Addr)
	if err != nil || !ap.Addr().Is4() || ap.Addr().IsUnspecified() {
		return nil, fmt.Errorf("transport %s: data plane address %q: want a specific IPv4 address and port", Name, s.Addr)
	}
	return ListenOrUDP(ap, Options{Batch: s.UDP.Batch}, s.UDP, s.Logf)
}

// Carries is the transport the Conn's packets take: Name.
func (c *Conn) Carries() string { return Name }

// Kind is the Conn's transport, Name.
func (c *Conn) Kind() string { return Name }

var _ transport.Carrier = (*Conn)(nil)
