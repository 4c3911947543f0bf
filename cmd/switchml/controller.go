package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"

	"github.com/switchml/switchml-go/field"
	_ "github.com/switchml/switchml-go/p4/bmv2" // registers the bmv2 target kind
	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/targets"
)

func init() {
	register("controller", "the controller: programs a P4Runtime target (software switch, BMv2, Tofino) and serves the workers' job service", runController)
}

func runController(ctx context.Context, args []string) error {
	fs := newFlags("controller", "--target ADDR --listen ADDR [flags]")
	p4 := strings.Join(targets.KindsWhere(func(_ targets.Target, c targets.Capabilities) bool { return c.NeedsPortMap }), ", ")
	var o controller.Options
	var files controllerFiles
	fs.StringVar(&o.Target, "target", controller.DefaultTarget, "P4Runtime address of the switch")
	fs.StringVar(&o.Listen, "listen", controller.DefaultListen, "gRPC address of the job service workers join through")
	fs.StringVar(&o.State, "state", "", "`FILE` in which the controller keeps what proves each running job's ranks (hashes of their secrets and of the job's token; mode 0600, in a folder others cannot write), so that after a restart it hands the jobs it finds on the switch back to their ranks alone; one controller per file: it locks FILE.lock while it runs, and a second controller on the file is refused; without it, jobs end when the controller restarts")
	fs.StringVar(&o.Dataplane, "dataplane", "", "switch data plane address handed to workers (default: the target's host, port 48864); for a software switch with --shards N, every shard's address, comma-separated in shard order")
	fs.IntVar(&o.Slots, "slots", 8192, "slots per set in the switch's pool")
	fs.Uint64Var(&o.DeviceID, "device-id", 1, "P4Runtime device id of the target")
	fs.Uint64Var(&o.ElectionID, "election-id", 1, "election id (the highest connected controller is primary)")
	fs.BoolVar(&o.YieldPrimary, "yield-primary", false, "stay backup when another controller takes primaryship of the switch (a standby, or a hand-over); by default the controller takes it back with a higher election id, and logs who took it")
	fs.StringVar(&o.TargetKind, "target-kind", targets.Softswitch, "what runs at --target: "+targets.Help()+"; selects the P4Info, and whether --device-config and --port-map are needed")
	fs.StringVar(&o.DeviceConfigFile, "device-config", "", "compiled program pushed with the pipeline, required for the kinds that run one: "+targets.DeviceConfigHelp())
	fs.StringVar(&files.p4info, "p4info", "", "P4Info text file to push instead of the one that --target-kind selects")
	fs.BoolVar(&o.SkipPipeline, "skip-pipeline", false, "do not push the pipeline: the target already runs the SwitchML program")
	fs.StringVar(&files.portMap, "port-map", "", "file of \"WORKER-IP PORT\" lines: the switch port that reaches each worker host (required for "+p4+")")
	fs.BoolVar(&o.Auth, "auth", false, "the software switch checks a tag on every packet (it runs with --auth): give each job a random key, over P4Runtime to the switch and over this service's TLS to the job's ranks, which must join with --auth; the controller refuses to start if the switch disagrees")
	fs.BoolVar(&o.InsecureAuthOverPlaintext, "insecure-auth-over-plaintext", false, "with --auth, hand the job keys over links without TLS that leave this host (the job service without --tls-cert, the switch without --target-tls-ca): anyone who reads that network can forge tagged packets; refused without this flag, not needed on loopback")
	fs.StringVar(&o.SwitchMACAddr, "switch-mac", "", "Ethernet address the P4 switch answers ARP for its data plane address with ("+p4+"; default: no ARP answers, workers need a static neighbour entry)")
	fs.IntVar(&o.MaxElements, "max-elements", controller.DefaultSoftswitchMaxElements, "softswitch: its --max-elements, the largest packet it takes")
	fs.IntVar(&o.MaxWorkers, "max-workers", controller.DefaultSoftswitchMaxWorkers, "softswitch: its --max-workers, the largest job it takes; registrations of larger jobs are refused")
	fs.Float64Var(&o.IngressLoss, "simulate-loss-in", 0, p4+": fraction of contributions the switch drops on arrival (tests loss recovery)")
	fs.Float64Var(&o.EgressLoss, "simulate-loss-out", 0, p4+": fraction of result copies the switch drops on departure (tests loss recovery)")
	fs.StringVar(&o.RegisterServer, "bmv2-thrift", "", "bmv2: address of BMv2's Thrift runtime server, through which the pool's registers are reset (its P4Runtime server writes no registers; default: the target's host, port 9090)")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "certificate (PEM) of the job service; with --tls-key, workers must connect over TLS")
	fs.StringVar(&o.TLSKey, "tls-key", "", "key (PEM) of --tls-cert")
	fs.StringVar(&o.TLSClientCA, "tls-client-ca", "", "CA (PEM) whose certificates workers must present (mutual TLS)")
	fs.Var((*listFlag)(&o.Admins), "admin", "over TLS, a certificate `NAME` (common name, DNS, URI or e-mail SAN) that sees the whole of \"switchml status\", with lane addresses and switch placement; repeatable or comma-separated (default: certificates with the admin role, as \"switchml certs\" writes admin.pem)")
	fs.StringVar(&o.TargetTLSCA, "target-tls-ca", "", "CA (PEM) of the switch's P4Runtime certificate: the link to the switch speaks TLS")
	fs.StringVar(&o.TargetTLSCert, "target-tls-cert", "", "certificate (PEM) the controller presents to the switch (mutual TLS)")
	fs.StringVar(&o.TargetTLSKey, "target-tls-key", "", "key (PEM) of --target-tls-cert")
	fs.DurationVar(&o.ConnectTimeout, "connect-timeout", 0, "how long to wait for the target at start (default 30s)")
	fs.DurationVar(&o.LeaseGrace, "lease-grace", controller.DefaultLeaseGrace, "how long each rank of a job that got its slots has to open its lease (Watch); a rank that has not ends the job and frees its slots")
	fs.DurationVar(&o.JoinTimeout, "join-timeout", controller.DefaultJoinTimeout, "how long a job may wait for all its ranks to register; then it is released, and its waiting ranks hear which never came")
	fs.IntVar(&o.MaxJobsPerClient, "max-jobs-per-client", controller.DefaultMaxJobsPerClient, "jobs, gathering or running, that one client identity (its certificate's name under mutual TLS, else its IP address) may hold; -1: no limit")
	fs.BoolVar(&o.AllowOpenJobs, "allow-open-jobs", false, "take jobs without a token (allreduce --token, $SWITCHML_TOKEN) although --listen is beyond loopback: any client that reaches the job service may then take their missing ranks; by default such a controller refuses them (on loopback they are taken, and logged as open)")
	fs.BoolVar(&o.AllowLaneAddressMismatch, "allow-lane-address-mismatch", false, "take registrations whose lane addresses are not the caller's IP as this service sees it (workers behind NAT, or with a data-plane network apart from the one that reaches the controller); by default they are refused, since the switch sends each lane's results to its address. The switch's own data-plane address, multicast, broadcast and unspecified addresses and port 0 stay refused")
	fs.IntVar(&o.MaxSlotsPerClient, "max-slots-per-client", 0, "slots (lanes*window, summed over its jobs) that one client identity may hold; 0: half of --slots; -1: no limit beyond the pool")
	fs.IntVar(&o.MaxBytesPerClient, "max-bytes-per-client", controller.DefaultMaxBytesPerClient, "bytes one client identity may make the controller hold: its ranks' registrations (job name, token, lane addresses, the waiting call) and its jobs' broadcasts not yet fetched; -1: no limit")
	fs.IntVar(&o.MaxCallsPerClient, "max-calls-per-client", controller.DefaultMaxCallsPerClient, "calls (registrations, barriers, broadcasts, leaves, aborts) one client identity may have open at once, however many connections it opens, and apart from them its status and Describe calls: one beyond is refused before its request is read; -1: no limit")
	fs.IntVar(&o.MaxLeasesPerClient, "max-leases-per-client", controller.DefaultMaxLeasesPerClient, "leases (each rank holds one while its job runs) one client identity may have open at once, apart from its other calls: one beyond is refused before its request is read, and its job ends when its lease grace runs out; the default holds every rank of four 256-rank jobs; -1: no limit")
	fs.IntVar(&o.MaxConnsPerHost, "max-conns-per-host", controller.DefaultMaxConnsPerHost, "connections to the job service one IP address may have open at once (a worker's session holds one): one beyond is closed as it is accepted, before a byte of it is read; -1: no limit")
	memoryLimit := fs.Int("memory-limit", defaultControllerMemoryMiB, "soft limit, in MiB, on the controller's memory: its garbage collector works harder as the heap nears it, so that a storm of calls that are refused leaves no peak of garbage behind (what clients make it hold is bounded by --max-bytes-per-client each); raise it for many client identities; 0: none; $GOMEMLIMIT, if set, wins")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	metricsAddr := fs.String("metrics", "", metricsFlagHelp)
	fs.StringVar(&files.topology, "topology", "", "`FILE` of JSON describing a two-level tree of software switches to program as one, instead of --target: {\"spine\": {\"p4runtime\": ADDR, \"dataplane\": ADDR}, \"leaves\": [{\"p4runtime\": ADDR, \"dataplane\": ADDR, \"workers\": [PREFIX, ...]}, ...]}; each leaf runs \"switchml switch --parent\" with the spine's dataplane address; BMv2 leaves (--target-kind bmv2) instead name uplink_port, port and thrift (see the docs of p4/controller.Topology)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	o.Logger = log
	if err := setMemoryLimit(*memoryLimit); err != nil {
		return err
	}
	if *metricsAddr != "" {
		reg, err := newMetricsRegistry()
		if err != nil {
			return err
		}
		if _, err := serveMetrics(ctx, *metricsAddr, reg, log); err != nil {
			return err
		}
		o.Metrics = reg
	}
	if err := files.read(&o); err != nil {
		return err
	}
	o.Names = field.Flags(controllerFlags) // in its warnings and refusals too
	return field.Named(controller.RunFromOptions(ctx, o), o.Names)
}

