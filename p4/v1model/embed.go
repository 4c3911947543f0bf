// Package v1model carries the P4Info of the v1model SwitchML program, so the controller
// can push it to a target running that program.
package v1model

import _ "embed"

// P4InfoText is switchml.p4info.txtpb, the P4Info (text format) of switchml.p4.
//
//go:embed switchml.p4info.txtpb
var P4InfoText []byte
