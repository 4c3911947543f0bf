package targets

import (
	"fmt"
	"os"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/p4/programs"
	"github.com/switchml/switchml-go/p4/tna"
)

// Tofino runs the TNA program (p4/tna). Its device config is read as the
// P4Runtime server on the switch expects it: this is where a packer of the
// compiler's outputs plugs in. Registers are written over P4Runtime (p4/README.md
// says why bf_switchd refuses that).
func init() {
	Register(Target{
		Kind:              Tofino,
		Summary:           "a Tofino running the TNA program",
		P4Info:            func() (*p4configv1.P4Info, error) { return ParseP4Info(tna.P4InfoText) },
		DeviceConfig:      ReadDeviceConfig,
		DeviceConfigNeeds: "the pipeline package the switch's P4Runtime server expects (see p4/README.md)",
		Capabilities:      FixedProgram,
	})
}

// FixedProgram is the capabilities of a P4 program built from p4/programs:
// one packet size with the compatible header, a worker bitmap, results
// addressed to MACs and ports.
func FixedProgram(int) (Capabilities, error) {
	return Capabilities{PacketElements: []int{programs.Elements}, MaxWorkers: programs.MaxWorkers, NeedsMAC: true, NeedsPortMap: true}, nil
}

// ReadDeviceConfig reads a device config file as it is (a BMv2 JSON, a
// Tofino binary).
func ReadDeviceConfig(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read --device-config: %w", err)
	}
	return b, nil
}
