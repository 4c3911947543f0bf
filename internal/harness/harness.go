// Package harness runs a SwitchML switch side as processes, for the demo,
// the benchmarks, the chaos run, the training harness and the tests: a
// software switch (or a tree of them) and the controller that programs it
// over P4Runtime and runs the job service workers join through, each a
// `switchml switch` or `switchml controller` subprocess (which may be
// wrapped, for example to run inside a network namespace). Start returns
// once the controller answers the job service's Describe call over gRPC,
// that is once the switch is programmed and workers can join; Crash and
// Restart kill and start them again.
//
// Proc is the subprocess handle the fabric, the demo, the chaos run and the
// benchmark runner share; SelfCommand runs this program again, FreePort
// finds a port, WaitReady waits for a controller.
//
// The same switch side inside the calling process is p4/local's.
package harness

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/transport"
)

// DefaultReadyTimeout bounds how long Start waits for the controller.
const DefaultReadyTimeout = 30 * time.Second

// Config describes a switch and its controller. Zero values take defaults.
type Config struct {
	// Slots per set in the switch's pool (default 8192).
	Slots int
	// MaxElements is the largest number of values per packet the switch
	// takes (default 1024).
	MaxElements int
	// MaxWorkers is the largest job (default 256).
	MaxWorkers int
	// MaxSlotsPerClient is the controller's slot quota per client
	// identity (its --max-slots-per-client): 0, half the pool; -1, none
	// (a fabric whose jobs all come from one address and that wants one
	// of them to take the whole pool).
	MaxSlotsPerClient int
	// Faults are injected into every packet the switch sends.
	Faults transport.Faults
	// Shards is the number of the switch's data-plane loops, each on its
	// own UDP port (default 1; see softswitch.Config.Shards).
	Shards int
	// Transport is how the switch's data plane moves packets (see
	// softswitch.Config.Transport): "udp" ("" too), "shm" or "afxdp". The
	// switch gets it as --transport.
	Transport string
	// Auth runs the switch and the controller with --auth: each job gets
	// a key, and the switch drops packets without its tag (workers join
	// with switchml.Config.Auth). The controller also gets
	// --insecure-auth-over-plaintext, since its links stay on this machine.
	Auth bool

	// Dataplane, P4Runtime and Controller are the switch's UDP address
	// (with several shards, the first shard's, or all of them
	// comma-separated), its P4Runtime address and the job service's
	// address. Empty: free ports on loopback.
	Dataplane, P4Runtime, Controller string

	// Command returns the command that runs `switchml ARGS...`, for
	// instance exec.Command(pathOfSwitchml, args...), or the same wrapped
	// to run inside a network namespace (required).
	Command func(args ...string) *exec.Cmd
	// SwitchArgs and ControllerArgs are extra flags of the two
	// processes.
	SwitchArgs, ControllerArgs []string
	// Echo copies the subprocesses' logs to stderr, line by line behind
	// their names.
	Echo bool
	// Dial reaches the controller for the readiness check (default: a
	// net.Dialer from this process).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// ProbeTLS, if set, is the client TLS configuration of the readiness
	// check, for a controller started with --tls-cert.
	ProbeTLS *tls.Config
	// ReadyTimeout bounds the wait for the controller (default
	// DefaultReadyTimeout).
	ReadyTimeout time.Duration

	// Leaves, if set, make the fabric a two-level tree: the switch at
	// Dataplane is the spine, each leaf a switch started with --parent,
	// and the controller programs them all from a topology file
	// (controller --topology). Workers join at Controller as always and
	// are sent to their leaf.
	Leaves []Leaf
}

// Leaf is one leaf switch of a tree fabric.
type Leaf struct {
	// Dataplane and P4Runtime are the leaf's addresses, both required:
	// the spine and the controller reach it there.
	Dataplane, P4Runtime string
	// Workers are the address prefixes of the workers under the leaf.
	Workers []string
	// Command, if set, runs the leaf's switch process (default:
	// Config.Command), for instance inside the leaf's namespace.
	Command func(args ...string) *exec.Cmd
}

// Fabric is a running switch and controller. Its methods may be called
// from several goroutines, except Crash, Restart and Close, which the
// goroutine that owns the fabric calls.
type Fabric struct {
	dataplane, p4rt, controller string

	swProc, ctlProc *Proc
	leafProcs       []*Proc
	topologyFile    string
	stateDir        string // the controller's --state file's folder, if the fabric made it
	command         func(args ...string) *exec.Cmd
	swArgs, ctlArgs []string
	echo            bool
}

