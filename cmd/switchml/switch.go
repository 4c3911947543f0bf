package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/wire"
)

func init() {
	register("switch", "the software switch: the SwitchML pipeline on UDP, programmed over P4Runtime", runSwitch)
}

// switchFlags are the switch's flags by the softswitch.Config field each
// sets, as its refusals (field.Error) name them.
var switchFlags = map[string]string{
	"Dataplane": "dataplane", "Transport": "transport", "Shards": "shards", "Parent": "parent", "P4Runtime": "p4rt",
	"DeviceID": "device-id", "Auth": "auth", "P4RuntimeAllow": "p4rt-allow",
	"TLS": "tls-cert, --tls-key and --tls-client-ca", // three flags make Config.TLS
}

func runSwitch(ctx context.Context, args []string) error {
	fs := newFlags("switch", "[--dataplane ADDR] [--p4rt ADDR] [flags]")
	var cfg softswitch.Config
	pc := &cfg.Pipeline
	fs.StringVar(&cfg.Dataplane, "dataplane", "127.0.0.1:48864", "UDP address of the data plane (workers send here); with --shards N, shard k listens at port+k, or give N addresses comma-separated")
	fs.StringVar(&cfg.Transport, "transport", transport.UDP, `how the data plane moves packets: "udp" (kernel sockets), "afxdp" (AF_XDP sockets on the --dataplane address's interface, bypassing the kernel's stack; falls back to UDP, saying why, where it cannot; Linux, root) or "shm" (UDP sockets plus shared-memory inboxes that workers on this host started with --transport shm use instead of the kernel; Linux)`)
	fs.IntVar(&cfg.Shards, "shards", 1, "data-plane shards: loops on cores of their own, each with its own UDP port, serving one pipeline (give the controller every shard's address)")
	fs.StringVar(&cfg.Parent, "parent", "", "make this switch a leaf of the switch whose data plane is at ADDR (ip:port): jobs' partial sums go up to it and its results come down; the controller's --topology programs the tree")
	fs.StringVar(&cfg.P4Runtime, "p4rt", "127.0.0.1:9559", "TCP address of the P4Runtime gRPC service")
	fs.IntVar(&pc.Slots, "slots", softswitch.DefaultPipeline.Slots, "aggregation slots per set in the pool")
	fs.IntVar(&pc.MaxElements, "max-elements", 1024, "largest number of values per packet (up to 2048); the pool holds slots x 2 x this many int32")
	fs.IntVar(&pc.MaxWorkers, "max-workers", 256, "largest number of workers in a job")
	fs.Uint64Var(&cfg.DeviceID, "device-id", 1, "P4Runtime device id")
	fs.BoolVar(&cfg.Auth, "auth", false, "check a tag (a MAC under the job's key, which the controller started with --auth hands over P4Runtime) on every packet, and drop packets whose tag is wrong or missing (counted as drop_bad_tag): local processes that forge a worker's source address cannot change a sum")
	fs.Float64Var(&cfg.Faults.Drop, "drop", 0, "probability of dropping each packet the switch sends (loss simulator)")
	fs.Float64Var(&cfg.Faults.Duplicate, "duplicate", 0, "probability of sending a packet twice")
	fs.Float64Var(&cfg.Faults.Reorder, "reorder", 0, "probability of holding a packet back behind later ones")
	fs.Uint64Var(&cfg.Faults.Seed, "seed", 1, "seed of the fault simulator")
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) of the P4Runtime service; with --tls-key, the service speaks TLS")
	tlsKey := fs.String("tls-key", "", "key (PEM) of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "CA (PEM) whose certificates controllers must present (mutual TLS); only certificates with the controller role (switchml certs) or named by --p4rt-allow may then program the switch")
	fs.Var((*listFlag)(&cfg.P4RuntimeAllow), "p4rt-allow", "certificate `NAME` (common name, DNS, URI or e-mail SAN) that may program the switch over P4Runtime besides those with the controller role; repeatable or comma-separated; needs --tls-client-ca")
	statsEvery := fs.Duration("stats", 0, "log the pipeline counters at this interval (0: only at exit)")
	metricsAddr := fs.String("metrics", "", metricsFlagHelp)
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	stopProfile, err := parseFlagsProfiled(fs, args)
	if err != nil {
		return err
	}
	defer stopProfile()
	if cfg.Logger, err = newLogger(*logLevel); err != nil {
		return err
	}
	if err := switchFlagsValid(cfg); err != nil {
		return err
	}
	if cfg.TLS, err = secure.Server(*tlsCert, *tlsKey, *tlsClientCA); err != nil {
		return fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
	}
	log := cfg.Logger
	cfg.Names = field.Flags(switchFlags) // in its warnings too
	sw, err := softswitch.Listen(cfg)
	if err != nil {
		return field.Named(err, cfg.Names)
	}
	log.Info("software switch up", "dataplane", strings.Join(sw.DataplaneAddrs(), ","), "shards", cfg.Shards, "transport", sw.Transport(), "p4runtime", sw.P4RuntimeAddr(),
		"slots", pc.Slots, "max_elements", pc.MaxElements, "parent", cfg.Parent, "auth", cfg.Auth, "drop", cfg.Faults.Drop, "duplicate", cfg.Faults.Duplicate, "reorder", cfg.Faults.Reorder)

	if !cfg.Auth && cfg.Parent == "" {
		for _, a := range sw.DataplaneAddrs() {
			if !secure.Loopback(a) {
				log.Warn("switch: the data plane is reachable from other hosts and its packets are not authenticated: whoever can send from a worker's address can change the sums; run the switch, the controller and the workers with --auth", "addr", a)
			}
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *metricsAddr != "" {
		reg, err := newMetricsRegistry(sw.Collector())
		if err != nil {
			return err
		}
		if _, err := serveMetrics(ctx, *metricsAddr, reg, log); err != nil {
			return err
		}
	}
	if *statsEvery > 0 {
		go sw.LogCounters(ctx, log, *statsEvery)
	}
	err = sw.Serve(ctx)
	log.Info("software switch stopped", sw.Summary()...)
	return err
}

// switchFlagsValid checks the shard, pool and fault flags, naming them,
// before the pipeline would refuse the same values in its own terms.
func switchFlagsValid(cfg softswitch.Config) error {
	var errs []error
	pc, f := cfg.Pipeline, cfg.Faults
	for _, c := range []struct {
		flag     string
		v, limit int
	}{{"--slots", pc.Slots, switchjob.MaxSlots}, {"--max-elements", pc.MaxElements, wire.MaxElements}, {"--max-workers", pc.MaxWorkers, switchjob.MaxWorkersCap}, {"--shards", cfg.Shards, softswitch.MaxShards}} {
		if c.v < 1 || c.v > c.limit {
			errs = append(errs, fmt.Errorf("%s %d: want 1..%d", c.flag, c.v, c.limit))
		}
	}
	for _, c := range []struct {
		flag string
		p    float64
	}{{"--drop", f.Drop}, {"--duplicate", f.Duplicate}, {"--reorder", f.Reorder}} {
		if !(c.p >= 0 && c.p <= 1) {
			errs = append(errs, fmt.Errorf("%s %g: a probability lies in [0, 1]", c.flag, c.p))
		}
	}
	return errors.Join(errs...)
}
