// Package local runs a software switch and a controller inside the calling
// process, on loopback: the embedded default for trying SwitchML, for tests
// and for single-machine training. Workers join it with switchml.Join and
// the address from ControllerAddr, exactly as they would join a remote one;
// packets still cross real UDP sockets and the switch is still programmed
// over P4Runtime.
//
// It is the in-process case of p4/fabric, which also runs the two as
// subprocesses.
package local

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/p4/fabric"
	"github.com/switchml/switchml-go/transport"
)

// Options size the embedded switch. Zero values take the defaults.
type Options struct {
	// Slots per set in the switch pool (default 8192).
	Slots int
	// MaxElements is the largest number of values per packet (default 1024).
	MaxElements int
	// MaxWorkers is the largest job (default 256).
	MaxWorkers int
	// MaxSlotsPerClient is the controller's slot quota per client
	// address: 0, half the pool; -1, none (every rank of an embedded
	// fabric comes from one address).
	MaxSlotsPerClient int
	// Faults are injected into every packet the switch sends.
	Faults transport.Faults
	// Shards is the number of the switch's data-plane loops (default 1):
	// each has a UDP port of its own, and a job's lanes are spread over
	// them, so that the switch may use as many cores.
	Shards int
	// Transport is how the switch moves packets: "udp" ("" too), or
	// "shm" to give it a shared-memory inbox as well, which workers with
	// switchml.Config.Transport "shm" write into; others reach it over
	// UDP as before.
	Transport string
	// Logger receives the switch's and controller's logs (default: discarded).
	Logger *slog.Logger
	// Port, if set, pins the ports on 127.0.0.1: the switch's data plane
	// at Port (its shards at the ports after it), its P4Runtime server at
	// Port+Shards and the controller's job service at Port+Shards+1. By
	// default each is a free port.
	Port int
}

// Ports are the addresses a fabric with Options.Port pins: data plane (every
// shard's, comma-separated), P4Runtime and controller; empty strings for
// port 0. It refuses a base port that leaves no room.
func Ports(base, shards int) (dataplane, p4rt, controller string, err error) {
	if base == 0 {
		return "", "", "", nil
	}
	shards = max(shards, 1)
	if base < 1024 || base+shards+1 > 65535 {
		return "", "", "", fmt.Errorf("port %d: want 1024..%d, so that the %d ports from it are unprivileged and exist", base, 65535-shards-1, shards+2)
	}
	at := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
	var dps []string
	for i := range shards {
		dps = append(dps, at(base+i))
	}
	return strings.Join(dps, ","), at(base + shards), at(base + shards + 1), nil
}

// Fabric is a running switch and controller: ControllerAddr is what
// workers pass as switchml.Config.Controller, Close stops both.
type Fabric = fabric.Fabric

// Start brings up the switch and the controller and returns once workers
// can join. Close stops both.
func Start(ctx context.Context, opts Options) (*Fabric, error) {
	dp, p4rt, ctl, err := Ports(opts.Port, opts.Shards)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return fabric.Start(ctx, fabric.Config{
		Slots: opts.Slots, MaxElements: opts.MaxElements, MaxWorkers: opts.MaxWorkers, MaxSlotsPerClient: opts.MaxSlotsPerClient,
		Faults: opts.Faults, Shards: opts.Shards, Transport: opts.Transport, Logger: opts.Logger,
		Dataplane: dp, P4Runtime: p4rt, Controller: ctl,
	})
}
