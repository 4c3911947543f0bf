package controller

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/targets"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/wire"
)

// Options are the controller daemon's settings as an operator gives them
// (the flags of `switchml controller`): the embedded Config's plain fields,
// plus the kind and the files that Prepare looks up, reads and checks.
// Slots, MaxElements and the job limits are checked as given (0 is
// refused, not taken for a default). Prepare's refusals are field.Errors
// naming the fields (Named writes them as a command's flags).
type Options struct {
	// Config holds the plain settings, and the P4Info to push instead of
	// the kind's (nil: the kind's) and the Topology, as read by the
	// caller. Prepare replaces its DeviceConfig, Switch, Registers,
	// SwitchMAC, TLS, TargetTLS and Admin with what the fields below make,
	// and checks its P4Info against the kind.
	Config

	// TargetKind is the kind of switch at Target (--target-kind; "": the
	// software switch), looked up in package targets.
	TargetKind string
	// MaxElements is the software switch's --max-elements (--max-elements).
	MaxElements int
	// MaxWorkers is the software switch's --max-workers (--max-workers): no
	// job of more ranks is let in (0: DefaultSoftswitchMaxWorkers).
	MaxWorkers int
	// DeviceConfigFile is the compiled program, read as the kind reads it
	// (--device-config).
	DeviceConfigFile string
	// Ports is the switch port that reaches each worker address (see
	// ParsePortMap), required by kinds that replicate to ports; nil: none
	// given.
	Ports map[netip.Addr]uint32
	// RegisterServer is the address of the kind's register server
	// (--bmv2-thrift; default: the target's host, the server's port).
	RegisterServer string
	// SwitchMACAddr is the Ethernet address the switch answers ARP for its
	// data plane address with (--switch-mac).
	SwitchMACAddr string
	// Auth: the software switch checks a tag on every packet (--auth).
	Auth bool
	// InsecureAuthOverPlaintext lets Auth hand the job keys over links
	// without TLS that leave this host (--insecure-auth-over-plaintext):
	// the job service off loopback without TLSCert, or the switch's
	// P4Runtime off loopback without TargetTLSCA. Prepare refuses that
	// otherwise; on loopback no key leaves the host and nothing is asked.
	InsecureAuthOverPlaintext bool
	// TLSCert, TLSKey and TLSClientCA secure the job service (--tls-cert,
	// --tls-key, --tls-client-ca; see secure.Server).
	TLSCert, TLSKey, TLSClientCA string
	// Admins are the certificate names that see Status whole (--admin;
	// default: the admin role); they need mutual TLS.
	Admins []string
	// TargetTLSCA, TargetTLSCert and TargetTLSKey secure the link to the
	// switch (--target-tls-ca, --target-tls-cert, --target-tls-key).
	TargetTLSCA, TargetTLSCert, TargetTLSKey string
}