// controllerFlags are the controller's flags by the controller.Options
// field each sets, as the controller's refusals (field.Error) name them.
var controllerFlags = map[string]string{
	"Target": "target", "Listen": "listen", "State": "state", "Dataplane": "dataplane", "Slots": "slots",
	"DeviceID": "device-id", "ElectionID": "election-id", "YieldPrimary": "yield-primary",
	"TargetKind": "target-kind", "DeviceConfigFile": "device-config", "P4Info": "p4info", "SkipPipeline": "skip-pipeline",
	"Ports": "port-map", "Auth": "auth", "InsecureAuthOverPlaintext": "insecure-auth-over-plaintext", "SwitchMACAddr": "switch-mac",
	"MaxElements": "max-elements", "MaxWorkers": "max-workers", "IngressLoss": "simulate-loss-in", "EgressLoss": "simulate-loss-out",
	"RegisterServer": "bmv2-thrift", "TLSCert": "tls-cert", "TLSKey": "tls-key", "TLSClientCA": "tls-client-ca", "Admins": "admin",
	"TargetTLSCA": "target-tls-ca", "TargetTLSCert": "target-tls-cert", "TargetTLSKey": "target-tls-key",
	"ConnectTimeout": "connect-timeout", "LeaseGrace": "lease-grace", "JoinTimeout": "join-timeout",
	"MaxJobsPerClient": "max-jobs-per-client", "AllowOpenJobs": "allow-open-jobs", "AllowLaneAddressMismatch": "allow-lane-address-mismatch",
	"MaxSlotsPerClient": "max-slots-per-client", "MaxBytesPerClient": "max-bytes-per-client", "MaxCallsPerClient": "max-calls-per-client",
	"MaxLeasesPerClient": "max-leases-per-client", "MaxConnsPerHost": "max-conns-per-host",
	"Topology": "topology",
}

