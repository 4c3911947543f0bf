// Package targets describes each kind of switch the controller programs,
// one entry per kind: the P4Info its program has, the compiled program
// (device config) pushed with it and how that is read, how the pool's
// registers are reset, and what the switch takes (packet sizes, workers,
// headers, addressing).
//
// The software switch and Tofino are registered here; a kind whose hooks
// need code of its own package registers itself from there, as BMv2 does
// (p4/bmv2, imported by the CLI for that). The controller looks kinds up
// (controller.TargetFor, controller.Options); nothing else names them.
package targets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"
)

// Names of the kinds registered here and by p4/bmv2.
const (
	Softswitch = "softswitch"
	BMv2       = "bmv2"
	Tofino     = "tofino"
)

// Target is one kind of switch.
type Target struct {
	// Kind names it (--target-kind).
	Kind string
	// Summary says in a few words what runs there, for help texts.
	Summary string
	// P4Info returns the P4Info of the program the kind runs, a fresh
	// message each call. deviceConfig is the --device-config path ("" for
	// none), for kinds whose P4Info depends on what the program was
	// compiled for.
	P4Info func(deviceConfig string) (*p4configv1.P4Info, error)
	// CheckP4Info, if set, refuses a P4Info (the kind's or the operator's)
	// that the switch cannot serve.
	CheckP4Info func(info *p4configv1.P4Info) error
	// DeviceConfig reads the compiled program pushed with the pipeline
	// from the path the operator gives (--device-config) and returns it as
	// the switch expects it in ForwardingPipelineConfig.p4_device_config.
	// nil: the kind runs no compiled program, and a device config is
	// refused.
	DeviceConfig func(path string) ([]byte, error)
	// DeviceConfigNeeds says what DeviceConfig wants, for messages.
	DeviceConfigNeeds string
	// CheckDeviceConfig, if set, refuses a device config the switch would
	// not run with the P4Info (BMv2 aborts on some programs instead of
	// refusing them).
	CheckDeviceConfig func(config []byte, info *p4configv1.P4Info) error
	// Registers, if set, is the server beside P4Runtime through which the
	// pool's registers are reset; nil: P4Runtime register writes.
	Registers *RegisterServer
	// Capabilities says what the switch takes. maxElements is the largest
	// packet the operator says the switch was started with (0: the
	// kind's default); kinds with a fixed program ignore it.
	Capabilities func(maxElements int) (Capabilities, error)
}

// Capabilities are what a switch takes.
type Capabilities struct {
	// PacketElements lists the packet sizes (int32 values) the switch
	// aggregates with the compatible header.
	PacketElements []int
	// MaxExtendedElements is the largest packet with the extended header;
	// 0: the switch does not parse the extended header.
	MaxExtendedElements int
	// MaxWorkers is the largest job with the compatible header.
	MaxWorkers int
	// NeedsMAC: results are addressed to the worker's Ethernet address.
	NeedsMAC bool
	// NeedsPortMap: the switch replicates results to ports it cannot
	// learn, so the controller needs a port map, every lane of a rank
	// binds one address, and the pool has the program's fixed size. The
	// other kind sends through its host's stack.
	NeedsPortMap bool
	// Auth: the switch can check a tag on every packet (--auth).
	Auth bool
	// Tree: the switch can be a leaf or the spine of a two-level tree
	// (--topology).
	Tree bool
	// PortsPerPipe, if not 0, says the switch has several pipes, each
	// with its own copy of the program's registers, and that device port
	// p belongs to pipe p / PortsPerPipe. A packet is aggregated in the
	// registers of the pipe it entered by, so a job whose ranks sit on
	// ports of two pipes splits its contributions between two copies of
	// its slots and never completes (see OnePipe).
	PortsPerPipe int
	// AnswersProbe: the switch answers a probe (wire.AppendProbe) sent to
	// its data-plane address, so the controller can check that address
	// before it hands it to workers. A P4 program answers none: it drops
	// packets from senders it has no workers entry for.
	AnswersProbe bool
}

