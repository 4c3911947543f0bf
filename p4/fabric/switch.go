package fabric

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/switchml/switchml-go/p4/dataplane"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/switchml/transport"
)

// SwitchConfig describes a software switch.
type SwitchConfig struct {
	// Dataplane is the UDP address workers send to (default: a free port
	// on loopback).
	Dataplane string
	// P4Runtime is the TCP address of the P4Runtime service (default: a
	// free port on loopback).
	P4Runtime string
	// Pipeline sizes the switch memory; zero fields take
	// softswitch.DefaultPipeline's.
	Pipeline pipeline.Config
	// DeviceID is the P4Runtime device id (default 1).
	DeviceID uint64
	// TLS, if set, secures the P4Runtime service.
	TLS *tls.Config
	// Faults are injected into every packet the switch sends.
	Faults transport.Faults
	// Logger receives the switch's logs (default: discarded).
	Logger *slog.Logger
}

// Switch is a software switch bound to its addresses: the SwitchML
// pipeline behind a P4Runtime service and a UDP data plane.
type Switch struct {
	srv    *softswitch.Server
	conn   *transport.Conn
	lis    net.Listener
	inj    *transport.Injector
	stats  dataplane.Stats
	logger *slog.Logger
}

// ListenSwitch builds the switch and binds its sockets; Serve runs it.
func ListenSwitch(cfg SwitchConfig) (*Switch, error) {
	if cfg.Dataplane == "" {
		cfg.Dataplane = "127.0.0.1:0"
	}
	if cfg.P4Runtime == "" {
		cfg.P4Runtime = "127.0.0.1:0"
	}
	if cfg.DeviceID == 0 {
		cfg.DeviceID = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	inj, err := transport.NewInjector(cfg.Faults)
	if err != nil {
		return nil, err
	}
	if !cfg.Faults.Active() {
		inj = nil
	}
	srv, err := softswitch.NewServer(softswitch.ServerConfig{
		DeviceID: cfg.DeviceID, TLS: cfg.TLS, Pipeline: cfg.Pipeline, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	conn, err := transport.Listen(cfg.Dataplane, transport.Options{Batch: 128, SocketBuffer: 4 << 20})
	if err != nil {
		return nil, fmt.Errorf("switch data plane %s: %w", cfg.Dataplane, err)
	}
	lis, err := net.Listen("tcp", cfg.P4Runtime)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("switch P4Runtime listener %s: %w", cfg.P4Runtime, err)
	}
	return &Switch{srv: srv, conn: conn, lis: lis, inj: inj, logger: cfg.Logger}, nil
}

// DataplaneAddr is the UDP address workers send to.
func (s *Switch) DataplaneAddr() string { return s.conn.LocalAddr().String() }

// P4RuntimeAddr is the address of the P4Runtime service.
func (s *Switch) P4RuntimeAddr() string { return s.lis.Addr().String() }

// Counters returns the pipeline's counters, indexed by pipeline.Stat.
func (s *Switch) Counters() [pipeline.NumStats]uint64 { return s.srv.Counters() }

// Stats are the data plane's datagram counts.
func (s *Switch) Stats() *dataplane.Stats { return &s.stats }

// Serve runs the P4Runtime service and the data plane until ctx ends
// (then it returns nil) or either fails. It closes the sockets on return.
func (s *Switch) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.conn.Close()
	errc := make(chan error, 2)
	go func() { errc <- s.srv.ServeP4Runtime(ctx, s.lis) }()
	go func() { errc <- dataplane.Serve(ctx, s.conn, s.srv, s.inj, &s.stats) }()
	var first error
	pending := 2
	select {
	case <-ctx.Done():
	case first = <-errc:
		pending--
	}
	cancel()
	for ; pending > 0; pending-- {
		if err := <-errc; first == nil {
			first = err
		}
	}
	if first != nil && !errors.Is(first, context.Canceled) {
		return first
	}
	return nil
}

// Summary lists the switch's non-zero counters, for logs.
func (s *Switch) Summary() []any {
	var parts []string
	for i, v := range s.Counters() {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", pipeline.Stat(i), v))
		}
	}
	out := []any{"received", s.stats.Received.Load(), "sent", s.stats.Sent.Load(), "pipeline", strings.Join(parts, " ")}
	if n := s.stats.SendErrors.Load(); n > 0 {
		out = append(out, "send_errors", n, "last_send_error", s.stats.LastSendError.Load())
	}
	return out
}
