package controller

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/internal/backoff"
	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// Default addresses of the controller daemon.
const (
	DefaultTarget = "127.0.0.1:9559"  // P4Runtime server of the switch
	DefaultListen = "127.0.0.1:50051" // job service
)

// Config configures the controller daemon.
type Config struct {
	// Target is the switch's P4Runtime address (default DefaultTarget).
	Target     string
	DeviceID   uint64 // default 1
	ElectionID uint64 // default 1
	// Listen is the job service's gRPC address (default DefaultListen).
	Listen string
	// ProbeDataplane makes a controller of a switch that answers probes
	// (the software switch) probe the data-plane addresses before it hands
	// them out, at start and whenever it reconnects to the switch; while
	// no switch answers there, registrations are refused with an error
	// that names the addresses and --dataplane. The CLI sets it (Options.
	// Prepare); a program that runs the switch beside the controller
	// knows its address and may leave it off.
	ProbeDataplane bool
	// Dataplane is the switch data plane address handed to workers; empty
	// means the target's host with port 48864. A software switch with
	// several shards (--shards) has one address per shard: list them all,
	// comma-separated, in shard order.
	Dataplane string
	// Slots is the switch's pool size per set (default 8192).
	Slots int
	// Admin is who sees the job service's Status whole over TLS
	// (ServiceConfig.Admin).
	Admin secure.Allow
	// P4Info to push (default: the embedded SwitchML P4Info) and the target's
	// compiled program (BMv2 JSON, Tofino binary; none for the software switch).
	P4Info       *p4configv1.P4Info
	DeviceConfig []byte
	// SkipPipeline leaves the target's pipeline as it is (it must already run
	// the SwitchML program); by default the controller pushes it with
	// VERIFY_AND_COMMIT, which clears the switch's tables. Either way, the
	// job entries the switch holds are read before any job is placed: jobs
	// are taken back by their claims or keep their room until removed (a
	// tree's controller removes them).
	SkipPipeline bool
	// Switch is what the switch at Target takes (default: the software
	// switch). A P4 switch needs Switch.Ports.
	Switch Target
	// SwitchMAC, if set, is installed in the program's arp_reply table for
	// the data plane address, so that workers resolve it by ARP (P4
	// programs; the software switch's host answers ARP itself).
	SwitchMAC net.HardwareAddr
	// IngressLoss and EgressLoss, if set, make a P4 program with the
	// drop_simulator table drop these fractions of contributions and of
	// result copies (loss-recovery tests on a switch without faulty links).
	IngressLoss, EgressLoss float64
	// Registers, if set, writes the registers the P4Runtime server cannot
	// (BMv2's Thrift server; see RegisterBackend).
	Registers p4rt.RegisterBackend
	// TLS, if set, secures the job service (with ClientCAs, workers must
	// present a certificate); TargetTLS secures the P4Runtime link to the
	// switch. See secure.
	TLS, TargetTLS *tls.Config
	// AdoptGrace is how long a restarted controller waits for the ranks of
	// the jobs it finds on the switch to take their leases up again
	// (default 10s); jobs not claimed in time are removed.
	AdoptGrace time.Duration
	// State is the file the controller keeps its jobs' claims in
	// (ServiceConfig.State), so that their ranks can take them back after
	// a restart. Empty: jobs end when the controller restarts.
	State string
	// ConnectTimeout bounds the wait for the switch at start (default 30s).
	ConnectTimeout time.Duration
	Logger         *slog.Logger
	// Names writes the controller's settings in its warnings and refusals
	// as the operator's program names them (the CLI: its flags; see
	// package field); nil: their Go names.
	Names func(field string) string
	// Ready, if set, is called with the job service's address once it serves.
	Ready func(addr net.Addr)
	// Metrics, if set, receives the job service's collector (see
	// JobService.Collector).
	Metrics prometheus.Registerer
	// Topology, if set, makes the controller program a two-level tree of
	// software switches instead of the one at Target (see Topology); Target
	// and Dataplane are then unused.
	Topology *Topology
	// YieldPrimary leaves primaryship to another controller that takes it
	// (ClientConfig.YieldPrimary): jobs then fail saying who took it. By
	// default the controller takes it back at once.
	YieldPrimary bool

	// AllowOpenJobs lets a job service that listens beyond loopback take
	// jobs without a token (--allow-open-jobs), whose missing ranks any
	// client that reaches it may then take. By default such a service
	// refuses them; on loopback they are taken, and logged as open.
	AllowOpenJobs bool

	// control follows primaryship on the switches (set by Run).
	control *control

	// AllowLaneAddressMismatch takes registrations whose lane addresses
	// are not on the caller's host (ServiceConfig.AllowLaneAddressMismatch).
	AllowLaneAddressMismatch bool

	// JobLimits bound what jobs and clients can make the job service hold
	// (zero fields: the defaults).
	JobLimits
}