// controllerFiles are the files the controller's flags name, which the
// command reads into controller.Options.
type controllerFiles struct {
	p4info, portMap, topology string
}

func (f controllerFiles) read(o *controller.Options) error {
	if f.p4info != "" {
		text, err := os.ReadFile(f.p4info)
		if err != nil {
			return fmt.Errorf("--p4info: %w", err)
		}
		if o.P4Info, err = targets.ParseP4Info(text); err != nil {
			return fmt.Errorf("--p4info %s: %w", f.p4info, err)
		}
	}
	if f.portMap != "" {
		ports, err := readFile(f.portMap, controller.ParsePortMap)
		if err != nil {
			return fmt.Errorf("--port-map %s: %w", f.portMap, err)
		}
		if ports == nil {
			ports = map[netip.Addr]uint32{}
		}
		o.Ports = ports
	}
	if f.topology != "" {
		t, err := readFile(f.topology, controller.ParseTopology)
		if err != nil {
			return fmt.Errorf("--topology %s: %w", f.topology, err)
		}
		o.Topology = t
	}
	return nil
}

// readFile parses the file at path.
func readFile[T any](path string, parse func(io.Reader) (T, error)) (T, error) {
	r, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer r.Close()
	return parse(r)
}

// defaultControllerMemoryMiB is the controller's soft memory limit unless
// --memory-limit or $GOMEMLIMIT says otherwise.
const defaultControllerMemoryMiB = 256

// setMemoryLimit sets the runtime's soft memory limit to mib MiB (0: none),
// unless $GOMEMLIMIT set one.
func setMemoryLimit(mib int) error {
	if mib < 0 {
		return fmt.Errorf("--memory-limit %d: want MiB, or 0 for no limit", mib)
	}
	if os.Getenv("GOMEMLIMIT") != "" || mib == 0 {
		return nil
	}
	debug.SetMemoryLimit(int64(mib) << 20)
	return nil
}
