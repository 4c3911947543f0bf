package softswitch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DefaultPipeline is the switch memory a Server gets when its config leaves
// the pipeline zero: the reference program's 8192 slots, 256 elements per
// packet (1 KiB payloads) and 32 workers (the reference bitmap width).
var DefaultPipeline = pipeline.Config{Slots: p4info.Slots, MaxElements: 256, MaxWorkers: 32}

// ServerConfig configures a software switch.
type ServerConfig struct {
	// Names writes the switch's settings in its warnings as Config.Names.
	Names func(field string) string
	// DeviceID is the P4Runtime device id (default 1, as BMv2 uses).
	DeviceID uint64
	// Pipeline sizes the switch memory; zero fields take DefaultPipeline's.
	Pipeline pipeline.Config
	// Preconfigured commits the embedded P4Info at start, so a controller
	// may write without SetForwardingPipelineConfig first.
	Preconfigured bool
	// TLS, if set, secures the P4Runtime service (with ClientCAs set,
	// controllers must present a certificate: see secure).
	// When it verifies client certificates, only controllers may program
	// the switch: certificates with the controller role, and those Allow
	// names. Without client certificates callers have no identity, and
	// every caller may.
	TLS *tls.Config
	// Allow names the certificates (common name, DNS, URI or e-mail SAN;
	// see secure.Allow) that may program the switch besides those with
	// the controller role. It needs TLS with client CAs.
	Allow  []string
	Logger *slog.Logger
	// Parent, if valid, makes the switch a leaf of the switch whose data
	// plane is at Parent: every job's partial sums go up to it, and its
	// results come back down to the job's workers (pipeline.SetParent).
	Parent netip.AddrPort
}

// Server is the software switch: the SwitchML pipeline, the lock that
// serialises its data path with its control plane, and the P4Runtime service
// that programs it. Any packet I/O loop can drive it through Process, or
// several loops at once through Shards.
type Server struct {
	// mu is held for writing by the control plane and by Process, and
	// for reading by a Shard over a batch of packets.
	mu   sync.RWMutex
	pipe *pipeline.Pipeline
	p4rt *P4Runtime
	log  *slog.Logger
	tls  *tls.Config
	// names writes settings in warnings (ServerConfig.Names).
	names func(field string) string
}