// RunFromOptions prepares the options and runs the controller (Run). Once
// it serves, it logs "controller ready" unless o.Ready is set.
func RunFromOptions(ctx context.Context, o Options) error {
	cfg, err := o.Prepare()
	if err != nil {
		return err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, w := range o.exposures(cfg) {
		cfg.Logger.Warn(field.Errorf(w.msg).Text(cfg.Names), "addr", w.addr)
	}
	if cfg.Ready == nil {
		log := cfg.Logger
		cfg.Ready = func(addr net.Addr) {
			log.Info("controller ready", "jobs", addr.String(), "target", cfg.Target, "kind", cfg.Switch.Kind)
		}
	}
	return Run(ctx, cfg)
}

// Prepare checks the options, looks the target kind up, reads the files
// they name and returns the Config to Run. Nothing is dialled.
func (o Options) Prepare() (Config, error) {
	cfg := o.Config
	cfg.ProbeDataplane = true
	var err error
	if err := errors.Join(o.fieldsValid(), jobLimitsValid(o.JobLimits)); err != nil {
		return Config{}, err
	}
	if err := o.prepareTarget(&cfg); err != nil {
		return Config{}, err
	}
	if err := o.prepareTLS(&cfg); err != nil {
		return Config{}, err
	}
	if err := o.keysInClear(cfg); err != nil {
		return Config{}, err
	}
	if o.SwitchMACAddr != "" {
		if cfg.SwitchMAC, err = net.ParseMAC(o.SwitchMACAddr); err != nil || len(cfg.SwitchMAC) != 6 {
			return Config{}, field.Errorf("{SwitchMACAddr} %q: want an Ethernet address such as 02:53:4d:4c:00:fe", o.SwitchMACAddr)
		}
	}
	return cfg, nil
}

// prepareTarget looks the kind up and makes what it needs: its P4Info,
// device config, register server and port map, and what it takes.
func (o Options) prepareTarget(cfg *Config) error {
	kind, err := targets.Lookup(o.TargetKind)
	if err != nil {
		return field.Errorf("{TargetKind} %q: %w", o.TargetKind, err)
	}
	if cfg.P4Info, err = o.p4Info(kind); err != nil {
		return err
	}
	if cfg.Switch, err = TargetFor(kind.Kind, o.MaxElements); err != nil {
		return field.Errorf("{TargetKind} %s with {MaxElements} %d: %w", kind.Kind, o.MaxElements, err)
	}
	caps, err := kind.Capabilities(o.MaxElements)
	if err != nil {
		return field.Errorf("{TargetKind} %s with {MaxElements} %d: %w", kind.Kind, o.MaxElements, err)
	}
	cfg.Switch.Auth = o.Auth
	cfg.Switch.SoftswitchMaxWorkers = o.MaxWorkers
	if cfg.Topology != nil && !caps.Tree {
		return field.Errorf("{Topology} with {TargetKind} %s: its program has no leaf role; a tree runs on %s", kind.Kind, orList(targets.KindsWhere(func(_ targets.Target, c targets.Capabilities) bool { return c.Tree })))
	}
	if o.Auth && !caps.Auth {
		return field.Errorf("{Auth} with {TargetKind} %s: a P4 program cannot check a MAC on packets; {Auth} needs the software switch (p4/README.md says how to isolate a P4 switch's fabric instead)", kind.Kind)
	}
	switch {
	case o.Ports != nil:
		cfg.Switch.Ports = o.Ports
	case caps.NeedsPortMap:
		return field.Errorf("{TargetKind} %s needs {Ports}: one \"WORKER-IP PORT\" line per worker host (a P4 switch cannot learn which port reaches a worker)", kind.Kind)
	}
	if cfg.Registers, err = o.registers(kind, cfg.Target); err != nil {
		return err
	}
	if cfg.Topology != nil && kind.Registers != nil {
		// Each switch of a tree names its own register server.
		cfg.Topology.Registers = func(addr string) p4rt.RegisterBackend { return kind.Registers.Writer(addr) }
	}
	cfg.DeviceConfig, err = o.deviceConfig(kind, cfg.P4Info)
	return err
}

// p4Info is the P4Info to push, the one given or else the kind's (for its
// device config), once the kind has checked it.
func (o Options) p4Info(kind targets.Target) (*p4configv1.P4Info, error) {
	info := o.P4Info
	if info == nil {
		var err error
		if info, err = kind.P4Info(o.DeviceConfigFile); err != nil {
			return nil, err
		}
	}
	if kind.CheckP4Info != nil {
		if err := kind.CheckP4Info(info); err != nil {
			return nil, field.Errorf("{P4Info} for {TargetKind} %s: %w", kind.Kind, err)
		}
	}
	return info, nil
}

// registers is what resets the pool's registers where the kind's
// P4Runtime server cannot: its register server, at the address given or
// on the target's host.
func (o Options) registers(kind targets.Target, target string) (p4rt.RegisterBackend, error) {
	rs := kind.Registers
	if rs == nil {
		if o.RegisterServer != "" {
			return nil, field.Errorf("{RegisterServer} is for {TargetKind} %s: %s writes its registers over P4Runtime", orList(targets.KindsWhere(func(t targets.Target, _ targets.Capabilities) bool { return t.Registers != nil })), kind.Kind)
		}
		return nil, nil
	}
	addr := o.RegisterServer
	if addr == "" {
		host, _, err := net.SplitHostPort(target)
		if err != nil {
			return nil, field.Errorf("{Target} %q: %w", target, err)
		}
		addr = net.JoinHostPort(host, strconv.Itoa(rs.DefaultPort))
	}
	return rs.Writer(addr), nil
}

// deviceConfig reads the compiled program as the kind reads it, and has
// the kind check it against the P4Info.
func (o Options) deviceConfig(kind targets.Target, info *p4configv1.P4Info) ([]byte, error) {
	switch {
	case o.DeviceConfigFile == "" && kind.DeviceConfig != nil && !o.SkipPipeline:
		return nil, field.Errorf("{TargetKind} %s needs {DeviceConfigFile} or {SkipPipeline}: {DeviceConfigFile} takes %s", kind.Kind, kind.DeviceConfigNeeds)
	case o.DeviceConfigFile == "":
		return nil, nil
	case kind.DeviceConfig == nil:
		return nil, field.Errorf("{DeviceConfigFile} is for %s targets: %s runs no compiled program (is {TargetKind} right?)", orList(targets.KindsWhere(func(t targets.Target, _ targets.Capabilities) bool { return t.DeviceConfig != nil })), kind.Summary)
	}
	b, err := kind.DeviceConfig(o.DeviceConfigFile)
	if err != nil {
		return nil, field.Errorf("{DeviceConfigFile} %s: %w", o.DeviceConfigFile, err)
	}
	if kind.CheckDeviceConfig != nil {
		if err := kind.CheckDeviceConfig(b, info); err != nil {
			return nil, field.Errorf("{DeviceConfigFile} %s with the P4Info: %w", o.DeviceConfigFile, err)
		}
	}
	return b, nil
}

// prepareTLS makes the job service's and the switch link's TLS settings.
func (o Options) prepareTLS(cfg *Config) error {
	var err error
	if cfg.TLS, err = secure.Server(o.TLSCert, o.TLSKey, o.TLSClientCA); err != nil {
		return field.Errorf("{TLSCert}, {TLSKey}, {TLSClientCA}: %w", err)
	}
	if len(o.Admins) > 0 {
		if cfg.TLS == nil || o.TLSClientCA == "" {
			return field.Errorf("{Admins} names a client certificate: it needs {TLSCert}, {TLSKey} and {TLSClientCA} (without mutual TLS every caller sees the whole status)")
		}
		cfg.Admin = secure.Allow{Roles: []string{secure.RoleAdmin}, Names: o.Admins}
	}
	if cfg.TargetTLS, err = secure.Client(o.TargetTLSCA, o.TargetTLSCert, o.TargetTLSKey); err != nil {
		return field.Errorf("{TargetTLSCA}, {TargetTLSCert}, {TargetTLSKey}: %w", err)
	}
	return nil
}

// p4RuntimeAddrs are the P4Runtime addresses the controller dials: the
// target's, or every switch's of the topology.
func p4RuntimeAddrs(cfg Config) []string {
	if cfg.Topology == nil {
		return []string{cmp.Or(cfg.Target, DefaultTarget)}
	}
	addrs := []string{cfg.Topology.Spine.P4Runtime}
	for _, l := range cfg.Topology.Leaves {
		addrs = append(addrs, l.P4Runtime)
	}
	return addrs
}

// plaintextLinks returns the controller's links that carry secrets
// without TLS and leave this host: the job service's listen address
// (listen, empty if it is on loopback or has TLS) and the switches'
// P4Runtime addresses (empty if the link has TLS).
func (o Options) plaintextLinks(cfg Config) (listen string, switches []string) {
	if l := cmp.Or(o.Listen, DefaultListen); cfg.TLS == nil && !secure.Loopback(l) {
		listen = l
	}
	if cfg.TargetTLS == nil {
		for _, a := range p4RuntimeAddrs(cfg) {
			if !secure.Loopback(a) {
				switches = append(switches, a)
			}
		}
	}
	return listen, switches
}

// keysInClear refuses --auth when the job keys would leave this host
// without TLS: to the ranks over a plaintext job service, or to the switch
// over a plaintext P4Runtime link, off loopback. Anyone capturing packets
// there could then tag forged packets. --insecure-auth-over-plaintext
// allows it.
func (o Options) keysInClear(cfg Config) error {
	if !o.Auth || o.InsecureAuthOverPlaintext {
		return nil
	}
	listen, switches := o.plaintextLinks(cfg)
	var where []string
	var args []any
	if listen != "" {
		where = append(where, "to the ranks over the job service at {Listen} %s without TLS (give it {TLSCert} and {TLSKey})")
		args = append(args, listen)
	}
	for _, a := range switches {
		where = append(where, "to the switch over P4Runtime at %s without TLS (give {TargetTLSCA})")
		args = append(args, a)
	}
	if len(where) == 0 {
		return nil
	}
	return field.Errorf("{Auth}: each job's key would travel in clear "+strings.Join(where, " and ")+": anyone who captures it can forge tagged packets; secure the link, or set {InsecureAuthOverPlaintext} if nobody else can read that network", args...)
}

// exposure is what a setting leaves open off this host, and where; msg
// names settings as {Field} (see package field).
type exposure struct{ msg, addr string }

// exposures lists the settings that leave the controller's links readable
// or its data plane forgeable from other hosts, each naming the flag that
// closes it; RunFromOptions logs them as warnings.
func (o Options) exposures(cfg Config) []exposure {
	var out []exposure
	listen, switches := o.plaintextLinks(cfg)
	if listen != "" {
		out = append(out, exposure{"controller: the job service listens without TLS on a non-loopback address: tokens and rank secrets cross the network in clear, and callers are known only by IP address; give it {TLSCert} and {TLSKey} (and {TLSClientCA})", listen})
	}
	for _, a := range switches {
		out = append(out, exposure{"controller: the link to the switch's P4Runtime service is plaintext and leaves this host: whoever sits on it can read and change what the controller writes; give {TargetTLSCA} (and {TargetTLSCert}, {TargetTLSKey})", a})
	}
	if !o.Auth && cfg.Topology == nil && cfg.Switch.Kind == KindSoftswitch {
		dps, err := DataplanesFor(o.Dataplane, cmp.Or(cfg.Target, DefaultTarget))
		if err != nil {
			return out // Run says what is wrong with them
		}
		for _, dp := range dps {
			if !dp.Addr().IsLoopback() {
				out = append(out, exposure{"controller: the data plane is reachable from other hosts and its packets are not authenticated: whoever can send from a worker's address can change the sums; run the switch, this controller and the workers with {Auth}", dp.String()})
			}
		}
	}
	return out
}

// fieldsValid checks the settings whose bad values would otherwise surface
// only once the switch answers, in the controller's own terms.
func (o Options) fieldsValid() error {
	var errs []error
	if o.Slots < 1 || o.Slots > switchjob.MaxSlots {
		errs = append(errs, field.Errorf("{Slots} %d: want 1..%d (and the switch's own slots)", o.Slots, switchjob.MaxSlots))
	}
	if o.MaxElements < 1 || o.MaxElements > wire.MaxElements {
		errs = append(errs, field.Errorf("{MaxElements} %d: want 1..%d (the software switch's own largest packet)", o.MaxElements, wire.MaxElements))
	}
	if o.MaxWorkers < 0 || o.MaxWorkers > switchjob.MaxWorkersCap {
		errs = append(errs, field.Errorf("{MaxWorkers} %d: want 1..%d (the software switch's own largest job)", o.MaxWorkers, switchjob.MaxWorkersCap))
	}
	if !(o.IngressLoss >= 0 && o.IngressLoss < 1) {
		errs = append(errs, field.Errorf("{IngressLoss} %g: a fraction lies in [0, 1)", o.IngressLoss))
	}
	if !(o.EgressLoss >= 0 && o.EgressLoss < 1) {
		errs = append(errs, field.Errorf("{EgressLoss} %g: a fraction lies in [0, 1)", o.EgressLoss))
	}
	return errors.Join(errs...)
}

// jobLimitsValid checks the job service's limits: a zero duration would
// be taken for the default, so it is refused rather than surprising.
func jobLimitsValid(l JobLimits) error {
	var errs []error
	if l.LeaseGrace <= 0 {
		errs = append(errs, field.Errorf("{LeaseGrace} %v: want a positive duration", l.LeaseGrace))
	}
	if l.JoinTimeout <= 0 {
		errs = append(errs, field.Errorf("{JoinTimeout} %v: want a positive duration", l.JoinTimeout))
	}
	if l.MaxJobsPerClient == 0 || l.MaxJobsPerClient < -1 {
		errs = append(errs, field.Errorf("{MaxJobsPerClient} %d: want 1 or more, or -1 for no limit", l.MaxJobsPerClient))
	}
	if l.MaxSlotsPerClient < -1 {
		errs = append(errs, field.Errorf("{MaxSlotsPerClient} %d: want 1 or more, 0 for half the pool, or -1 for no limit", l.MaxSlotsPerClient))
	}
	if l.MaxBytesPerClient == 0 || l.MaxBytesPerClient < -1 {
		errs = append(errs, field.Errorf("{MaxBytesPerClient} %d: want 1 or more, or -1 for no limit", l.MaxBytesPerClient))
	}
	return errors.Join(errs...)
}

// orList joins s as "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
