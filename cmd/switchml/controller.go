package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/switchml/switchml-go/p4/bmv2"
	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/tna"
	"github.com/switchml/switchml-go/p4/v1model"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/wire"
)

func init() {
	register("controller", "the controller: programs a P4Runtime target (software switch, BMv2, Tofino) and serves the workers' job service", runController)
}

// targetP4Info returns the P4Info of the program a kind of target runs.
func targetP4Info(kind, path string) (*p4configv1.P4Info, error) {
	var text []byte
	switch {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read --p4info: %w", err)
		}
		text = b
	case kind == "softswitch":
		return p4info.Load()
	case kind == "bmv2":
		text = v1model.P4InfoText
	case kind == "tofino":
		text = tna.P4InfoText
	default:
		return nil, fmt.Errorf("bad --target-kind %q: want softswitch, bmv2 or tofino", kind)
	}
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(text, info); err != nil {
		return nil, fmt.Errorf("parse P4Info: %w", err)
	}
	return info, nil
}

func runController(ctx context.Context, args []string) error {
	fs := newFlags("controller", "--target ADDR --listen ADDR [flags]")
	var cfg controller.Config
	fs.StringVar(&cfg.Target, "target", controller.DefaultTarget, "P4Runtime address of the switch")
	fs.StringVar(&cfg.Listen, "listen", controller.DefaultListen, "gRPC address of the job service workers join through")
	fs.StringVar(&cfg.Dataplane, "dataplane", "", "switch data plane address handed to workers (default: the target's host, port 48864); for a software switch with --shards N, every shard's address, comma-separated in shard order")
	fs.IntVar(&cfg.Slots, "slots", 8192, "slots per set in the switch's pool")
	fs.Uint64Var(&cfg.DeviceID, "device-id", 1, "P4Runtime device id of the target")
	fs.Uint64Var(&cfg.ElectionID, "election-id", 1, "election id (the highest connected controller is primary)")
	fs.BoolVar(&cfg.YieldPrimary, "yield-primary", false, "stay backup when another controller takes primaryship of the switch (a standby, or a hand-over); by default the controller takes it back with a higher election id, and logs who took it")
	kind := fs.String("target-kind", "softswitch", "what runs at --target: softswitch, bmv2 or tofino; selects the P4Info and whether --device-config is needed")
	deviceConfig := fs.String("device-config", "", "compiled program pushed with the pipeline (required for bmv2 and tofino): BMv2's JSON; for tofino, bf-p4c's output directory (packed into Stratum's BfPipelineConfig) or the file `switchml p4 pack` wrote")
	p4infoPath := fs.String("p4info", "", "P4Info text file to push instead of the one that --target-kind selects")
	fs.BoolVar(&cfg.SkipPipeline, "skip-pipeline", false, "do not push the pipeline: the target already runs the SwitchML program")
	portMap := fs.String("port-map", "", "file of \"WORKER-IP PORT\" lines: the switch port that reaches each worker host (required for bmv2 and tofino)")
	auth := fs.Bool("auth", false, "the software switch checks a tag on every packet (it runs with --auth): give each job a random key, over P4Runtime to the switch and over this service's TLS to the job's ranks, which must join with --auth; the controller refuses to start if the switch disagrees")
	switchMAC := fs.String("switch-mac", "", "Ethernet address the P4 switch answers ARP for its data plane address with (bmv2, tofino; default: no ARP answers, workers need a static neighbour entry)")
	maxElements := fs.Int("max-elements", controller.DefaultSoftswitchMaxElements, "softswitch: its --max-elements, the largest packet it takes")
	fs.Float64Var(&cfg.IngressLoss, "simulate-loss-in", 0, "bmv2, tofino: fraction of contributions the switch drops on arrival (tests loss recovery)")
	fs.Float64Var(&cfg.EgressLoss, "simulate-loss-out", 0, "bmv2, tofino: fraction of result copies the switch drops on departure (tests loss recovery)")
	thrift := fs.String("bmv2-thrift", "", "bmv2: address of BMv2's Thrift runtime server, through which the pool's registers are reset (its P4Runtime server writes no registers; default: the target's host, port 9090)")
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) of the job service; with --tls-key, workers must connect over TLS")
	tlsKey := fs.String("tls-key", "", "key (PEM) of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "CA (PEM) whose certificates workers must present (mutual TLS)")
	var admins listFlag
	fs.Var(&admins, "admin", "over TLS, a certificate name (common name, DNS, URI or e-mail SAN) that sees `switchml status` whole, with lane addresses and switch placement; repeatable or comma-separated (default: certificates with the admin role, as `switchml certs` writes admin.pem)")
	targetCA := fs.String("target-tls-ca", "", "CA (PEM) of the switch's P4Runtime certificate: the link to the switch speaks TLS")
	targetCert := fs.String("target-tls-cert", "", "certificate (PEM) the controller presents to the switch (mutual TLS)")
	targetKey := fs.String("target-tls-key", "", "key (PEM) of --target-tls-cert")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", 0, "how long to wait for the target at start (default 30s)")
	fs.DurationVar(&cfg.LeaseGrace, "lease-grace", controller.DefaultLeaseGrace, "how long each rank of a job that got its slots has to open its lease (Watch); a rank that has not ends the job and frees its slots")
	fs.DurationVar(&cfg.JoinTimeout, "join-timeout", controller.DefaultJoinTimeout, "how long a job may wait for all its ranks to register; then it is released, and its waiting ranks hear which never came")
	fs.IntVar(&cfg.MaxJobsPerClient, "max-jobs-per-client", controller.DefaultMaxJobsPerClient, "jobs, gathering or running, that one client identity (its certificate's name under mutual TLS, else its IP address) may hold; -1: no limit")
	fs.IntVar(&cfg.MaxSlotsPerClient, "max-slots-per-client", 0, "slots (lanes*window, summed over its jobs) that one client identity may hold; 0: no limit beyond the pool")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	metricsAddr := fs.String("metrics", "", metricsFlagHelp)
	topology := fs.String("topology", "", "JSON file of a two-level tree of software switches to program as one, instead of --target: {\"spine\": {\"p4runtime\": ADDR, \"dataplane\": ADDR}, \"leaves\": [{\"p4runtime\": ADDR, \"dataplane\": ADDR, \"workers\": [PREFIX, ...]}, ...]}; each leaf runs `switchml switch --parent` with the spine's dataplane; BMv2 leaves (--target-kind bmv2) instead name uplink_port, port and thrift (see the docs of p4/controller.Topology)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *topology != "" {
		f, err := os.Open(*topology)
		if err != nil {
			return fmt.Errorf("read --topology: %w", err)
		}
		cfg.Topology, err = controller.ParseTopology(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--topology %s: %w", *topology, err)
		}
	}
	if err := controllerFlagsValid(cfg.Slots, *maxElements, cfg.IngressLoss, cfg.EgressLoss); err != nil {
		return err
	}
	if err := jobLimitFlagsValid(cfg.JobLimits); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if *metricsAddr != "" {
		reg, err := newMetricsRegistry()
		if err != nil {
			return err
		}
		if _, err := serveMetrics(ctx, *metricsAddr, reg, log); err != nil {
			return err
		}
		cfg.Metrics = reg
	}
	if cfg.P4Info, err = targetP4Info(*kind, *p4infoPath); err != nil {
		return err
	}
	if *kind == controller.KindTofino {
		if err := stratumP4Info(cfg.P4Info); err != nil {
			return err
		}
	}
	if cfg.Switch, err = controller.TargetFor(*kind, *maxElements); err != nil {
		return fmt.Errorf("--target-kind, --max-elements: %w", err)
	}
	cfg.Switch.Auth = *auth
	if *auth && cfg.Switch.P4() {
		return fmt.Errorf("--auth with --target-kind %s: a P4 program cannot check a MAC on packets; --auth needs the software switch (p4/README.md says how to isolate a P4 switch's fabric instead)", *kind)
	}
	switch {
	case *portMap != "":
		f, err := os.Open(*portMap)
		if err != nil {
			return fmt.Errorf("read --port-map: %w", err)
		}
		cfg.Switch.Ports, err = controller.ParsePortMap(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--port-map %s: %w", *portMap, err)
		}
	case cfg.Switch.P4():
		return fmt.Errorf("--target-kind %s needs --port-map FILE: one \"WORKER-IP PORT\" line per worker host (a P4 switch cannot learn which port reaches a worker)", *kind)
	}
	if cfg.TLS, err = secure.Server(*tlsCert, *tlsKey, *tlsClientCA); err != nil {
		return fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
	}
	if len(admins) > 0 {
		if cfg.TLS == nil || *tlsClientCA == "" {
			return fmt.Errorf("--admin names a client certificate: it needs --tls-cert, --tls-key and --tls-client-ca (without mutual TLS every caller sees the whole status)")
		}
		cfg.Admin = secure.Allow{Roles: []string{secure.RoleAdmin}, Names: admins}
	}
	if cfg.TargetTLS, err = secure.Client(*targetCA, *targetCert, *targetKey); err != nil {
		return fmt.Errorf("--target-tls-ca, --target-tls-cert, --target-tls-key: %w", err)
	}
	if *kind == controller.KindBMv2 {
		addr := *thrift
		if addr == "" {
			host, _, err := net.SplitHostPort(cfg.Target)
			if err != nil {
				return fmt.Errorf("bad --target %q: %v", cfg.Target, err)
			}
			addr = net.JoinHostPort(host, "9090")
		}
		cfg.Registers = thriftRegisters(addr)
		if cfg.Topology != nil {
			// Each switch of a tree has its own Thrift server.
			cfg.Topology.Registers = func(a string) controller.RegisterBackend { return thriftRegisters(a) }
		}
	} else if *thrift != "" {
		return fmt.Errorf("--bmv2-thrift is for --target-kind bmv2")
	}
	if *switchMAC != "" {
		if cfg.SwitchMAC, err = net.ParseMAC(*switchMAC); err != nil || len(cfg.SwitchMAC) != 6 {
			return fmt.Errorf("bad --switch-mac %q: want an Ethernet address such as 02:53:4d:4c:00:fe", *switchMAC)
		}
	}
	switch {
	case *deviceConfig != "" && *kind == controller.KindTofino:
		var tofino2 bool
		if cfg.DeviceConfig, tofino2, err = tofinoDeviceConfig(*deviceConfig); err != nil {
			return err
		}
		if tofino2 && *p4infoPath == "" {
			// The Tofino 2 program tags slots with their job: its
			// P4Info has the tag, and the controller resets no pool.
			cfg.P4Info = &p4configv1.P4Info{}
			if err := prototext.Unmarshal(tna.P4InfoTofino2Text, cfg.P4Info); err != nil {
				return fmt.Errorf("parse the Tofino 2 P4Info: %w", err)
			}
		}
	case *deviceConfig != "":
		if cfg.DeviceConfig, err = os.ReadFile(*deviceConfig); err != nil {
			return fmt.Errorf("read --device-config: %w", err)
		}
	case *kind != "softswitch" && !cfg.SkipPipeline:
		return fmt.Errorf("--target-kind %s needs --device-config (the compiled program: see p4/README.md) or --skip-pipeline", *kind)
	}
	switch {
	case *kind == controller.KindSoftswitch && len(cfg.DeviceConfig) > 0:
		return fmt.Errorf("--device-config is for bmv2 and tofino targets: the software switch runs no compiled program (is --target-kind right?)")
	case *kind == controller.KindBMv2 && len(cfg.DeviceConfig) > 0:
		// BMv2 aborts on some programs it cannot load; refuse them here.
		if err := bmv2.CheckProgram(cfg.DeviceConfig, cfg.P4Info); err != nil {
			return fmt.Errorf("--device-config %s with the P4Info: %w", *deviceConfig, err)
		}
	}
	cfg.Ready = func(addr net.Addr) {
		log.Info("controller ready", "jobs", addr.String(), "target", cfg.Target, "kind", *kind)
	}
	return controller.Run(ctx, cfg)
}