// NewServer builds a switch with empty tables and zeroed registers.
func NewServer(cfg ServerConfig) (*Server, error) {
	pc := cfg.Pipeline
	if pc.Slots == 0 {
		pc.Slots = DefaultPipeline.Slots
	}
	if pc.MaxElements == 0 {
		pc.MaxElements = DefaultPipeline.MaxElements
	}
	if pc.MaxWorkers == 0 {
		pc.MaxWorkers = DefaultPipeline.MaxWorkers
	}
	pipe, err := pipeline.New(pc)
	if err != nil {
		return nil, fmt.Errorf("softswitch: %w", err)
	}
	pipe.SetParent(cfg.Parent)
	if cfg.DeviceID == 0 {
		cfg.DeviceID = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	allow, err := controllers(cfg.TLS, cfg.Allow)
	if err != nil {
		return nil, err
	}
	s := &Server{pipe: pipe, log: cfg.Logger, tls: cfg.TLS, names: cfg.Names}
	s.p4rt, err = NewP4Runtime(P4RuntimeConfig{
		DeviceID: cfg.DeviceID, Target: PipelineTarget(pipe), Lock: &s.mu,
		Preconfigured: cfg.Preconfigured, Logger: cfg.Logger, Allow: allow,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// controllers is who may program a switch served with tlsCfg: certificates
// with the controller role and the names given; nil (everyone) when the
// service verifies no client certificates, since callers then have no
// identity to tell apart.
func controllers(tlsCfg *tls.Config, names []string) (*secure.Allow, error) {
	if tlsCfg == nil || tlsCfg.ClientCAs == nil {
		if len(names) > 0 {
			return nil, fmt.Errorf("softswitch: P4Runtime allow list %q: needs client certificates: give TLS with client CAs", names)
		}
		return nil, nil
	}
	return &secure.Allow{Roles: []string{secure.RoleController}, Names: names}, nil
}

// PipelineConfig returns the switch memory sizes.
func (s *Server) PipelineConfig() pipeline.Config { return s.pipe.Config() }

// P4Runtime returns the switch's P4Runtime service.
func (s *Server) P4Runtime() *P4Runtime { return s.p4rt }

// Process runs one datagram from src through the pipeline; out receives the
// reply and its destinations. Safe for concurrent use with the control plane.
func (s *Server) Process(src netip.AddrPort, pkt []byte, out *pipeline.Output) {
	if answerProbe(src, pkt, out) {
		return
	}
	s.mu.Lock()
	s.pipe.Process(src, pkt, out)
	s.mu.Unlock()
}

// Shard is one of several data-plane loops serving the switch at once (see
// pipeline.Shard): the loop brackets each batch of Process calls with
// BeginBatch and EndBatch, which hold the switch's lock for reading, so
// shards run side by side and the control plane waits for a batch to end.
type Shard struct {
	mu *sync.RWMutex
	sh *pipeline.Shard
}

// Shard adds a data-plane shard. Make every shard before any runs.
func (s *Server) Shard() *Shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Shard{mu: &s.mu, sh: s.pipe.NewShard()}
}

// BeginBatch takes the switch's lock for reading, for the Process calls
// until EndBatch.
func (s *Shard) BeginBatch() { s.mu.RLock() }

// EndBatch lets the control plane in again.
func (s *Shard) EndBatch() { s.mu.RUnlock() }

// Process runs one datagram through the pipeline; call it between BeginBatch
// and EndBatch.
func (s *Shard) Process(src netip.AddrPort, pkt []byte, out *pipeline.Output) {
	if answerProbe(src, pkt, out) {
		return
	}
	s.sh.Process(src, pkt, out)
}

// answerProbe answers a controller's probe (wire.IsProbe) to its sender,
// which tells the controller that this switch serves the address it sent
// to; it reports false, touching nothing, for any other packet. The
// pipeline never sees a probe, as a P4 switch never answers one.
func answerProbe(src netip.AddrPort, pkt []byte, out *pipeline.Output) bool {
	if !wire.IsProbe(pkt) {
		return false
	}
	out.Packet = wire.AppendProbeAnswer(out.Packet[:0], pkt)
	out.Dests = append(out.Dests[:0], src)
	out.Reason = switchjob.StatReceived
	return true
}

// Counters returns the pipeline's stats counters (not affected by P4Runtime
// counter resets, which only move the P4Runtime view).
func (s *Server) Counters() [switchjob.NumStats]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pipe.Counters()
}

// Bounds of the P4Runtime service's calls, enforced by gRPC before any
// handler runs. A controller has its arbitration stream and a few reads
// and writes open at once, and sends a few hundred bytes of headers: gRPC's
// defaults (16 MiB of decoded headers a call, which a client inflates from
// a few KB by referencing its HPACK table, and windows that grow to 16 MiB
// a call) let any caller, authorised or not, make the switch hold
// gigabytes before it is asked who it is.
const (
	p4rtCallsPerConn   = 64
	p4rtHeaderBytes    = 8 << 10
	p4rtCallWindowSize = 64 << 10
	p4rtConnWindowSize = 1 << 20
)

// ServeP4Runtime serves the P4Runtime gRPC service on lis until ctx is done.
func (s *Server) ServeP4Runtime(ctx context.Context, lis net.Listener) error {
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(p4rtCallsPerConn), grpc.MaxHeaderListSize(p4rtHeaderBytes),
		grpc.InitialWindowSize(p4rtCallWindowSize), grpc.InitialConnWindowSize(p4rtConnWindowSize),
	}
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	if s.p4rt.Allowed() == nil && !secure.Loopback(lis.Addr().String()) {
		s.log.Warn(field.Errorf("p4runtime: serving without client certificates on a non-loopback address: whoever reaches it can program the switch; give it {TLS} with client CAs").Text(s.names),
			"addr", lis.Addr().String())
	}
	g := grpc.NewServer(opts...)
	s.p4rt.Register(g)
	stop := context.AfterFunc(ctx, func() {
		// Open StreamChannels never end by themselves: GracefulStop would
		// wait for them forever, so give it a moment and then cut them.
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			g.Stop()
		}
	})
	defer stop()
	err := g.Serve(lis)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// PipelineTarget adapts a pipeline to the Target the P4Runtime service
// programs. The P4Info declares pool_bitmap 32 bits wide: through P4Runtime a
// switch built for more than 32 workers shows and sets ranks 0..31 only
// (writes clear the higher ranks, which is what register resets need).
func PipelineTarget(p *pipeline.Pipeline) Target { return pipelineTarget{p} }

type pipelineTarget struct{ p *pipeline.Pipeline }

// mapErr turns the pipeline's errors into the service's.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pipeline.ErrExists):
		return fmt.Errorf("%w (%v)", ErrExists, err)
	case errors.Is(err, pipeline.ErrNotFound):
		return fmt.Errorf("%w (%v)", ErrNotFound, err)
	}
	return err // ErrInvalid and anything else: INVALID_ARGUMENT
}