// Run connects to the switch, becomes its primary controller, pushes the
// pipeline and serves the job service until ctx is done. When the switch
// connection is lost (the switch restarted, the link broke), the live jobs
// are aborted with that cause and Run reconnects with back-off, programs
// the switch afresh and removes what it kept of the aborted jobs;
// registrations meanwhile wait for that, within their deadlines.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	cfg.control = newControl()
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(cfg.control); err != nil {
			return fmt.Errorf("controller: metrics: %w", err)
		}
		defer cfg.Metrics.Unregister(cfg.control)
	}
	if cfg.Topology != nil {
		if cfg.Switch.Auth {
			return field.Errorf("{Auth} with {Topology}: the hop from a leaf to its parent carries no tags; run the tree without {Auth}")
		}
		if cfg.State != "" {
			return field.Errorf("{State} with {Topology}: a tree's jobs are not taken back after a restart; leave {State} out")
		}
		return runTree(ctx, cfg)
	}
	var opened *openedState
	if cfg.State == "" {
		cfg.Logger.Info("controller: no State file: jobs running on the switch end if this controller restarts")
	} else {
		// Before the switch: a second controller on the file must not
		// touch the first one's switch either.
		f, claims, err := openState(cfg.State, cfg.Target)
		if err != nil {
			return err
		}
		defer f.close()
		opened = &openedState{f, claims}
	}
	shards, err := DataplanesFor(cfg.Dataplane, cfg.Target)
	if err != nil {
		return err
	}
	dp := shards[0]
	cl, err := connect(ctx, cfg, dp)
	if err != nil {
		return err
	}
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	if cfg.ProbeDataplane && cfg.Switch.capabilities().AnswersProbe {
		// Workers handed an address where no switch answers would wait
		// for results that cannot come; check it before serving.
		cfg.Switch.dataplane = &dataplaneCheck{}
		cfg.Switch.dataplane.probe(ctx, cfg, shards)
	}
	svc, err := NewJobService(controlled{cl}, ServiceConfig{Dataplane: dp, Shards: shards, Slots: cfg.Slots, Target: cfg.Switch, Logger: cfg.Logger, Names: cfg.Names, Admin: cfg.Admin, JobLimits: cfg.JobLimits,
		RefuseOpenJobs: cfg.refuseOpenJobs(), AllowLaneAddressMismatch: cfg.AllowLaneAddressMismatch, State: cfg.State, StateTarget: cfg.Target, opened: opened})
	if err != nil {
		return err
	}
	defer svc.stop()
	cfg.control.attach(svc)
	unregister, err := registerMetrics(cfg, svc)
	if err != nil {
		return err
	}
	defer unregister()
	// Whatever the switch holds of jobs is read before the job service
	// places anything, whether the pipeline was pushed (nothing is left
	// then), found running (an earlier controller's jobs run on) or left
	// as it was (--skip-pipeline: its tables are anyone's): a job placed
	// without knowing them would meet their entries or their ranks'
	// packets. Jobs are kept and taken back by their claims, or their room
	// stays taken until they are removed; entries of no job go at once.
	if err := svc.Adopt(ctx, tidying{cl}, cfg.AdoptGrace); err != nil {
		return err
	}
	lis, served, stop, err := listenJobs(cfg, svc)
	if err != nil {
		return err
	}
	defer stop()
	cfg.Logger.Info("controller: serving", "jobs", lis.Addr().String(), "target", cfg.Target, "dataplane", dp.String(), "shards", len(shards), "slots", cfg.Slots)
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr())
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			served <- err // for the deferred stop
			return fmt.Errorf("controller: job service: %w", err)
		case <-cl.Done():
		}
		var back bool
		if cl, back, err = reconnect(ctx, cfg, dp, svc, cl); !back {
			return err
		}
		cfg.Logger.Info("controller: switch programmed again", "target", cfg.Target)
		if cfg.Switch.dataplane != nil {
			// The switch may have come back on another data-plane address.
			cfg.Switch.dataplane.probe(ctx, cfg, shards)
		}
	}
}

