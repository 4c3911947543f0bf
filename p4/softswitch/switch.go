package softswitch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/p4/dataplane"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/transport"
	_ "github.com/switchml/switchml-go/transport/shm" // the switch takes --transport shm
)

// Config describes a software switch: its P4Runtime service and its
// data plane, as `switchml switch` runs it.
type Config struct {
	// Dataplane is the UDP address workers send to (default: a free port
	// on loopback). With several shards it is the first shard's, and shard
	// k listens on the same host at port+k (or on a free port each, when
	// the port is 0); or it lists every shard's address, comma-separated.
	Dataplane string
	// Shards is the number of data-plane loops (default 1), each with its
	// own socket, serving one pipeline: P4Runtime sees one switch. The
	// controller spreads a job's lanes over the shards' addresses.
	Shards int
	// P4Runtime is the TCP address of the P4Runtime service (default: a
	// free port on loopback).
	P4Runtime string
	// Pipeline sizes the switch memory; zero fields take
	// DefaultPipeline's.
	Pipeline pipeline.Config
	// DeviceID is the P4Runtime device id (default 1).
	DeviceID uint64
	// TLS, if set, secures the P4Runtime service; with client CAs, only
	// controllers may program the switch (see ServerConfig).
	TLS *tls.Config
	// P4RuntimeAllow names the certificates that may program the switch
	// besides those with the controller role (ServerConfig.Allow).
	P4RuntimeAllow []string
	// Names writes the switch's settings in its warnings as the
	// operator's program names them (the CLI: its flags; see package
	// field); nil: their Go names.
	Names func(field string) string
	// Faults are injected into every packet the switch sends.
	Faults transport.Faults
	// Logger receives the switch's logs (default: discarded).
	Logger *slog.Logger
	// Parent, if set, is the data-plane address (ip:port) of the switch
	// this one is a leaf of: each job's partial sums go up to it, and the
	// parent's result comes down to the job's workers. The parent must
	// see this switch's packets come from its data-plane address, so bind
	// Dataplane to a specific address. One shard only.
	Parent string
	// Transport is how the data plane moves packets (a name from
	// transport.Names): transport.UDP ("" is the same) or afxdp.Name,
	// AF_XDP sockets on the interface of the Dataplane
	// address (which must then be a specific IPv4 address), falling back
	// to UDP with a logged reason where AF_XDP cannot be used, in a
	// program that imports package transport/afxdp (switchml does; an
	// embedder that wants it adds the blank import); or shm.Name,
	// UDP sockets with shared-memory inboxes through which workers on this
	// host started with the same transport exchange datagrams with the
	// switch (a specific address again; others keep using UDP).
	Transport string
	// Auth makes the switch check a tag on every packet (switch --auth,
	// pipeline.Config.Auth): the controller gives each job a key over
	// P4Runtime, and packets whose tag is wrong or missing are dropped
	// and counted (drop_bad_tag). It works the same over every
	// Transport. A leaf (Parent) cannot check tags: the hop to its
	// parent carries none.
	Auth bool
}

// Switch is a software switch bound to its addresses: the SwitchML
// pipeline behind a P4Runtime service and a UDP data plane.
type Switch struct {
	srv    *Server
	conns  []transport.PacketConn // one per shard
	shards []*Shard
	lis    net.Listener
	injs   []*transport.Injector // one per shard; nil without faults
	stats  []dataplane.Stats     // one per shard: no counter shared between cores
	logger *slog.Logger
}

// MaxShards bounds Config.Shards: the SwitchML port range
// 0xBEE0-0xBEEF has 16 ports.
const MaxShards = 16

