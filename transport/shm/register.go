package shm

import (
	"fmt"
	"net/netip"

	"github.com/switchml/switchml-go/transport"
)

// Name is the transport's name (transport.Lookup, --transport).
const Name = "shm"

func init() {
	transport.Register(transport.Kind{Name: Name, Lane: listenLane, Switch: listenSwitch})
}

// listenLane opens a lane's inbox on a free port. A lane's inbox has few
// writers, the switch's shards, and takes a window of results plus the
// batch its reader holds. The lane and the switch usually share the
// host's cores: a lane that finds nothing yields before it sleeps.
func listenLane(s transport.LaneSpec) (transport.PacketConn, error) {
	ip, err := netip.ParseAddr(s.Bind)
	if err != nil {
		return nil, fmt.Errorf("transport %s: bind address %q: want an IP address", Name, s.Bind)
	}
	opts := Options{Producers: 16, Slots: max(256, s.Window+transport.DefaultBatch), CoalesceWakeups: true, YieldsBeforeSleep: DefaultYields}
	return ListenOrUDP(netip.AddrPortFrom(ip, 0), opts, s.UDP, s.Logf)
}

// listenSwitch opens a switch shard's inbox. Every lane of every job on
// this host may write into it. A result goes to every rank of its job:
// written once, into the shard's outbox, and referenced from each inbox.
func listenSwitch(s transport.SwitchSpec) (transport.PacketConn, error) {
	ap, err := netip.ParseAddrPort(s.Addr)
	if err != nil {
		return nil, fmt.Errorf("transport %s: data plane address %q: want a specific IP address and port", Name, s.Addr)
	}
	opts := Options{Producers: 256, CoalesceWakeups: true, ShareCopies: true, YieldsBeforeSleep: DefaultYields}
	return ListenOrUDP(ap, opts, s.UDP, s.Logf)
}

// Carries is the transport the Conn's packets take: Name once it has
// written into a peer's inbox, else UDP (no peer it sent to has one).
func (c *Conn) Carries() string {
	if c.Stats().ShmTX > 0 {
		return Name
	}
	return transport.UDP
}

// Kind is the Conn's transport, Name.
func (c *Conn) Kind() string { return Name }

var _ transport.Carrier = (*Conn)(nil)

// InboxCounts are the Conn's Stats of its inboxes.
func (c *Conn) InboxCounts() transport.InboxCounts {
	st := c.Stats()
	return transport.InboxCounts{Received: st.ShmRX, Sent: st.ShmTX, Shared: st.Shared, RingFull: st.Dropped, Wakeups: st.Doorbells}
}

var _ transport.InboxCounter = (*Conn)(nil)
