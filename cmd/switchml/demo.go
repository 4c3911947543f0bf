package main

import (
	"context"
	"os"
	"strings"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

func init() {
	register("demo", "run a whole SwitchML job on this machine: software switch, controller and N worker processes on loopback, with a short report", runDemo)
}

func runDemo(ctx context.Context, args []string) error {
	fs := newFlags("demo", "[--workers N] [flags]")
	var d benchmarks.Demo
	fs.IntVar(&d.Workers, "workers", 4, "worker processes")
	fs.IntVar(&d.Elements, "elements", 1<<22, "tensor elements per worker (4194304 float32 are 16 MiB)")
	fs.StringVar(&d.DType, "dtype", "float32", "element type: "+strings.Join(dtype.Names(), ", "))
	fs.IntVar(&d.Iters, "iters", 5, "timed allreduce calls per worker")
	fs.IntVar(&d.Lanes, "lanes", 0, "lanes per worker (0: 4, or 1 with --transport shm)")
	fs.IntVar(&d.Window, "window", 0, "packets in flight per lane (0: 64, or 256 with --transport shm)")
	fs.IntVar(&d.PacketElements, "packet-elements", 256, "values per packet (up to 2048 with --extended)")
	fs.BoolVar(&d.Extended, "extended", false, "use the extended header")
	fs.Float64Var(&d.Drop, "drop", 0, "switch-side drop probability, to watch loss recovery")
	fs.StringVar(&d.Transport, "transport", switchml.TransportUDP, `how the workers and the switch move packets: "udp" (kernel sockets) or "shm" (shared memory on this host)`)
	fs.BoolVar(&d.Verbose, "v", false, "show the logs of every process")
	fs.IntVar(&d.Port, "port", 0, "pin the ports on 127.0.0.1: the switch's data plane at this port, its P4Runtime server at the next and the controller at the one after (0: free ports)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := d.Check(); err != nil {
		return switchml.InFlags(err, allreduceFlags)
	}
	// The processes started are stopped when the command returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	self, err := harness.SelfCommand(ctx)
	if err != nil {
		return err
	}
	d.Command = self
	return d.Run(ctx, os.Stdout)
}
