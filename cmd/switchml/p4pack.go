package main

import (
	"context"
	"fmt"
	"os"

	"github.com/switchml/switchml-go/p4/stratum"
)

func init() {
	register("p4", "P4 program tools: `p4 pack --target tofino --out FILE DIR` packs bf-p4c's output directory into the device config Stratum (stratum_bfrt) takes", runP4)
}

func runP4(_ context.Context, args []string) error {
	fs := newFlags("p4", "pack [--target tofino] --out FILE DIR")
	target := fs.String("target", "tofino", "the switch the config is for: tofino (Stratum's BfPipelineConfig, for Tofino 1 and Tofino 2)")
	out := fs.String("out", "", "file to write the packed config to (required)")
	if len(args) == 0 || args[0] != "pack" {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errUsage
	}
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
