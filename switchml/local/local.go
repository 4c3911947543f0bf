// Package local runs a software switch and a controller inside the calling
// process, on loopback: the embedded default for trying SwitchML, for tests
// and for single-machine training. Workers join it with switchml.Join and
// the address from ControllerAddr, exactly as they would join a remote one;
// packets still cross real UDP sockets and the switch is still programmed
// over P4Runtime.
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/dataplane"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/switchml/transport"
)

// Options size the embedded switch. Zero values take the defaults.
type Options struct {
	// Slots per set in the switch pool (default 8192).
	Slots int
	// MaxElements is the largest number of values per packet (default 1024).
	MaxElements int
	// MaxWorkers is the largest job (default 256).
	MaxWorkers int
	// Faults are injected into every packet the switch sends.
	Faults transport.Faults
	// Logger receives the switch's and controller's logs (default: discarded).
	Logger *slog.Logger
}

// Fabric is a running switch and controller.
type Fabric struct {
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	mu         sync.Mutex
	err        error
	dataplane  string
	controller string
	p4rt       string
	server     *softswitch.Server
	stats      dataplane.Stats
}

// Start brings up the switch and the controller and returns once workers
// can join. Close stops both.
func Start(ctx context.Context, opts Options) (*Fabric, error) {
	if opts.Slots == 0 {
		opts.Slots = 8192
	}
	if opts.MaxElements == 0 {
		opts.MaxElements = 1024
	}
	if opts.MaxWorkers == 0 {
		opts.MaxWorkers = 256
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	inj, err := transport.NewInjector(opts.Faults)
	if err != nil {
		return nil, err
	}
	if !opts.Faults.Active() {
		inj = nil
	}
	srv, err := softswitch.NewServer(softswitch.ServerConfig{
		Pipeline: pipeline.Config{Slots: opts.Slots, MaxElements: opts.MaxElements, MaxWorkers: opts.MaxWorkers},
		Logger:   opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	conn, err := transport.Listen("127.0.0.1:0", transport.Options{Batch: 128, SocketBuffer: 4 << 20})
	if err != nil {
		return nil, err
	}
	p4lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("local: P4Runtime listener: %w", err)
	}
	// The controller's listener address is only known once it serves.
	ctlLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		conn.Close()
		p4lis.Close()
		return nil, fmt.Errorf("local: controller listener: %w", err)
	}
	ctlAddr := ctlLis.Addr().String()
	ctlLis.Close()

	runCtx, cancel := context.WithCancel(context.Background())
	f := &Fabric{cancel: cancel, dataplane: conn.LocalAddr().String(), controller: ctlAddr, p4rt: p4lis.Addr().String(), server: srv}
	ready := make(chan struct{})
	f.goRun(func() error { return srv.ServeP4Runtime(runCtx, p4lis) })
	f.goRun(func() error {
		defer conn.Close()
		return dataplane.Serve(runCtx, conn, srv, inj, &f.stats)
	})
	f.goRun(func() error {
		return controller.Run(runCtx, controller.Config{
			Target: f.p4rt, Listen: ctlAddr, Dataplane: f.dataplane, Slots: opts.Slots, Logger: opts.Logger,
			Ready: func(net.Addr) { close(ready) },
		})
	})
	select {
	case <-ready:
		return f, nil
	case <-ctx.Done():
		f.Close()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		err := f.Close()
		return nil, fmt.Errorf("local: switch and controller not ready within 30s: %v", err)
	}
}

func (f *Fabric) goRun(fn func() error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			f.mu.Lock()
			if f.err == nil {
				f.err = err
			}
			f.mu.Unlock()
			f.cancel()
		}
	}()
}

// ControllerAddr is the address workers pass as switchml.Config.Controller.
func (f *Fabric) ControllerAddr() string { return f.controller }

// DataplaneAddr is the switch's UDP address.
func (f *Fabric) DataplaneAddr() string { return f.dataplane }

// P4RuntimeAddr is the switch's P4Runtime address.
func (f *Fabric) P4RuntimeAddr() string { return f.p4rt }

// Counters returns the switch pipeline's counters, indexed by pipeline.Stat.
func (f *Fabric) Counters() [pipeline.NumStats]uint64 { return f.server.Counters() }

// Close stops the controller and the switch and reports the first error
// either hit while running.
func (f *Fabric) Close() error {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
