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
	"log/slog"

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
}

// Fabric is a running switch and controller: ControllerAddr is what
// workers pass as switchml.Config.Controller, Close stops both.
type Fabric = fabric.Fabric

// Start brings up the switch and the controller and returns once workers
// can join. Close stops both.
func Start(ctx context.Context, opts Options) (*Fabric, error) {
	return fabric.Start(ctx, fabric.Config{
		Slots: opts.Slots, MaxElements: opts.MaxElements, MaxWorkers: opts.MaxWorkers, MaxSlotsPerClient: opts.MaxSlotsPerClient,
		Faults: opts.Faults, Shards: opts.Shards, Transport: opts.Transport, Logger: opts.Logger,
	})
}