// reconnect ends the live jobs after the switch was lost (it restarted or
// the link to it broke: whatever it aggregated is gone or unknowable),
// then dials it again with back-off and programs it afresh. Registrations
// that waited meanwhile are placed only once the switch holds nothing of
// the jobs that ended (clearEnded). back is false when ctx ended first.
func reconnect(ctx context.Context, cfg Config, dp netip.AddrPort, svc *JobService, cl *p4rt.Client) (_ *p4rt.Client, back bool, err error) {
	lost := cl.StreamError()
	cfg.Logger.Warn("controller: lost the switch; reconnecting", "target", cfg.Target, "err", lost)
	svc.SwitchLost(fmt.Sprintf("aborted: the controller lost the switch at %s (%v); what it held for the job is gone: join again", cfg.Target, lost))
	cl.Close()
	if back, err := redial(ctx, cfg.Logger, "switch", func() (err error) {
		if cl, err = connect(ctx, cfg, dp); err != nil {
			return err
		}
		if err = clearEnded(ctx, cfg, cl); err != nil {
			cl.Close()
		}
		return err
	}, "target", cfg.Target); !back {
		return nil, false, err
	}
	svc.SwitchBack(controlled{cl})
	return cl, true, nil
}

// clearEnded removes the job entries a switch the controller reconnected
// to still holds. Every job the controller had there ended when it lost
// the switch, and their ranks were told so; but a switch that kept its
// tables (the link broke, not the switch; or its pipeline is left as it
// was) still holds their partitions, multicast groups and workers entries.
// A job placed beside them would collide with their entries, or take
// their slots while an ended rank's packets, still arriving from an
// address the switch knows, are summed into its results.
func clearEnded(ctx context.Context, cfg Config, cl *p4rt.Client) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := cl.ClearJobs(ctx); err != nil {
		return fmt.Errorf("controller: switch at %s: removing the entries of the jobs that ended when the controller lost it: %w", cfg.Target, err)
	}
	return nil
}

// tidying reads the jobs a switch holds for Adopt and removes at once the
// entries none of them owns (replies, multicast groups and keys left
// without their workers entries), which Adopt would not see: a job placed
// beside them would meet them.
type tidying struct{ *p4rt.Client }

