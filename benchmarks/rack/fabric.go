package rack

import (
	"context"
	"net"
	"os/exec"

	"github.com/switchml/switchml-go/p4/fabric"
)

// Switch ports of the rack's switch side: the data plane and the job
// service listen on SwitchIP, P4Runtime on the namespace's loopback.
const (
	DataplanePort  = "48864"
	ControllerPort = "50051"
	P4RuntimeAddr  = "127.0.0.1:9559"
)

// Fabric completes cfg so that fabric.Start runs the software switch and
// the controller (exe is the switchml command) inside the switch namespace,
// where workers reach them at SwitchIP, and checks readiness from inside it.
func (r *Rack) Fabric(ctx context.Context, exe string, cfg fabric.Config) fabric.Config {
	ns := r.SwitchNS()
	cfg.Dataplane = net.JoinHostPort(r.SwitchIP(), DataplanePort)
	cfg.Controller = net.JoinHostPort(r.SwitchIP(), ControllerPort)
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
