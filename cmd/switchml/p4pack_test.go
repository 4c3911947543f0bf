package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/stratum"
)

// `switchml p4 pack --target tofino --out FILE DIR` writes the packed
// BfPipelineConfig of a directory laid out as bf-p4c's output, and names
// what is missing from one that is not.
func TestStratumPackCommand(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"manifest.json":     []byte(`{"target": "tofino", "programs": [{"program_name": "switchml.p4", "pipes": [{"pipe_id": 0, "pipe_name": "pipe"}]}]}`),
		"bfrt.json":         []byte(`{"tables": []}`),
		"pipe/context.json": []byte(`{"program_name": "switchml.p4"}`),
		"pipe/tofino.bin":   {0, 1, 2, 3},
	}
	for name, b := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "switchml.pb.bin")
	if b, err := binaryCmd(nil, "p4", "pack", "--target", "tofino", "--out", out, dir).CombinedOutput(); err != nil {
		t.Fatalf("p4 pack: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := stratum.Unpack(b)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetP4Name() != "switchml" || !bytes.Equal(cfg.GetBfruntimeInfo(), files["bfrt.json"]) || len(cfg.GetProfiles()) != 1 ||
		!bytes.Equal(cfg.GetProfiles()[0].GetContext(), files["pipe/context.json"]) || !bytes.Equal(cfg.GetProfiles()[0].GetBinary(), files["pipe/tofino.bin"]) {
		t.Errorf("packed config %v", cfg)
	}

	if err := os.Remove(filepath.Join(dir, "pipe", "tofino.bin")); err != nil {
		t.Fatal(err)
	}
	b, err = binaryCmd(nil, "p4", "pack", "--target", "tofino", "--out", out, dir).CombinedOutput()
	if err == nil || !strings.Contains(string(b), "pipe/tofino.bin is missing") {
		t.Errorf("p4 pack without tofino.bin: %v\n%s", err, b)
	}
}
