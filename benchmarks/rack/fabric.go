package rack

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"

	"github.com/switchml/switchml-go/internal/harness"
)

// Switch ports of the rack's switch side: the data plane and the job
// service listen on SwitchIP, P4Runtime on the namespace's loopback.
const (
	DataplanePort  = "48864"
	ControllerPort = "50051"
	P4RuntimeAddr  = "127.0.0.1:9559"
)

// Fabric completes cfg so that harness.Start runs the software switch and
// the controller (exe is the switchml command) inside the switch namespace,
// where workers reach them at SwitchIP, and checks readiness from inside it.
func (r *Rack) Fabric(ctx context.Context, exe string, cfg harness.Config) harness.Config {
	ns := r.SwitchNS()
	cfg.Dataplane = net.JoinHostPort(r.SwitchIP(), DataplanePort)
	cfg.Controller = net.JoinHostPort(r.SwitchIP(), ControllerPort)
	// The rack's namespaces are the run's own, and its workers join
	// without a token.
	cfg.ControllerArgs = append(slices.Clone(cfg.ControllerArgs), "--allow-open-jobs")
	cfg.P4Runtime = P4RuntimeAddr
	cfg.Command = func(args ...string) *exec.Cmd { return r.Command(ctx, ns, exe, args...) }
	cfg.Dial = DialIn(ns)
	return cfg
}

// DialIn returns a dialer that opens TCP connections from inside network
// namespace ns.
func DialIn(ns string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (c net.Conn, err error) {
		err = Do(ns, func() error {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
}

// Ports of a tree fabric's spine, beside the one switch's in the same
// namespace; each leaf serves on LeafIP with the one switch's ports.
const (
	TreeDataplanePort  = "48872"
	TreeControllerPort = "50061"
	TreeP4RuntimeAddr  = "127.0.0.1:9569"
)

// TreeFabric completes cfg so that harness.Start runs a two-level tree in a
// rack built with leaves: the spine and the controller in the switch
// namespace, leaf k's switch in leaf k's namespace on LeafIP(k), with the
// workers under it.
func (r *Rack) TreeFabric(ctx context.Context, exe string, cfg harness.Config) (harness.Config, error) {
	if r.Leaves() < 2 {
		return cfg, fmt.Errorf("rack: a tree fabric needs a rack with 2 or more leaves (this one has %d)", r.Leaves())
	}
	ns := r.SwitchNS()
	cfg.Dataplane = net.JoinHostPort(r.SwitchIP(), TreeDataplanePort)
	cfg.Controller = net.JoinHostPort(r.SwitchIP(), TreeControllerPort)
	// The rack's namespaces are the run's own, and its workers join
	// without a token.
	cfg.ControllerArgs = append(slices.Clone(cfg.ControllerArgs), "--allow-open-jobs")
	cfg.P4Runtime = TreeP4RuntimeAddr
	cfg.Command = func(args ...string) *exec.Cmd { return r.Command(ctx, ns, exe, args...) }
	cfg.Dial = DialIn(ns)
	cfg.Leaves = nil
	for k := range r.Leaves() {
		var workers []string
		for i := range r.Workers() {
			if r.LeafOf(i) == k {
				workers = append(workers, r.WorkerIP(i)+"/32")
			}
		}
		leafNS := r.LeafNS(k)
		cfg.Leaves = append(cfg.Leaves, harness.Leaf{
			Dataplane: net.JoinHostPort(r.LeafIP(k), DataplanePort),
			P4Runtime: net.JoinHostPort(r.LeafIP(k), "9559"),
			Workers:   workers,
			Command:   func(args ...string) *exec.Cmd { return r.Command(ctx, leafNS, exe, args...) },
		})
	}
	return cfg, nil
}
