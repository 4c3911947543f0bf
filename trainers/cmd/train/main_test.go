package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/trainers/train"
)

// The launcher re-executes its own binary as workers; under `go test` that
// binary is the test binary, which then behaves as the command.
func TestMain(m *testing.M) {
	if os.Getenv("TRAIN_TEST_AS_MAIN") == "1" {
		os.Args = append([]string{os.Args[0]}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func launchForTest(t *testing.T, args ...string) []train.EpochResult {
	t.Helper()
	t.Setenv("TRAIN_TEST_AS_MAIN", "1")
	f, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := launch(ctx, f, args, &out); err != nil {
		t.Fatalf("launch %v: %v", args, err)
	}
	var res []train.EpochResult
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r train.EpochResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		res = append(res, r)
	}
	return res
}

func TestLaunchRingWorkersSynthetic(t *testing.T) {
	dir := t.TempDir()
	onnxPath := filepath.Join(dir, "mlp.onnx")
	res := launchForTest(t, "--model", "mlp", "--dataset", "synthetic", "--workers", "2", "--backend", "ring",
		"--epochs", "2", "--batch", "32", "--train-limit", "3000", "--json", "--quiet",
		"--checkpoint-dir", filepath.Join(dir, "ck"), "--onnx", onnxPath)
	if len(res) != 2 || res[1].Epoch != 2 || res[1].Workers != 2 || res[1].Backend != "ring" {
		t.Fatalf("results %+v", res)
	}
	if res[1].TestAccuracy < 0.9 {
		t.Fatalf("synthetic accuracy %.3f, want >= 0.9", res[1].TestAccuracy)
	}
	if st, err := os.Stat(onnxPath); err != nil || st.Size() < 1000 {
		t.Fatalf("ONNX file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ck", "checkpoint.gob")); err != nil {
		t.Fatal(err)
	}
}

func TestFlagsRejectNonsense(t *testing.T) {
	for _, args := range [][]string{
		{"--model", "resnet"},
		{"--backend", "mpi"},
		{"--dataset", "imagenet"},
		{"--workers", "0"},
		{"--eval-every", "-1"},
		{"stray"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// Bad flags are refused naming the flag, never a Go field or identifier,
// and saying what to do.
func TestFlagErrorsNameFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--backend", "switchml", "--packet-elements", "-1"}, []string{"--packet-elements = -1", "want 0"}},
		{[]string{"--backend", "switchml", "--packet-elements", "4096"}, []string{"--packet-elements = 4096", "1..2048"}},
		{[]string{"--backend", "switchml", "--wire-bits", "8"}, []string{"--wire-bits = 8", "want 0"}},
		{[]string{"--model", "resnet"}, []string{"--model", "known:"}},
		{[]string{"--backend", "mpi"}, []string{"--backend", "want exact, ring or switchml"}},
		{[]string{"--backend", "switchml-sparse"}, []string{"--backend", "want exact, ring or switchml"}},
		{[]string{"--workers", "0"}, []string{"--workers 0", "1..64"}},
	} {
		_, err := parseFlags(tc.args)
		if err == nil {
			t.Errorf("%v accepted", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not contain %q", tc.args, err, w)
			}
		}
		for _, goName := range []string{"PacketElements", "Extended", "Workers", "Config"} {
			if strings.Contains(err.Error(), goName) {
				t.Errorf("%v: error %q names %s", tc.args, err, goName)
			}
		}
	}
	// The ring and exact backends do not use the packet size.
	if _, err := parseFlags([]string{"--backend", "ring", "--packet-elements", "-1"}); err != nil {
		t.Errorf("--packet-elements refused for the ring backend: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	for model, want := range map[string]int64{"resnet50": 25557032, "vgg19": 143667240, "ssd": 35641826, "cnn": 206970, "cnn-wide": 1621754} {
		f, err := parseFlags([]string{"--model", model, "--describe"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := describe(f, &out); err != nil {
			t.Fatal(err)
		}
		var d Description
		if err := json.Unmarshal(out.Bytes(), &d); err != nil {
			t.Fatalf("%s: %q: %v", model, out.String(), err)
		}
		if d.Model != model || d.Parameters != want {
			t.Errorf("%s: described as %+v, want %d parameters", model, d, want)
		}
	}
}

// A benchmark model trains on synthetic input over two workers and rank 0
// reports the timed steps.
func TestBenchModelSteps(t *testing.T) {
	t.Setenv("TRAIN_TEST_AS_MAIN", "1")
	args := []string{"--model", "ncf", "--workers", "2", "--backend", "ring", "--batch", "32", "--steps", "2", "--warmup-steps", "1", "--json", "--quiet"}
	f, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := launch(ctx, f, args, &out); err != nil {
		t.Fatal(err)
	}
	var r train.ThroughputResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	if r.Model != "ncf" || r.Workers != 2 || r.Parameters != 31832577 || len(r.StepS) != 2 || r.MedianStepS <= 0 {
		t.Errorf("result %+v", r)
	}
}