func (t tidying) ReadPlacements(ctx context.Context) ([]switchjob.Placement, error) {
	found, err := t.Client.ReadPlacements(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.ClearJobsExcept(ctx, found); err != nil {
		return nil, fmt.Errorf("removing the entries of no job: %w", err)
	}
	return found, nil
}

// refuseOpenJobs reports whether the job service refuses jobs without a
// token: it listens beyond loopback, and AllowOpenJobs is not set (which
// is then warned about).
func (cfg Config) refuseOpenJobs() bool {
	if secure.Loopback(cfg.Listen) {
		return false
	}
	if cfg.AllowOpenJobs {
		cfg.Logger.Warn("controller: the job service listens beyond loopback and takes jobs without a token (AllowOpenJobs): any client that reaches it may take their missing ranks", "listen", cfg.Listen)
		return false
	}
	return true
}

// withDefaults fills in what cfg leaves zero and checks that a P4 switch
// has its port map.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Target == "" {
		cfg.Target = DefaultTarget
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Slots == 0 {
		cfg.Slots = p4info.Slots
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	if cfg.AdoptGrace == 0 {
		cfg.AdoptGrace = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Switch.Kind == "" {
		t, err := TargetFor(KindSoftswitch, 0)
		if err != nil {
			return cfg, err
		}
		cfg.Switch = t
	}
	if cfg.Switch.P4() && len(cfg.Switch.Ports) == 0 {
		return cfg, field.Errorf("{Ports}: a %s switch needs a port map: which switch port reaches each worker address", cfg.Switch.Kind)
	}
	return cfg, nil
}

// registerMetrics hands the job service's collector to cfg.Metrics, if
// set; unregister takes it back.
func registerMetrics(cfg Config, svc *JobService) (unregister func(), err error) {
	if cfg.Metrics == nil {
		return func() {}, nil
	}
	col := svc.Collector()
	if err := cfg.Metrics.Register(col); err != nil {
		return nil, fmt.Errorf("controller: metrics: %w", err)
	}
	return func() { cfg.Metrics.Unregister(col) }, nil
}

// redial calls dial with back-off until it succeeds (back), ctx ends (not
// back, no error) or another controller is primary (not back, that error).
// what names the switch, or the tree, in the logs, with attrs.
func redial(ctx context.Context, log *slog.Logger, what string, dial func() error, attrs ...any) (back bool, err error) {
	for wait := backoff.New(100*time.Millisecond, 5*time.Second); ; {
		err := dial()
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if errors.Is(err, p4rt.ErrNotPrimary) {
			return false, err
		}
		retryIn := wait.Next()
		log.Warn("controller: "+what+" not back yet", append(attrs, "err", err, "retry_in", retryIn)...)
		if backoff.Sleep(ctx, retryIn) != nil {
			return false, nil
		}
	}
}

// Bounds of every job service call and connection, enforced by gRPC before
// any handler runs: maxRequestBytes bounds a request, maxCallsPerConn the
// calls one connection has open at once, maxHeaderListBytes the decoded
// headers of a call, and callWindowBytes what a call's client may send
// beyond what the service has read.
const (
	maxRequestBytes = 2 << 20
	maxCallsPerConn = 128
	// Our clients send about 420 bytes of headers as HTTP/2 counts them
	// (the method, the authority, the content type, the deadline and the
	// user agent, 32 bytes a field more than their text; TLS adds none,
	// and tokens travel in requests): 8 KiB, gRPC's coming default,
	// leaves room for a proxy's. gRPC's present default (16 MiB)
	// let one call of a few KB, referencing a header of the connection's
	// HPACK table thousands of times, decode into megabytes held while the
	// call is open. A call whose headers decode into more is reset before
	// it reaches the service, without being counted against its client.
	maxHeaderListBytes = 8 << 10
	// gRPC's smallest window, fixed: its default grows a busy connection's
	// windows up to 16 MiB a call, which a client that sends without
	// waiting for answers fills on every call it holds open (a lease reads
	// one request, and no more). 64 KiB a call still carries a 1 MiB
	// broadcast at 64 KiB a round trip.
	callWindowBytes = 64 << 10
	connWindowBytes = 1 << 20
)

// jobServerOptions bound the job service's calls and connections (see the
// constants above), and count each call against its client identity's
// bound for its kind before its request is read (JobService.tapCall).
func jobServerOptions(svc *JobService) []grpc.ServerOption {
	// No call's request is larger than a broadcast of 1 MiB and its
	// fields: a larger one is refused before it is read whole.
	// A worker's session has a few calls open at once (its registration,
	// lease, barrier or broadcast): a connection with more waits for room,
	// so that one connection cannot make the service read and hold
	// thousands of requests at once.
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRequestBytes), grpc.MaxConcurrentStreams(maxCallsPerConn),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.InitialWindowSize(callWindowBytes), grpc.InitialConnWindowSize(connWindowBytes),
		grpc.InTapHandle(svc.tapCall),
		// Refusals name the controller's settings as its operator's
		// program does (ServiceConfig.Names).
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			return resp, svc.named(err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return svc.named(h(srv, ss))
		}),
	}
}

// listenJobs serves the job service on cfg.Listen; stop ends it. served
// reports the server's end (put back what you take from it, for stop).
func listenJobs(cfg Config, svc *JobService) (lis net.Listener, served chan error, stop func(), err error) {
	lis, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("controller: listen %s: %w", cfg.Listen, err)
	}
	if limit := cfg.JobLimits.withDefaults().MaxConnsPerHost; limit > 0 {
		lis = newHostConns(lis, limit, cfg.Logger)
	}
	opts := jobServerOptions(svc)
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	g := grpc.NewServer(opts...)
	jobpb.RegisterJobServiceServer(g, svc)
	served = make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	stop = func() {
		// Stopping the server ends every lease at once; the service must
		// not take the first to end for a lost rank and abort its job
		// toward the others (the data plane does not need the controller).
		svc.stop()
		g.Stop() // Register calls block by design: do not wait for them
		<-served
	}
	return lis, served, stop, nil
}