// ShardAddrs returns the data-plane addresses of n shards, as Listen binds
// them: addr, then the following ports, or free ports when addr's port is
// 0; or addr's comma-separated list of n addresses.
func ShardAddrs(addr string, n int) ([]string, error) {
	if strings.Contains(addr, ",") {
		list := strings.Split(addr, ",")
		if len(list) != n {
			return nil, fmt.Errorf("switch data plane %q: %d addresses for %d shards; give one per shard, or one to count ports up from", addr, len(list), n)
		}
		return list, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("switch data plane %q: %v", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("switch data plane %q: port %q: want a number 0..65535", addr, port)
	}
	out := make([]string, n)
	for k := range out {
		q := 0
		if p != 0 {
			q = int(p) + k
			if q > 0xffff {
				return nil, fmt.Errorf("switch data plane %q: %d shards need ports up to %d, beyond 65535", addr, n, q)
			}
		}
		out[k] = net.JoinHostPort(host, fmt.Sprint(q))
	}
	return out, nil
}

// Listen builds the switch and binds its sockets; Serve runs it.
func Listen(cfg Config) (*Switch, error) {
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
	if cfg.Shards == 0 {
		cfg.Shards = strings.Count(cfg.Dataplane, ",") + 1
	}
	if cfg.Shards < 1 || cfg.Shards > MaxShards {
		return nil, fmt.Errorf("switch: %d shards, want 1..%d", cfg.Shards, MaxShards)
	}
	addrs, err := ShardAddrs(cfg.Dataplane, cfg.Shards)
	if err != nil {
		return nil, err
	}
	if cfg.Auth {
		if cfg.Parent != "" {
			return nil, field.Errorf("switch: {Auth} with {Parent} %s: the partial sums a leaf sends its parent carry no tag; run the tree without {Auth}", cfg.Parent)
		}
		cfg.Pipeline.Auth = true
	}
	var parent netip.AddrPort
	if cfg.Parent != "" {
		if cfg.Shards > 1 {
			return nil, fmt.Errorf("switch: a leaf (parent %s) runs one data-plane shard, not %d: the parent answers one address per leaf", cfg.Parent, cfg.Shards)
		}
		ua, err := net.ResolveUDPAddr("udp4", cfg.Parent)
		if err != nil {
			return nil, fmt.Errorf("switch: parent %q: %v (give the parent's data-plane ip:port)", cfg.Parent, err)
		}
		parent = ua.AddrPort()
		if parent.Addr().IsUnspecified() || parent.Port() == 0 {
			return nil, fmt.Errorf("switch: parent %q: give the address and port the parent's data plane sends from", cfg.Parent)
		}
	}
	srv, err := NewServer(ServerConfig{
		DeviceID: cfg.DeviceID, TLS: cfg.TLS, Allow: cfg.P4RuntimeAllow, Pipeline: cfg.Pipeline, Logger: cfg.Logger, Parent: parent, Names: cfg.Names,
	})
	if err != nil {
		return nil, err
	}
	s := &Switch{srv: srv, logger: cfg.Logger}
	for k, addr := range addrs {
		if cfg.Faults.Active() {
			f := cfg.Faults
			f.Seed += uint64(k) // shards draw their own faults
			inj, err := transport.NewInjector(f)
			if err != nil {
				s.closeConns()
				return nil, err
			}
			s.injs = append(s.injs, inj)
		} else {
			s.injs = append(s.injs, nil)
		}
		conn, err := listenDataplane(cfg.Transport, addr, cfg.Logger)
		if err != nil {
			s.closeConns()
			if cfg.Shards > 1 {
				return nil, fmt.Errorf("switch data plane shard %d of %d at %s: %w", k, cfg.Shards, addr, err)
			}
			return nil, fmt.Errorf("switch data plane %s: %w", addr, err)
		}
		s.conns = append(s.conns, conn)
		s.shards = append(s.shards, srv.Shard())
	}
	s.stats = make([]dataplane.Stats, len(s.conns))
	s.lis, err = net.Listen("tcp", cfg.P4Runtime)
	if err != nil {
		s.closeConns()
		return nil, fmt.Errorf("switch P4Runtime listener %s: %w", cfg.P4Runtime, err)
	}
	return s, nil
}

func (s *Switch) closeConns() {
	for _, c := range s.conns {
		c.Close()
	}
}

// DataplaneAddr is the UDP address workers send to: the first shard's.
func (s *Switch) DataplaneAddr() string { return s.conns[0].LocalAddr().String() }

// DataplaneAddrs are the UDP addresses of the shards, in shard order: what
// the controller hands out (controller.Config.Dataplane, comma-separated).
func (s *Switch) DataplaneAddrs() []string {
	out := make([]string, len(s.conns))
	for k, c := range s.conns {
		out[k] = c.LocalAddr().String()
	}
	return out
}

// P4RuntimeAddr is the address of the P4Runtime service.
func (s *Switch) P4RuntimeAddr() string { return s.lis.Addr().String() }

// Counters returns the pipeline's counters, indexed by switchjob.Stat.
func (s *Switch) Counters() [switchjob.NumStats]uint64 { return s.srv.Counters() }

// Stats are the data plane's datagram counts, summed over the shards at
// the time of the call.
func (s *Switch) Stats() *dataplane.Stats {
	sum := new(dataplane.Stats)
	for k := range s.stats {
		st := s.ShardStats(k)
		sum.Received.Add(st.Received.Load())
		sum.Sent.Add(st.Sent.Load())
		sum.ReceivedBytes.Add(st.ReceivedBytes.Load())
		sum.SentBytes.Add(st.SentBytes.Load())
		sum.SendErrors.Add(st.SendErrors.Load())
		sum.SelfDrops.Add(st.SelfDrops.Load())
		if e := st.LastSendError.Load(); e != nil {
			sum.LastSendError.Store(e)
		}
	}
	return sum
}

// Shards is the number of data-plane shards.
func (s *Switch) Shards() int { return len(s.conns) }

// ShardStats are shard k's datagram counts, live.
func (s *Switch) ShardStats(k int) *dataplane.Stats { return &s.stats[k] }

// Serve runs the P4Runtime service and the data plane until ctx ends
// (then it returns nil) or either fails. It closes the sockets on return.
func (s *Switch) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.closeConns()
	errc := make(chan error, 1+len(s.conns))
	go func() { errc <- s.srv.ServeP4Runtime(ctx, s.lis) }()
	shards := make([]netip.AddrPort, len(s.conns))
	for k, conn := range s.conns {
		shards[k] = conn.LocalAddr()
	}
	for k, conn := range s.conns {
		go func() { errc <- dataplane.Serve(ctx, conn, s.shards[k], s.injs[k], &s.stats[k], shards...) }()
	}
	var first error
	pending := 1 + len(s.conns)
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

// LogCounters logs the switch's counters (Summary) to log at every
// interval until ctx ends.
func (s *Switch) LogCounters(ctx context.Context, log *slog.Logger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			log.Info("counters", s.Summary()...)
		}
	}
}

