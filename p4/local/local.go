// Package local runs a software switch and a controller inside the calling
// process, on loopback: the embedded default for trying SwitchML, for tests
// and for single-machine training. Workers join it with switchml.Join and
// the address from ControllerAddr, exactly as they would join a remote one;
// packets still cross real UDP sockets and the switch is still programmed
// over P4Runtime.
//
// Start returns once the controller is ready, that is once the switch is
// programmed and workers can join.
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/transport"
)

// readyTimeout bounds how long Start waits for the controller.
const readyTimeout = 30 * time.Second

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
	// UDP as before. "afxdp" takes a program that imports package
	// transport/afxdp, as the switchml command does.
	Transport string
	// Auth runs the switch and the controller with --auth: each job gets
	// a key, and the switch drops packets without its tag (workers join
	// with switchml.Config.Auth).
	Auth bool
	// Logger receives the switch's and controller's logs (default: discarded).
	Logger *slog.Logger
	// Metrics, if set, receives the switch's and the controller's
	// collectors (softswitch.Switch.Collector,
	// controller.JobService.Collector) while the fabric runs.
	Metrics prometheus.Registerer
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
// workers pass as switchml.Config.Controller, Close stops both. Its methods
// may be called from several goroutines, Close once.
type Fabric struct {
	sw         *softswitch.Switch
	controller string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	mu         sync.Mutex
	err        error
	// unregister takes the switch's collector back from Options.Metrics.
	unregister func()
}

// Start brings up the switch and the controller and returns once workers
// can join. Close stops both.
func Start(ctx context.Context, opts Options) (*Fabric, error) {
	if opts.Slots < 0 || opts.MaxElements < 0 || opts.MaxWorkers < 0 {
		return nil, fmt.Errorf("local: Slots %d, MaxElements %d, MaxWorkers %d: none may be negative (0 takes the default)", opts.Slots, opts.MaxElements, opts.MaxWorkers)
	}
	dp, p4rt, ctl, err := Ports(opts.Port, opts.Shards)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if ctl == "" {
		ctl = "127.0.0.1:0"
	}
	opts.Slots = cmp.Or(opts.Slots, 8192)
	opts.MaxElements = cmp.Or(opts.MaxElements, 1024)
	opts.MaxWorkers = cmp.Or(opts.MaxWorkers, 256)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	sw, err := softswitch.Listen(softswitch.Config{
		Dataplane: dp, Shards: opts.Shards, P4Runtime: p4rt, Faults: opts.Faults, Logger: opts.Logger,
		Transport: opts.Transport, Auth: opts.Auth,
		Pipeline: pipeline.Config{Slots: opts.Slots, MaxElements: opts.MaxElements, MaxWorkers: opts.MaxWorkers},
	})
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	target, err := controller.TargetFor(controller.KindSoftswitch, opts.MaxElements)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	target.Auth, target.SoftswitchMaxWorkers = opts.Auth, opts.MaxWorkers
	runCtx, cancel := context.WithCancel(context.Background())
	f := &Fabric{sw: sw, cancel: cancel}
	ready := make(chan string, 1)
	f.goRun(func() error { return sw.Serve(runCtx) })
	f.goRun(func() error {
		return controller.Run(runCtx, controller.Config{
			Target: sw.P4RuntimeAddr(), Listen: ctl, Dataplane: strings.Join(sw.DataplaneAddrs(), ","), Slots: opts.Slots, Switch: target, Logger: opts.Logger,
			Metrics: opts.Metrics, JobLimits: controller.JobLimits{MaxSlotsPerClient: opts.MaxSlotsPerClient},
			Ready: func(a net.Addr) { ready <- a.String() },
		})
	})
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case f.controller = <-ready:
		if opts.Metrics != nil {
			col := sw.Collector()
			if err := opts.Metrics.Register(col); err != nil {
				f.Close()
				return nil, fmt.Errorf("local: registering the switch's metrics: %w", err)
			}
			f.unregister = func() { opts.Metrics.Unregister(col) }
		}
		return f, nil
	case <-ctx.Done():
		f.Close()
		return nil, ctx.Err()
	case <-runCtx.Done():
		return nil, fmt.Errorf("local: the switch or the controller stopped at start: %w", f.Close())
	case <-timer.C:
		err := f.Close()
		return nil, fmt.Errorf("local: switch and controller not ready within %v: %v", readyTimeout, err)
	}
}

func (f *Fabric) goRun(fn func() error) {
	f.wg.Go(func() {
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			f.mu.Lock()
			if f.err == nil {
				f.err = err
			}
			f.mu.Unlock()
			f.cancel()
		}
	})
}

// ControllerAddr is the job service's address: what workers pass as
// switchml.Config.Controller.
func (f *Fabric) ControllerAddr() string { return f.controller }

// DataplaneAddr is the switch's UDP address (its first shard's).
func (f *Fabric) DataplaneAddr() string { return f.sw.DataplaneAddr() }

// P4RuntimeAddr is the switch's P4Runtime address.
func (f *Fabric) P4RuntimeAddr() string { return f.sw.P4RuntimeAddr() }

// Switch is the running switch.
func (f *Fabric) Switch() *softswitch.Switch { return f.sw }

// Counters returns the switch's counters, indexed by switchjob.Stat.
func (f *Fabric) Counters() [switchjob.NumStats]uint64 { return f.sw.Counters() }

// Exited says whether the switch or the controller has stopped on its own.
func (f *Fabric) Exited() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// Close stops the controller and the switch and reports the first error
// either hit while running.
func (f *Fabric) Close() error {
	f.cancel()
	f.wg.Wait()
	if f.unregister != nil {
		f.unregister()
		f.unregister = nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