// thriftRegisters writes BMv2 registers through its Thrift server, on a
// fresh connection per call: pool resets are rare, and a connection kept
// open across hours would have to survive the switch restarting.
type thriftRegisters string

func (a thriftRegisters) RegisterWriteRange(ctx context.Context, name string, first, end int, value uint64) error {
	th, err := bmv2.DialThrift(ctx, string(a))
	if err != nil {
		return fmt.Errorf("%w (is BMv2's Thrift server at %s? see --bmv2-thrift)", err, string(a))
	}
	defer th.Close()
	return th.RegisterWriteRange(ctx, name, first, end, value)
}

// controllerFlagsValid checks the flags whose bad values would otherwise
// surface only once the switch answers, in the controller's own terms.
func controllerFlagsValid(slots, maxElements int, lossIn, lossOut float64) error {
	var errs []error
	if slots < 1 || slots > pipeline.MaxSlots {
		errs = append(errs, fmt.Errorf("--slots %d: want 1..%d (and the switch's own --slots)", slots, pipeline.MaxSlots))
	}
	if maxElements < 1 || maxElements > wire.MaxElements {
		errs = append(errs, fmt.Errorf("--max-elements %d: want 1..%d (the software switch's own --max-elements)", maxElements, wire.MaxElements))
	}
	for _, c := range []struct {
		flag string
		p    float64
	}{{"--simulate-loss-in", lossIn}, {"--simulate-loss-out", lossOut}} {
		if !(c.p >= 0 && c.p < 1) {
			errs = append(errs, fmt.Errorf("%s %g: a fraction lies in [0, 1)", c.flag, c.p))
		}
	}
	return errors.Join(errs...)
}

// jobLimitFlagsValid checks the job service's limits: a zero duration
// would be taken for the default, so it is refused rather than surprising.
func jobLimitFlagsValid(l controller.JobLimits) error {
	var errs []error
	if l.LeaseGrace <= 0 {
		errs = append(errs, fmt.Errorf("--lease-grace %v: want a positive duration", l.LeaseGrace))
	}
	if l.JoinTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--join-timeout %v: want a positive duration", l.JoinTimeout))
	}
	if l.MaxJobsPerClient == 0 || l.MaxJobsPerClient < -1 {
		errs = append(errs, fmt.Errorf("--max-jobs-per-client %d: want 1 or more, or -1 for no limit", l.MaxJobsPerClient))
	}
	if l.MaxSlotsPerClient < 0 {
		errs = append(errs, fmt.Errorf("--max-slots-per-client %d: want 0 (no limit) or more", l.MaxSlotsPerClient))
	}
	return errors.Join(errs...)
}