// hostConns is a listener that keeps at most max connections open from
// one IP address at once: one more is closed as it is accepted, before
// its TLS handshake or a byte of HTTP/2 is read.
type hostConns struct {
	net.Listener
	max int
	log *slog.Logger

	mu   sync.Mutex
	open map[netip.Addr]int
	full map[netip.Addr]bool // refused since it last had none open (logged)
}

func newHostConns(lis net.Listener, max int, log *slog.Logger) *hostConns {
	return &hostConns{Listener: lis, max: max, log: log, open: map[netip.Addr]int{}, full: map[netip.Addr]bool{}}
}

// Accept returns the next connection from a host within its bound.
func (l *hostConns) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := netip.Addr{}
		if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			host = ta.AddrPort().Addr().Unmap()
		}
		l.mu.Lock()
		if l.open[host] >= l.max {
			first := !l.full[host]
			l.full[host] = true
			l.mu.Unlock()
			c.Close()
			if first {
				// Once while the host has connections open: a storm of
				// connections must not become a storm of log lines.
				l.log.Warn("controller: refusing connections to the job service from a host that has its limit open (MaxConnsPerHost)", "host", host.String(), "limit", l.max)
			}
			continue
		}
		l.open[host]++
		l.mu.Unlock()
		return &hostConn{Conn: c, release: sync.OnceFunc(func() { l.release(host) })}, nil
	}
}

func (l *hostConns) release(host netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[host]--; l.open[host] <= 0 {
		delete(l.open, host)
		delete(l.full, host)
	}
}

// hostConn is a connection hostConns counts until it is closed.
type hostConn struct {
	net.Conn
	release func()
}

func (c *hostConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// connect dials the switch, becomes its primary controller, pushes the
// pipeline and writes the program's own entries.
func connect(ctx context.Context, cfg Config, dp netip.AddrPort) (*p4rt.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	cc := p4rt.ClientConfig{Target: cfg.Target, DeviceID: cfg.DeviceID, ElectionID: cfg.ElectionID, Logger: cfg.Logger, YieldPrimary: cfg.YieldPrimary}
	if cfg.control != nil {
		cc.OnControl = cfg.control.watch(cfg.Target)
	}
	if cfg.TargetTLS != nil {
		cc.DialOptions = append(cc.DialOptions, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TargetTLS)))
	}
	cl, err := p4rt.Dial(dctx, cc)
	cancel()
	if err != nil {
		return nil, err
	}
	if err := program(ctx, cl, cfg, dp); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// program makes the switch run the configured pipeline. A switch that
// already runs it (same cookie: an earlier controller pushed it) keeps its
// tables, as does one whose pipeline is left as it was (SkipPipeline):
// their jobs are read back after (Adopt, or ClearJobs).
func program(ctx context.Context, cl *p4rt.Client, cfg Config, dp netip.AddrPort) (err error) {
	if !cl.Primary() {
		why := cl.ControlLost()
		if why == "" {
			why = fmt.Sprintf("another controller with a higher election id than %d programs %s", max(cfg.ElectionID, 1), cfg.Target)
		}
		return fmt.Errorf("controller: switch at %s: %w: %s", cfg.Target, p4rt.ErrNotPrimary, why)
	}
	if !cfg.SkipPipeline {
		info := cfg.P4Info
		if info == nil {
			if info, err = p4info.Load(); err != nil {
				return err
			}
		}
		cookie, err := pipelineCookie(info, cfg.DeviceConfig)
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
		if running, err := cl.Pipeline(pctx); err == nil && running.GetCookie().GetCookie() == cookie {
			if err := cl.UseP4Info(info); err != nil {
				return err
			}
			cl.KeepResetting()
		} else {
			err := cl.SetPipeline(pctx, info, cfg.DeviceConfig, cookie)
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("%w (does %s run a %s switch, and is the device config the program compiled for it?)", err, cfg.Target, cfg.Switch.Kind)
			}
			if err != nil {
				return err
			}
		}
	}
	if cfg.SkipPipeline {
		if cfg.P4Info != nil {
			if err := cl.UseP4Info(cfg.P4Info); err != nil {
				return err
			}
		}
		cl.KeepResetting() // the pipeline and its registers are someone else's
	}
	if cfg.Registers != nil {
		cl.SetRegisterBackend(cfg.Registers)
	}
	if err := checkSlots(ctx, cl, cfg); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := checkAuth(actx, cl, cfg.Switch, cfg.Target); err != nil {
		return err
	}
	return setupProgram(ctx, cl, cfg, dp)
}

