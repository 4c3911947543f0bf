// Package tna carries the P4Info of the tna SwitchML program, so the controller
// can push it to a target running that program.
package tna

import _ "embed"

// P4InfoText is switchml.p4info.txtpb, the P4Info (text format) bf-p4c
// writes for switchml.p4. Its Tofino extension messages parse because this
// package registers their types (barefoot.go).
//
//go:embed switchml.p4info.txtpb
var P4InfoText []byte

// P4InfoTofino2Text is switchml.tofino2.p4info.txtpb, the P4Info bf-p4c
// writes for switchml.p4 compiled for Tofino 2 (--target tofino2 --arch
// t2na): the Tofino 1 P4Info plus the per-slot job tag register.
//
//go:embed switchml.tofino2.p4info.txtpb
var P4InfoTofino2Text []byte

// P4InfoTofino2LeafText is switchml.tofino2-leaf.p4info.txtpb, the P4Info
// bf-p4c writes for the leaf role of a two-level tree (the template
// expanded with "gen -leaf", compiled for Tofino 2 with -DSWITCHML_LEAF):
// the Tofino 2 P4Info plus tables uplink and from_parent, whose actions
// take a 16-bit slot_delta, and registers pool_waiting and pool_use.
//
//go:embed switchml.tofino2-leaf.p4info.txtpb
var P4InfoTofino2LeafText []byte