// Start starts the switch and the controller processes and returns once
// workers can join. Close stops both.
func Start(ctx context.Context, cfg Config) (*Fabric, error) {
	if cfg.Command == nil {
		return nil, errors.New("harness: Config.Command is nil: it runs `switchml switch` and `switchml controller` (p4/local starts them in process)")
	}
	if cfg.Slots < 0 || cfg.MaxElements < 0 || cfg.MaxWorkers < 0 {
		return nil, fmt.Errorf("harness: Slots %d, MaxElements %d, MaxWorkers %d: none may be negative (0 takes the default)", cfg.Slots, cfg.MaxElements, cfg.MaxWorkers)
	}
	cfg.Slots = cmp.Or(cfg.Slots, 8192)
	cfg.MaxElements = cmp.Or(cfg.MaxElements, 1024)
	cfg.MaxWorkers = cmp.Or(cfg.MaxWorkers, 256)
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, DefaultReadyTimeout)
	// The switch refuses a transport it lacks too, but only once started.
	if _, err := transport.Lookup(cfg.Transport); err != nil {
		return nil, fmt.Errorf("harness: Transport: %w", err)
	}
	if cfg.Transport != "" {
		cfg.SwitchArgs = append(slices.Clip(cfg.SwitchArgs), "--transport", cfg.Transport)
	}
	if cfg.Auth {
		cfg.SwitchArgs = append(slices.Clip(cfg.SwitchArgs), "--auth")
		// A fabric's hosts are this machine's network namespaces: the
		// job keys do not leave it, TLS or not.
		cfg.ControllerArgs = append(slices.Clip(cfg.ControllerArgs), "--auth", "--insecure-auth-over-plaintext")
	}
	return startProcs(ctx, cfg)
}

// procDataplanes returns the data-plane addresses of a switch process with
// shards shards, comma-separated, for both its --dataplane and the
// controller's: dataplane as it is if it lists them or there is one shard;
// else, when the caller gave it, the ports counted up from its port (what
// the switch does); else dataplane and further free ports.
func procDataplanes(dataplane string, explicit bool, shards int, free func() (string, error)) (string, error) {
	if shards == 1 || strings.Contains(dataplane, ",") {
		return dataplane, nil
	}
	if explicit {
		dps, err := softswitch.ShardAddrs(dataplane, shards)
		if err != nil {
			return "", fmt.Errorf("harness: %w", err)
		}
		if strings.HasSuffix(dps[0], ":0") {
			return "", fmt.Errorf("harness: Dataplane %q with %d shards: give a port (shard k takes port+k), every shard's address comma-separated, or no address", dataplane, shards)
		}
		return strings.Join(dps, ","), nil
	}
	dps := []string{dataplane}
	for len(dps) < shards {
		a, err := free()
		if err != nil {
			return "", err
		}
		if !slices.Contains(dps, a) {
			dps = append(dps, a)
		}
	}
	return strings.Join(dps, ","), nil
}

