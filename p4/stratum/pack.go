// Package stratum builds the device config that Stratum's Tofino agent
// (stratum_bfrt) takes in a P4Runtime SetForwardingPipelineConfig: a
// BfPipelineConfig message (bf.proto, from Stratum's
// stratum/hal/lib/barefoot/bf.proto), packed from bf-p4c's output directory.
//
// Stratum reads p4_device_config as a serialized BfPipelineConfig
// (ExtractBfPipelineConfig in stratum/hal/lib/barefoot/bf_pipeline_utils.cc);
// stratum_bfrt refuses PI's older packing. Stratum's own packer
// (bf_pipeline_builder, stratum/hal/bin/barefoot/bf_pipeline_builder.cc)
// reads the .conf file that the SDE's build writes; open-source bf-p4c
// writes none, so Pack reads the same facts from the compiler's
// manifest.json and assigns the pipes as the compiler's own conf generator
// (p4c-gen-conf) does.
package stratum

//go:generate protoc --go_out=. --go_opt=paths=source_relative bf.proto

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"
)

// MaxPipes is the number of hardware pipes the pipelines of a program
// share out (Tofino 1 and Tofino 2 have at most four).
const MaxPipes = 4

// manifest is the part of bf-p4c's manifest.json Pack reads.
type manifest struct {
	Target   string `json:"target"`
	Programs []struct {
		ProgramName string `json:"program_name"`
		Pipes       []struct {
			PipeID   int    `json:"pipe_id"`
			PipeName string `json:"pipe_name"`
			Files    struct {
				Context struct {
					Path string `json:"path"`
				} `json:"context"`
			} `json:"files"`
		} `json:"pipes"`
	} `json:"programs"`
}

// Target returns the chip bf-p4c compiled the program in dir for, as its
// manifest.json says ("tofino" or "tofino2").
func Target(dir string) (string, error) {
	m, err := readManifest(dir)
	if err != nil {
		return "", err
	}
	return m.Target, nil
}

func readManifest(dir string) (*manifest, error) {
	mpath := filepath.Join(dir, "manifest.json")
	mb, err := os.ReadFile(mpath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("stratum: %s is missing: is %s the directory bf-p4c wrote (its -o)?", mpath, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("stratum: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("stratum: %s: %v", mpath, err)
	}
	return &m, nil
}

// Build reads bf-p4c's output directory dir (the one given to bf-p4c -o)
// and returns the pipeline config Stratum takes: p4_name is the program's
// name without ".p4", bfruntime_info is bfrt.json, and each of the
// program's pipelines is a profile with its context.json and binary
// (tofino.bin, or tofino2.bin for Tofino 2) and the hardware pipes it runs
// on. A file that is missing is named in the error.
func Build(dir string) (*BfPipelineConfig, error) {
	m, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	mpath := filepath.Join(dir, "manifest.json")
	if len(m.Programs) != 1 {
		return nil, fmt.Errorf("stratum: %s: %d programs: Stratum takes one", mpath, len(m.Programs))
	}
	prog := m.Programs[0]
	name := strings.TrimSuffix(filepath.Base(prog.ProgramName), ".p4")
	if name == "" {
		return nil, fmt.Errorf("stratum: %s names no program", mpath)
	}
	var binName string
	switch {
	case m.Target == "tofino":
		binName = "tofino.bin"
	case strings.HasPrefix(m.Target, "tofino2"):
		binName = "tofino2.bin"
	default:
		return nil, fmt.Errorf("stratum: %s: target %q: want tofino or tofino2 (bf-p4c --target)", mpath, m.Target)
	}
	n := len(prog.Pipes)
	if n == 0 || n > MaxPipes || MaxPipes%n != 0 {
		return nil, fmt.Errorf("stratum: %s: %d pipelines: want 1, 2 or 4", mpath, n)
	}
	bfrt, err := readFile(dir, "bfrt.json")
	if err != nil {
		return nil, err
	}
	cfg := &BfPipelineConfig{P4Name: name, BfruntimeInfo: bfrt}
	for i, p := range prog.Pipes {
		if p.PipeName == "" || strings.ContainsAny(p.PipeName, `/\`) || p.PipeName == ".." {
			return nil, fmt.Errorf("stratum: %s: pipeline %d has no usable name (%q)", mpath, i, p.PipeName)
		}
		ctx, err := readFile(dir, filepath.Join(p.PipeName, "context.json"))
		if err != nil {
			return nil, err
		}
		bin, err := readFile(dir, filepath.Join(p.PipeName, binName))
		if err != nil {
			return nil, err
		}
		cfg.Profiles = append(cfg.Profiles, &BfPipelineConfig_Profile{
			ProfileName: p.PipeName, Context: ctx, Binary: bin, PipeScope: PipeScope(m.Target, n, i),
		})
	}
	return cfg, nil
}

// PipeScope returns the hardware pipes pipeline i of n runs on, as the
// compiler's conf generator (p4c-gen-conf) assigns them: one pipeline runs
// on all four pipes; with several, Tofino 1 interleaves them (on a folded
// 32-port system pipes 0 and 2 face the ports, 1 and 3 are internal) and
// Tofino 2 gives each a block of consecutive pipes. The SDE loads a
// pipeline only on the pipes in its scope, so an empty scope would load it
// nowhere.
func PipeScope(target string, n, i int) []uint32 {
	per := MaxPipes / n
	scope := make([]uint32, per)
	for x := range scope {
		if strings.HasPrefix(target, "tofino2") {
			scope[x] = uint32(per*i + x)
		} else {
			scope[x] = uint32(x*n + i)
		}
	}
	return scope
}

// Pack returns Build's config serialized, the bytes that go into
// ForwardingPipelineConfig.p4_device_config for stratum_bfrt.
func Pack(dir string) ([]byte, error) {
	cfg, err := Build(dir)
	if err != nil {
		return nil, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("stratum: encode BfPipelineConfig: %w", err)
	}
	return b, nil
}

// Unpack decodes a packed config (the inverse of Pack).
func Unpack(b []byte) (*BfPipelineConfig, error) {
	cfg := &BfPipelineConfig{}
	if err := proto.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("stratum: decode BfPipelineConfig: %w", err)
	}
	return cfg, nil
}

func readFile(dir, rel string) ([]byte, error) {
	path := filepath.Join(dir, rel)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("stratum: %s is missing from bf-p4c's output %s: did the compilation finish?", rel, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("stratum: %w", err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("stratum: %s is empty (did the compilation finish?)", path)
	}
	return b, nil
}
