package bmv2

import (
	"context"
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/p4/targets"
	"github.com/switchml/switchml-go/p4/v1model"
)

// The bmv2 target kind: the v1model program (p4/v1model) on
// simple_switch_grpc. Its device config is the JSON p4c-bm2-ss writes,
// checked against the P4Info before it is pushed (BMv2 aborts on some
// programs instead of refusing them); its P4Runtime server writes no
// registers, so the pool is reset through its Thrift server. BMv2 switches
// can form a tree (the program's leaf role).
func init() {
	targets.Register(targets.Target{
		Kind:              targets.BMv2,
		Summary:           "BMv2 running the v1model program",
		P4Info:            func(string) (*p4configv1.P4Info, error) { return targets.ParseP4Info(v1model.P4InfoText) },
		DeviceConfig:      targets.ReadDeviceConfig,
		DeviceConfigNeeds: "the BMv2 JSON p4c-bm2-ss compiles (see p4/README.md)",
		CheckDeviceConfig: CheckProgram,
		Registers: &targets.RegisterServer{
			Name:        "BMv2's Thrift runtime server",
			DefaultPort: 9090,
			Writer:      func(addr string) targets.RegisterWriter { return thriftRegisters(addr) },
		},
		Capabilities: func(maxElements int) (targets.Capabilities, error) {
			c, err := targets.FixedProgram(maxElements)
			c.Tree = true // the v1model program has the leaf role (p4/controller.Topology)
			return c, err
		},
	})
}

// thriftRegisters writes registers through a Thrift server, on a fresh
// connection per call: pool resets are rare, and a connection kept open
// across hours would have to survive the switch restarting.
type thriftRegisters string

func (a thriftRegisters) RegisterWriteRange(ctx context.Context, name string, first, end int, value uint64) error {
	th, err := DialThrift(ctx, string(a))
	if err != nil {
		return fmt.Errorf("%w (is BMv2's Thrift server at %s? see the controller's RegisterServer)", err, string(a))
	}
	defer th.Close()
	return th.RegisterWriteRange(ctx, name, first, end, value)
}
