package targets

import (
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/programs"
	"github.com/switchml/switchml-go/wire"
)

// DefaultSoftswitchMaxElements is the software switch's default largest
// packet (its --max-elements).
const DefaultSoftswitchMaxElements = 1024

// The software switch (switchml switch): the pipeline in Go, no compiled
// program, registers written over P4Runtime, every packet size up to its
// --max-elements with the extended header.
func init() {
	Register(Target{
		Kind:         Softswitch,
		Summary:      "the software switch",
		P4Info:       func(string) (*p4configv1.P4Info, error) { return p4info.Load() },
		Capabilities: softswitchCapabilities,
	})
}

func softswitchCapabilities(maxElements int) (Capabilities, error) {
	if maxElements == 0 {
		maxElements = DefaultSoftswitchMaxElements
	}
	if maxElements < 1 || maxElements > wire.MaxElements {
		return Capabilities{}, fmt.Errorf("max elements %d, want 1..%d", maxElements, wire.MaxElements)
	}
	var sizes []int
	for _, k := range []int{32, 64, 128, 256} {
		if k <= maxElements {
			sizes = append(sizes, k)
		}
	}
	return Capabilities{PacketElements: sizes, MaxExtendedElements: maxElements, MaxWorkers: programs.MaxWorkers, Auth: true, Tree: true, AnswersProbe: true}, nil
}
