// Command gen expands a P4 template of the SwitchML programs into the P4
// source that is checked in beside it. It is run by go generate in
// p4/programs; the consistency test fails when the checked-in output is stale.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/switchml/switchml-go/p4/programs"
)

func main() {
	in := flag.String("in", "", "template to expand (switchml.p4.tmpl)")
	out := flag.String("out", "", "P4 file to write")
	leaf := flag.Bool("leaf", false, "add the TNA program's leaf role behind #ifdef SWITCHML_LEAF (compile with -DSWITCHML_LEAF for Tofino 2)")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: gen -in TEMPLATE -out FILE")
		os.Exit(2)
	}
	if err := run(*in, *out, *leaf); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(in, out string, leaf bool) error {
	tmpl, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	gen := programs.Generate
	if leaf {
		gen = programs.GenerateLeaf
	}
	src, err := gen(filepath.Base(in), tmpl)
	if err != nil {
		return err
	}
	return os.WriteFile(out, src, 0o644)
}