// Summary lists the switch's non-zero counters, for logs.
func (s *Switch) Summary() []any {
	var parts []string
	for i, v := range s.Counters() {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", switchjob.Stat(i), v))
		}
	}
	st := s.Stats()
	out := []any{"received", st.Received.Load(), "sent", st.Sent.Load(), "pipeline", strings.Join(parts, " ")}
	if len(s.stats) > 1 {
		per := make([]string, len(s.stats))
		for k := range s.stats {
			per[k] = fmt.Sprint(s.stats[k].Received.Load())
		}
		out = append(out, "received_per_shard", strings.Join(per, ","))
	}
	if n := st.SendErrors.Load(); n > 0 {
		out = append(out, "send_errors", n, "last_send_error", st.LastSendError.Load())
	}
	if n := st.SelfDrops.Load(); n > 0 {
		out = append(out, "self_drops", n)
	}
	return out
}

// listenDataplane opens a shard's data-plane socket of the given transport.
func listenDataplane(kind, addr string, logger *slog.Logger) (transport.PacketConn, error) {
	t, err := transport.Lookup(kind)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logf := func(format string, args ...any) {
		logger.Warn(fmt.Sprintf(format, args...), "dataplane", addr)
	}
	return t.Switch(transport.SwitchSpec{Addr: addr, UDP: transport.Options{Batch: 128, SocketBuffer: 4 << 20}, Logf: logf})
}

// Transport is what the data plane moves packets through: the transport
// it was started with when every shard got a socket of its own (a
// transport.Carrier), else transport.UDP (a shard fell back to kernel
// sockets).
func (s *Switch) Transport() string {
	kind := transport.UDP
	for _, c := range s.conns {
		k, ok := c.(transport.Carrier)
		if !ok {
			return transport.UDP
		}
		// A switch's shared-memory inbox carries packets from the first
		// lane that writes into it: it is the transport's, whatever it
		// has moved so far.
		kind = k.Kind()
	}
	return kind
}
