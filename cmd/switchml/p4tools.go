package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchml/switchml-go/p4/p4tools"
)

func init() {
	register("p4tools", "prints the environment of the P4 toolchain (p4c, BMv2, bf-p4c) found beside the checkout, laid out runnable: eval \"$(switchml p4tools)\"", runP4Tools)
}

// runP4Tools prints shell exports that put the prepared toolchain first on
// PATH, as its env.sh would for an intact copy.
func runP4Tools(_ context.Context, args []string) error {
	fs := newFlags("p4tools", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tools, err := p4tools.Prepare()
	if err != nil {
		return fmt.Errorf("%w (run from the checkout, or set %s to the toolchain folder)", err, p4tools.EnvDir)
	}
	for _, kv := range tools.Env() {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "P4C_16_INCLUDE_PATH", "P4_TOOLS_DIR":
			fmt.Printf("export %s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
		}
	}
	return nil
}
