package bmv2

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/targets"
)

// TestTargetRegistered: the bmv2 kind comes with the v1model P4Info, a
// device config checked as a BMv2 program, and pool resets through the
// Thrift server.
func TestTargetRegistered(t *testing.T) {
	k, err := targets.Lookup(targets.BMv2)
	if err != nil {
		t.Fatal(err)
	}
	info, err := k.P4Info("")
	if err != nil || info.GetPkgInfo().GetArch() != "v1model" {
		t.Fatalf("P4Info arch %q, %v; want v1model", info.GetPkgInfo().GetArch(), err)
	}
	if err := k.CheckDeviceConfig([]byte(`{"not": "a program"}`), info); !errors.Is(err, ErrNotProgram) {
		t.Errorf("a device config that is no BMv2 program: %v", err)
	}
	if k.Registers == nil || k.Registers.DefaultPort != 9090 {
		t.Fatalf("register server %+v, want Thrift on port 9090", k.Registers)
	}
	// Nothing listens at this address: the write fails naming the flag.
	err = k.Registers.Writer("127.0.0.1:1").RegisterWriteRange(context.Background(), "pool_count", 0, 1, 0)
	if err == nil || !strings.Contains(err.Error(), "RegisterServer") {
		t.Errorf("register write with no Thrift server: %v, want an error pointing at RegisterServer", err)
	}
	if c, _ := k.Capabilities(0); !c.NeedsPortMap || !c.NeedsMAC || c.Auth || !c.Tree {
		t.Errorf("capabilities %+v, want a P4 switch that can be a leaf or a spine", c)
	}
}
