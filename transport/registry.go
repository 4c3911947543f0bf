package transport

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
)

// UDP is the name of the default transport: kernel UDP sockets (Conn).
// The other transports register themselves under their own names
// (shm.Name, afxdp.Name) when their package is imported.
const UDP = "udp"

// Logf reports why a transport fell back to UDP.
type Logf func(format string, args ...any)

// LaneSpec is what a worker lane's socket is opened with.
type LaneSpec struct {
	// Bind is the local address; the port is picked free.
	Bind string
	// Window is the lane's packets in flight, for transports that size
	// buffers to it.
	Window int
	// UDP tunes the kernel socket (the transport's own, or its fallback).
	UDP Options
	// Logf, if set, hears why a transport fell back to UDP.
	Logf Logf
}

// SwitchSpec is what a switch's data-plane socket (one per shard) is opened
// with.
type SwitchSpec struct {
	// Addr is the data-plane address, ip:port.
	Addr string
	// UDP tunes the kernel socket (the transport's own, or its fallback).
	UDP Options
	// Logf, if set, hears why a transport fell back to UDP.
	Logf Logf
}

// Kind is one transport: how a worker's lane and a switch's data plane
// open a PacketConn over it. Each kind tunes its sockets to its side: a
// lane's inbox has few writers, a switch's has every lane of the host.
type Kind struct {
	Name string
	// Lane opens a worker lane's socket.
	Lane func(LaneSpec) (PacketConn, error)
	// Switch opens a switch shard's data-plane socket.
	Switch func(SwitchSpec) (PacketConn, error)
}

var registry = struct {
	sync.RWMutex
	kinds map[string]Kind
}{kinds: map[string]Kind{
	UDP: {
		Name: UDP,
		Lane: func(s LaneSpec) (PacketConn, error) {
			return Listen(net.JoinHostPort(s.Bind, "0"), s.UDP)
		},
		Switch: func(s SwitchSpec) (PacketConn, error) {
			return Listen(s.Addr, s.UDP)
		},
	},
}}

// Register makes a transport known by its name. It panics on a kind with
// no name or no factory, or a name already taken: registration is a
// program's init, not input.
func Register(k Kind) {
	if k.Name == "" || k.Lane == nil || k.Switch == nil {
		panic(fmt.Sprintf("transport: Register(%q): a kind needs a name, a Lane and a Switch factory", k.Name))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.kinds[k.Name]; dup {
		panic(fmt.Sprintf("transport: Register(%q) twice", k.Name))
	}
	registry.kinds[k.Name] = k
}

// Lookup returns the transport of a name; "" is UDP. An unknown name's
// error lists the registered ones.
func Lookup(name string) (Kind, error) {
	if name == "" {
		name = UDP
	}
	registry.RLock()
	k, ok := registry.kinds[name]
	registry.RUnlock()
	if !ok {
		if pkg := optional[name]; pkg != "" {
			return Kind{}, fmt.Errorf("transport %q: %w: not built into this program (import %s)", name, ErrUnknown, pkg)
		}
		return Kind{}, fmt.Errorf("transport %q: %w: want %s", name, ErrUnknown, namesText())
	}
	return k, nil
}

// ErrUnknown is a transport name that is not registered in this program.
var ErrUnknown = errors.New("unknown transport")

// optional are the transports of this module that a program registers by
// importing their package, which Lookup names when one is asked for but
// missing.
var optional = map[string]string{
	"afxdp": "github.com/switchml/switchml-go/transport/afxdp",
	"shm":   "github.com/switchml/switchml-go/transport/shm",
}

// Names lists the registered transports, UDP first, then by name.
func Names() []string {
	registry.RLock()
	names := make([]string, 0, len(registry.kinds))
	for n := range registry.kinds {
		if n != UDP {
			names = append(names, n)
		}
	}
	registry.RUnlock()
	slices.Sort(names)
	return append([]string{UDP}, names...)
}

func namesText() string {
	n := Names()
	if len(n) == 1 {
		return n[0]
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}