func (t pipelineTarget) InsertWorker(k WorkerKey, w Worker) error {
	return mapErr(t.p.InsertWorker(pipeline.WorkerKey{Addr: k}, w))
}
func (t pipelineTarget) ModifyWorker(k WorkerKey, w Worker) error {
	return mapErr(t.p.ModifyWorker(pipeline.WorkerKey{Addr: k}, w))
}
func (t pipelineTarget) DeleteWorker(k WorkerKey) error {
	return mapErr(t.p.DeleteWorker(pipeline.WorkerKey{Addr: k}))
}
func (t pipelineTarget) Workers(yield func(WorkerKey, Worker) bool) {
	t.p.Workers(func(k pipeline.WorkerKey, w switchjob.Worker) bool { return yield(k.Addr, w) })
}
func (t pipelineTarget) InsertReply(k ReplyKey, r Reply) error {
	return mapErr(t.p.InsertReply(k, r))
}
func (t pipelineTarget) ModifyReply(k ReplyKey, r Reply) error {
	return mapErr(t.p.ModifyReply(k, r))
}
func (t pipelineTarget) DeleteReply(k ReplyKey) error {
	return mapErr(t.p.DeleteReply(k))
}
func (t pipelineTarget) Replies(yield func(ReplyKey, Reply) bool) {
	t.p.Replies(yield)
}
func (t pipelineTarget) InsertMulticastGroup(id uint16, r []Replica) error {
	return mapErr(t.p.InsertMulticastGroup(id, r))
}
func (t pipelineTarget) ModifyMulticastGroup(id uint16, r []Replica) error {
	return mapErr(t.p.ModifyMulticastGroup(id, r))
}
func (t pipelineTarget) DeleteMulticastGroup(id uint16) error {
	return mapErr(t.p.DeleteMulticastGroup(id))
}
func (t pipelineTarget) MulticastGroups(yield func(uint16, []Replica) bool) {
	t.p.MulticastGroups(yield)
}
func (t pipelineTarget) RegisterSize(name string) int {
	n, err := t.p.RegisterSize(name)
	if err != nil {
		return 0
	}
	return n
}
func (t pipelineTarget) ReadRegister(name string, index int) (int64, error) {
	v, err := t.p.ReadRegister(name, index)
	if err != nil {
		return 0, mapErr(err)
	}
	if len(v) == 0 {
		return 0, fmt.Errorf("softswitch: register %s[%d] read no value", name, index)
	}
	if name == p4info.RegisterPoolBitmap {
		return v[0] & 0xffffffff, nil
	}
	return v[0], nil
}
func (t pipelineTarget) WriteRegister(name string, index int, value int64) error {
	return mapErr(t.p.WriteRegister(name, index, []int64{value}))
}
func (t pipelineTarget) Counters(dst []uint64) []uint64 {
	c := t.p.Counters()
	return append(dst, c[:]...)
}

func (t pipelineTarget) ClearRegisters() { t.p.ClearRegisters() }