// RegisterServer is a register service beside the switch's P4Runtime
// server, for switches whose P4Runtime server writes no registers.
type RegisterServer struct {
	// Name says what it is, for messages and help ("BMv2's Thrift
	// runtime server").
	Name string
	// DefaultPort is its port on the P4Runtime target's host.
	DefaultPort int
	// Writer returns what writes registers through the server at addr.
	Writer func(addr string) RegisterWriter
}

// RegisterWriter writes register cells (p4rt.RegisterBackend).
type RegisterWriter interface {
	// RegisterWriteRange sets cells [first, end) of the register array
	// with the given fully qualified name.
	RegisterWriteRange(ctx context.Context, name string, first, end int, value uint64) error
}

var registry = struct {
	sync.RWMutex
	kinds map[string]Target
}{kinds: map[string]Target{}}

// Register makes a kind known. It panics on an incomplete entry or a kind
// registered twice: registration is a program's init, not input.
func Register(t Target) {
	if t.Kind == "" || t.P4Info == nil || t.Capabilities == nil {
		panic(fmt.Sprintf("targets: Register(%q): a target needs a kind, a P4Info and its capabilities", t.Kind))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.kinds[t.Kind]; dup {
		panic(fmt.Sprintf("targets: Register(%q) twice", t.Kind))
	}
	registry.kinds[t.Kind] = t
}

// ErrUnknown is a target kind that is not registered.
var ErrUnknown = errors.New("unknown target kind")

// Lookup returns the kind of that name; "" is the software switch. An
// unknown kind's error lists the registered ones.
func Lookup(kind string) (Target, error) {
	if kind == "" {
		kind = Softswitch
	}
	registry.RLock()
	t, ok := registry.kinds[kind]
	registry.RUnlock()
	if !ok {
		return Target{}, fmt.Errorf("%w %q: want %s", ErrUnknown, kind, orList(Kinds()))
	}
	return t, nil
}

// Kinds lists the registered kinds, the software switch first.
func Kinds() []string {
	registry.RLock()
	kinds := make([]string, 0, len(registry.kinds))
	for k := range registry.kinds {
		kinds = append(kinds, k)
	}
	registry.RUnlock()
	slices.SortFunc(kinds, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == Softswitch:
			return -1
		case b == Softswitch:
			return 1
		}
		return strings.Compare(a, b)
	})
	return kinds
}

// Help describes the registered kinds for --target-kind's help.
func Help() string {
	var parts []string
	for _, k := range Kinds() {
		t, _ := Lookup(k)
		parts = append(parts, k+" ("+t.Summary+")")
	}
	return orList(parts)
}

// KindsWhere lists the registered kinds for which keep holds, in Kinds'
// order; keep sees each kind's capabilities at its default packet size.
func KindsWhere(keep func(Target, Capabilities) bool) []string {
	var out []string
	for _, k := range Kinds() {
		t, err := Lookup(k)
		if err != nil {
			continue
		}
		c, err := t.Capabilities(0)
		if err == nil && keep(t, c) {
			out = append(out, k)
		}
	}
	return out
}

// DeviceConfigHelp says, for --device-config's help, what each kind that
// runs a compiled program wants.
func DeviceConfigHelp() string {
	var parts []string
	for _, k := range KindsWhere(func(t Target, _ Capabilities) bool { return t.DeviceConfig != nil }) {
		t, _ := Lookup(k)
		parts = append(parts, k+": "+t.DeviceConfigNeeds)
	}
	return strings.Join(parts, "; ")
}

// ParseP4Info parses P4Info text (the format p4c writes).
func ParseP4Info(text []byte) (*p4configv1.P4Info, error) {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(text, info); err != nil {
		return nil, fmt.Errorf("parse P4Info: %w", err)
	}
	return info, nil
}

func orList(s []string) string {
	switch len(s) {
	case 0:
		return "none"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