func startProcs(ctx context.Context, cfg Config) (*Fabric, error) {
	addr := func(a *string, network string) error {
		if *a != "" {
			return nil
		}
		p, err := FreePort(network)
		if err != nil {
			return fmt.Errorf("harness: a free %s port: %w", network, err)
		}
		*a = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		return nil
	}
	explicitDataplane := cfg.Dataplane != ""
	if err := errors.Join(addr(&cfg.Dataplane, "udp"), addr(&cfg.P4Runtime, "tcp"), addr(&cfg.Controller, "tcp")); err != nil {
		return nil, err
	}
	shards := max(cfg.Shards, 1)
	var err error
	cfg.Dataplane, err = procDataplanes(cfg.Dataplane, explicitDataplane, shards, func() (string, error) {
		var a string
		return a, addr(&a, "udp")
	})
	if err != nil {
		return nil, err
	}
	first, _, _ := strings.Cut(cfg.Dataplane, ",")
	f := &Fabric{dataplane: first, p4rt: cfg.P4Runtime, controller: cfg.Controller, command: cfg.Command, echo: cfg.Echo}
	// Every switch of the fabric has the same pool.
	pool := []string{"--slots", strconv.Itoa(cfg.Slots), "--max-elements", strconv.Itoa(cfg.MaxElements), "--max-workers", strconv.Itoa(cfg.MaxWorkers)}
	swArgs := append([]string{"switch", "--dataplane", cfg.Dataplane, "--shards", strconv.Itoa(shards), "--p4rt", cfg.P4Runtime}, pool...)
	if cfg.Faults.Active() {
		swArgs = append(swArgs, "--drop", fmt.Sprint(cfg.Faults.Drop), "--duplicate", fmt.Sprint(cfg.Faults.Duplicate),
			"--reorder", fmt.Sprint(cfg.Faults.Reorder), "--seed", fmt.Sprint(cfg.Faults.Seed))
	}
	f.swArgs = append(swArgs, cfg.SwitchArgs...)
	switches := []string{"--target", cfg.P4Runtime, "--dataplane", cfg.Dataplane}
	if len(cfg.Leaves) > 0 {
		if shards > 1 {
			return nil, fmt.Errorf("harness: Shards %d with Leaves: a tree's spine runs one shard", shards)
		}
		if f.topologyFile, err = writeTopology(first, cfg.P4Runtime, cfg.Leaves); err != nil {
			return nil, err
		}
		switches = []string{"--topology", f.topologyFile}
	}
	f.ctlArgs = slices.Concat([]string{"controller"}, switches, []string{"--listen", cfg.Controller,
		"--slots", strconv.Itoa(cfg.Slots), "--max-elements", strconv.Itoa(cfg.MaxElements), "--max-workers", strconv.Itoa(cfg.MaxWorkers),
		"--max-slots-per-client", strconv.Itoa(cfg.MaxSlotsPerClient)}, cfg.ControllerArgs)
	if len(cfg.Leaves) == 0 && !slices.Contains(cfg.ControllerArgs, "--state") {
		// The controller keeps its jobs' claims, so that a restarted one
		// (Restart) hands them back to their ranks.
		if f.stateDir, err = os.MkdirTemp("", "switchml-fabric-state-"); err != nil {
			return nil, fmt.Errorf("harness: a folder for the controller's state: %w", err)
		}
		f.ctlArgs = append(f.ctlArgs, "--state", filepath.Join(f.stateDir, "controller.state"))
	}
	if f.swProc, err = StartProc("switch", cfg.Echo, cfg.Command(f.swArgs...)); err != nil {
		f.Close()
		return nil, err
	}
	for k, l := range cfg.Leaves {
		command := l.Command
		if command == nil {
			command = cfg.Command
		}
		args := slices.Concat([]string{"switch", "--dataplane", l.Dataplane, "--p4rt", l.P4Runtime, "--parent", first}, pool, cfg.SwitchArgs)
		p, err := StartProc(fmt.Sprintf("leaf%d", k), cfg.Echo, command(args...))
		if err != nil {
			f.Close()
			return nil, err
		}
		f.leafProcs = append(f.leafProcs, p)
	}
	if f.ctlProc, err = StartProc("controller", cfg.Echo, cfg.Command(f.ctlArgs...)); err != nil {
		f.Close()
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	stop := make(chan struct{})
	exited := make(chan struct{})
	var watch sync.WaitGroup
	for _, p := range append([]*Proc{f.swProc, f.ctlProc}, f.leafProcs...) {
		watch.Go(func() {
			select {
			case <-p.Done():
				cancel()
			case <-stop:
			}
		})
	}
	go func() { watch.Wait(); close(exited) }()
	defer func() { close(stop); <-exited }()
	if err := WaitReady(rctx, cfg.Controller, cfg.Dial, cfg.ProbeTLS); err != nil {
		f.Close()
		why := err.Error()
		if f.Exited() {
			why = "a process exited"
		}
		var logs strings.Builder
		for _, p := range append([]*Proc{f.swProc, f.ctlProc}, f.leafProcs...) {
			fmt.Fprintf(&logs, "; %s log:\n%s", p.Name(), indent(p.Logs()))
		}
		return nil, fmt.Errorf("harness: the controller at %s did not come up (%s)%s", cfg.Controller, why, logs.String())
	}
	return f, nil
}

// WaitReady calls the job service's Describe at addr until it answers or
// ctx ends. dial, if set, makes the connection; tlsCfg, if set, secures it.
func WaitReady(ctx context.Context, addr string, dial func(context.Context, string) (net.Conn, error), tlsCfg *tls.Config) error {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if dial != nil {
		opts = append(opts, grpc.WithContextDialer(dial))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return fmt.Errorf("harness: controller address %q: %w", addr, err)
	}
	defer cc.Close()
	client := jobpb.NewJobServiceClient(cc)
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := client.Describe(cctx, &jobpb.DescribeRequest{})
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "  (empty)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// ControllerAddr is the job service's address: what workers pass as
// switchml.Config.Controller.
func (f *Fabric) ControllerAddr() string { return f.controller }

// DataplaneAddr is the switch's UDP address (its first shard's).
func (f *Fabric) DataplaneAddr() string { return f.dataplane }

// P4RuntimeAddr is the switch's P4Runtime address.
func (f *Fabric) P4RuntimeAddr() string { return f.p4rt }

// Procs are the switch and controller processes.
func (f *Fabric) Procs() (sw, ctl *Proc) { return f.swProc, f.ctlProc }

// LeafProcs are a tree's leaf switch subprocesses (nil otherwise).
func (f *Fabric) LeafProcs() []*Proc { return f.leafProcs }

// Exited says whether the switch or the controller has stopped on its own.
func (f *Fabric) Exited() bool {
	for _, p := range append([]*Proc{f.swProc, f.ctlProc}, f.leafProcs...) {
		if p != nil && p.Exited() {
			return true
		}
	}
	return false
}

// Crash kills the switch or the controller subprocess at once (SIGKILL:
// it has no chance to clean up, as in a crash) and waits for it to end.
func (f *Fabric) Crash(which string) error {
	p, _, err := f.proc(which)
	if err != nil {
		return err
	}
	p.Cmd().Process.Kill()
	p.Wait()
	return nil
}

// Restart starts the switch or the controller subprocess again, with the
// command line it started with, once the previous one has ended (see
// Crash). It does not wait for readiness: the controller reconnects to a
// restarted switch by itself, and workers retry a restarted controller.
func (f *Fabric) Restart(which string) (*Proc, error) {
	p, args, err := f.proc(which)
	if err != nil {
		return nil, err
	}
	if !p.Exited() {
		return nil, fmt.Errorf("harness: restart %s: it is still running (Crash it first)", which)
	}
	np, err := StartProc(which, f.echo, f.command(args...))
	if err != nil {
		return nil, err
	}
	if which == "switch" {
		f.swProc = np
	} else {
		f.ctlProc = np
	}
	return np, nil
}

func (f *Fabric) proc(which string) (*Proc, []string, error) {
	switch which {
	case "switch":
		return f.swProc, f.swArgs, nil
	case "controller":
		return f.ctlProc, f.ctlArgs, nil
	}
	return nil, nil, fmt.Errorf("harness: no process %q: want \"switch\" or \"controller\"", which)
}

// Close stops the controller, then the switch, and reports how a process
// that had already exited ended.
func (f *Fabric) Close() error {
	var errs []error
	if f.topologyFile != "" {
		defer os.Remove(f.topologyFile)
	}
	if f.stateDir != "" {
		defer os.RemoveAll(f.stateDir)
	}
	for _, p := range append([]*Proc{f.ctlProc, f.swProc}, f.leafProcs...) {
		if p == nil {
			continue
		}
		if p.Exited() {
			if err := p.Wait(); err != nil {
				errs = append(errs, fmt.Errorf("%s exited: %w", p.Name(), err))
			}
			continue
		}
		p.Stop(5 * time.Second)
	}
	return errors.Join(errs...)
}

// Logs are the subprocesses' logs by name ("switch", "controller"); the
// switch logs its counters when it stops, so after Close they are
// complete.
func (f *Fabric) Logs() map[string]string {
	if f.swProc == nil {
		return nil
	}
	out := map[string]string{"switch": f.swProc.Logs()}
	if f.ctlProc != nil {
		out["controller"] = f.ctlProc.Logs()
	}
	for _, p := range f.leafProcs {
		out[p.Name()] = p.Logs()
	}
	return out
}

// writeTopology writes the controller's topology file of a tree fabric.
func writeTopology(spineDP, spineP4RT string, leaves []Leaf) (string, error) {
	type sw struct {
		P4Runtime string   `json:"p4runtime"`
		Dataplane string   `json:"dataplane"`
		Workers   []string `json:"workers,omitempty"`
	}
	topo := struct {
		Spine  sw   `json:"spine"`
		Leaves []sw `json:"leaves"`
	}{Spine: sw{P4Runtime: spineP4RT, Dataplane: spineDP}}
	for k, l := range leaves {
		if l.Dataplane == "" || l.P4Runtime == "" || len(l.Workers) == 0 {
			return "", fmt.Errorf("harness: leaf %d needs Dataplane, P4Runtime and Workers", k)
		}
		topo.Leaves = append(topo.Leaves, sw{P4Runtime: l.P4Runtime, Dataplane: l.Dataplane, Workers: l.Workers})
	}
	b, err := json.MarshalIndent(topo, "", "  ")
	if err != nil {
		return "", err
	}
	fh, err := os.CreateTemp("", "switchml-topology-*.json")
	if err != nil {
		return "", fmt.Errorf("harness: topology file: %w", err)
	}
	defer fh.Close()
	if _, err := fh.Write(b); err != nil {
		return "", fmt.Errorf("harness: topology file: %w", err)
	}
	return fh.Name(), nil
}
