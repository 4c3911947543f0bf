package targets

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/programs"
	"github.com/switchml/switchml-go/p4/stratum"
	"github.com/switchml/switchml-go/p4/tna"
)

// Tofino runs the TNA program (p4/tna) behind Stratum (stratum_bfrt; see
// docs/tofino.md). Its device config is Stratum's BfPipelineConfig, packed
// from bf-p4c's output directory or read as "switchml p4 pack" wrote it;
// a program compiled for Tofino 2 has its own P4Info (the per-slot job
// tag), and so has its leaf role. Registers are written over P4Runtime.
func init() {
	Register(Target{
		Kind:              Tofino,
		Summary:           "a Tofino running the TNA program, behind Stratum",
		P4Info:            tofinoP4Info,
		CheckP4Info:       stratumP4Info,
		DeviceConfig:      tofinoDeviceConfig,
		DeviceConfigNeeds: "bf-p4c's output directory (packed into Stratum's BfPipelineConfig) or the file \"switchml p4 pack\" wrote",
		Capabilities:      tofinoCapabilities,
	})
}

// TofinoPortsPerPipe is the number of device ports per pipe on Tofino 1
// and Tofino 2: a device port is 9 bits, the top two the pipe
// (ingress_port[8:7]), so pipe = port >> 7.
const TofinoPortsPerPipe = 128

// tofinoCapabilities are FixedProgram's, on a chip whose registers live
// in each pipe: the program is loaded on every pipe (the pipe scope Pack
// writes), and recirculates within the pipe a packet entered by.
func tofinoCapabilities(maxElements int) (Capabilities, error) {
	c, err := FixedProgram(maxElements)
	c.PortsPerPipe = TofinoPortsPerPipe
	return c, err
}

// FixedProgram is the capabilities of a P4 program built from p4/programs:
// one packet size with the compatible header, a worker bitmap, results
// addressed to MACs and ports.
func FixedProgram(int) (Capabilities, error) {
	return Capabilities{PacketElements: []int{programs.Elements}, MaxWorkers: programs.MaxWorkers, NeedsMAC: true, NeedsPortMap: true}, nil
}

// ReadDeviceConfig reads a device config file as it is (a BMv2 JSON).
func ReadDeviceConfig(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the device config: %w", err)
	}
	return b, nil
}

// tofinoP4Info is the P4Info of the program compiled in deviceConfig: the
// Tofino 2 one for bf-p4c's output directory of a Tofino 2 build (the
// leaf role's where the build has it), else the Tofino 1 one.
func tofinoP4Info(deviceConfig string) (*p4configv1.P4Info, error) {
	text := tna.P4InfoText
	if st, err := os.Stat(deviceConfig); err == nil && st.IsDir() {
		// An unreadable manifest is the device config's to report.
		if chip, _ := stratum.Target(deviceConfig); chip == "tofino2" {
			text = tna.P4InfoTofino2Text
			if hasLeafRole(deviceConfig) {
				text = tna.P4InfoTofino2LeafText
			}
		}
	}
	return ParseP4Info(text)
}

// hasLeafRole reports whether the program bf-p4c compiled into dir has
// the leaf role (-DSWITCHML_LEAF): its bfrt.json lists the uplink table
// under the pipeline instance ("pipe.SwitchMLIngress.uplink"). An
// unreadable bfrt.json is the device config's to report.
func hasLeafRole(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "bfrt.json"))
	if err != nil {
		return false
	}
	var bfrt struct {
		Tables []struct {
			Name string `json:"name"`
		} `json:"tables"`
	}
	if json.Unmarshal(b, &bfrt) != nil {
		return false
	}
	for _, t := range bfrt.Tables {
		if p4info.Names(t.Name, p4info.TableUplink) {
			return true
		}
	}
	return false
}

// tofinoDeviceConfig is what --device-config gives a Tofino: bf-p4c's
// output directory, packed here, or a file "switchml p4 pack" wrote
// (checked to be a BfPipelineConfig with at least one profile).
func tofinoDeviceConfig(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("device config: %w", err)
	}
	if st.IsDir() {
		b, err := stratum.Pack(path)
		if err != nil {
			return nil, fmt.Errorf("device config: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("device config: %w", err)
	}
	cfg, err := stratum.Unpack(b)
	if err != nil || cfg.GetP4Name() == "" || len(cfg.GetProfiles()) == 0 {
		return nil, fmt.Errorf("device config %s is not a packed Stratum pipeline config: want bf-p4c's output directory or switchml p4 pack's file", path)
	}
	return b, nil
}

// stratumP4Info refuses a P4Info whose registers or counters are Tofino
// externs: Stratum maps only standard P4Runtime registers and counters to
// the switch's objects (BfrtIdMapper::PushForwardingPipelineConfig in
// stratum/hal/lib/barefoot/bfrt_id_mapper.cc), so every pool reset and
// counter read would fail.
func stratumP4Info(info *p4configv1.P4Info) error {
	for _, e := range info.GetExterns() {
		if n := e.GetExternTypeName(); n == "Register" || n == "Counter" {
			return fmt.Errorf("the P4Info lists its %ss as Tofino externs: compile with bf-p4c --p4runtime-force-std-externs", n)
		}
	}
	return nil
}