// pipelineCookie names a pipeline (P4Info and device config), so that a
// restarted controller can tell the switch already runs it.
func pipelineCookie(info *p4configv1.P4Info, deviceConfig []byte) (uint64, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(info)
	if err != nil {
		return 0, fmt.Errorf("controller: P4Info: %w", err)
	}
	h := sha256.New()
	h.Write(b)
	h.Write(deviceConfig)
	return binary.BigEndian.Uint64(h.Sum(nil)) | 1, nil
}

// checkSlots makes sure the switch has the slots the controller hands out:
// a partition past the switch's pool would fail every job placed there. The
// software switch answers register reads, so its last slot of the second set
// is read; P4 switches hold the P4Info's 8192 (their P4Runtime servers read
// no registers, and the P4Info fixes the size).
func checkSlots(ctx context.Context, cl *p4rt.Client, cfg Config) error {
	if cfg.Switch.P4() {
		if cfg.Slots > 8192 {
			return field.Errorf("{Slots} %d: the %s program has 8192 slots per set", cfg.Slots, cfg.Switch.Kind)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if _, err := cl.ReadRegister(ctx, cl.IDs().RegisterPoolCount, 2*cfg.Slots-1, 1); err != nil {
		return field.Errorf("{Slots} %d: the switch at %s does not hold them (give both the same slots): reading slot %d of set 1: %v", cfg.Slots, cfg.Target, cfg.Slots-1, err)
	}
	return nil
}

// setupProgram writes the program-specific entries the configuration asks
// for, each bounded by the connect timeout.
func setupProgram(ctx context.Context, cl *p4rt.Client, cfg Config, dp netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if len(cfg.SwitchMAC) > 0 {
		if len(cfg.SwitchMAC) != 6 {
			return fmt.Errorf("controller: switch MAC %v is not a 6-byte Ethernet address", cfg.SwitchMAC)
		}
		if err := cl.InstallARPReply(ctx, dp.Addr(), [6]byte(cfg.SwitchMAC)); err != nil {
			return err
		}
	}
	if cfg.IngressLoss != 0 || cfg.EgressLoss != 0 {
		if err := cl.SetSimulatedLoss(ctx, cfg.IngressLoss, cfg.EgressLoss); err != nil {
			return err
		}
		cfg.Logger.Warn("controller: the switch drops packets on purpose", "ingress", cfg.IngressLoss, "egress", cfg.EgressLoss)
	}
	return nil
}

// DataplanesFor returns the data plane addresses of a switch's shards:
// explicit split at commas (one address each), or DataplaneFor's one
// address when explicit has none.
func DataplanesFor(explicit, target string) ([]netip.AddrPort, error) {
	if !strings.Contains(explicit, ",") {
		dp, err := DataplaneFor(explicit, target)
		if err != nil {
			return nil, err
		}
		return []netip.AddrPort{dp}, nil
	}
	var out []netip.AddrPort
	for _, a := range strings.Split(explicit, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("controller: data plane addresses %q: an empty entry; give ip:port per shard, comma-separated", explicit)
		}
		dp, err := DataplaneFor(a, target)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, dp) {
			return nil, fmt.Errorf("controller: data plane addresses %q: %v twice; give each shard's address once", explicit, dp)
		}
		out = append(out, dp)
	}
	return out, nil
}

// DataplaneFor returns the switch data plane address to hand to workers: the
// explicit address if given, else the P4Runtime target's host with the
// SwitchML UDP port. Host names are resolved, since workers need an IP.
func DataplaneFor(explicit, target string) (netip.AddrPort, error) {
	addr := explicit
	if addr == "" {
		host, _, err := net.SplitHostPort(target)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("controller: target %q: %v", target, err)
		}
		addr = net.JoinHostPort(host, strconv.Itoa(wire.UDPPort))
	}
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("controller: data plane address %q: %v", addr, err)
	}
	ap := ua.AddrPort()
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if ap.Addr().IsUnspecified() {
		return netip.AddrPort{}, fmt.Errorf("controller: data plane address %q is unspecified; give the address workers send to", addr)
	}
	return ap, nil
}
