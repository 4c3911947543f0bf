package main

import (
	"context"
	"fmt"
	"os"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/switchml/switchml-go/p4/stratum"
)

func init() {
	register("p4", "P4 program tools: `p4 pack --target tofino --out FILE DIR` packs bf-p4c's output directory into the device config Stratum (stratum_bfrt) takes", runP4)
}

func runP4(_ context.Context, args []string) error {
	if len(args) == 0 || args[0] != "pack" {
		fmt.Fprintf(os.Stderr, "Usage: switchml p4 pack --target tofino --out FILE DIR\n\n%s\n", commands["p4"].summary)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errUsage
	}
	fs := newFlags("p4", "pack --target tofino --out FILE DIR")
	target := fs.String("target", "tofino", "the switch the config is for: tofino (Stratum's BfPipelineConfig, for Tofino 1 and Tofino 2)")
	out := fs.String("out", "", "file to write the packed config to (required)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(fs.Output(), "want one DIR (bf-p4c's output directory, its -o), got %d arguments\n", fs.NArg())
		fs.Usage()
		return errUsage
	}
	if *target != "tofino" {
		return fmt.Errorf("--target %q: only tofino is packed (BMv2 takes the compiler's JSON as it is)", *target)
	}
	if *out == "" {
		return fmt.Errorf("--out FILE is required")
	}
	b, err := stratum.Pack(fs.Arg(0))
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return fmt.Errorf("write --out: %w", err)
	}
	return nil
}

// tofinoDeviceConfig is what --device-config gives a Tofino: bf-p4c's output
// directory, packed here, or a file `switchml p4 pack` wrote (checked to be
// a BfPipelineConfig with at least one profile). tofino2 reports a
// directory compiled for Tofino 2, whose program has its own P4Info.
func tofinoDeviceConfig(path string) (b []byte, tofino2 bool, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, false, fmt.Errorf("--device-config: %w", err)
	}
	if st.IsDir() {
		b, err := stratum.Pack(path)
		if err != nil {
			return nil, false, fmt.Errorf("--device-config: %w", err)
		}
		target, _ := stratum.Target(path) // Pack read it already
		return b, target == "tofino2", nil
	}
	b, err = os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("--device-config: %w", err)
	}
	cfg, err := stratum.Unpack(b)
	if err != nil || cfg.GetP4Name() == "" || len(cfg.GetProfiles()) == 0 {
		return nil, false, fmt.Errorf("--device-config %s is not a packed Stratum pipeline config: give bf-p4c's output directory, or the file `switchml p4 pack --target tofino` writes", path)
	}
	return b, false, nil
}

// stratumP4Info refuses a P4Info whose registers or counters are Tofino
// externs: Stratum maps only standard P4Runtime registers and counters to
// the switch's objects (BfrtIdMapper::BuildP4InfoAndBfrtInfoMapping in
// stratum/hal/lib/barefoot/bfrt_id_mapper.cc), so every pool reset and
// counter read would fail.
func stratumP4Info(info *p4configv1.P4Info) error {
	for _, e := range info.GetExterns() {
		if n := e.GetExternTypeName(); n == "Register" || n == "Counter" {
			return fmt.Errorf("--p4info lists its %ss as Tofino externs, which Stratum cannot address: compile with bf-p4c --p4runtime-force-std-externs (docs/tofino.md)", n)
		}
	}
	return nil
}
