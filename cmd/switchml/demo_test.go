package main

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the README's first command, over UDP and over shared
// memory, on a small tensor: every rank must report a verified sum, no
// failure, and the transport asked for.
func TestDemo(t *testing.T) {
	needProcesses(t)
	row := regexp.MustCompile(`(?m)^\s+(\d+)\s+\S+ s\s+\S+ Gb/s\s+(\S+)\s+\d+\s+\S+ s\s+(\S+)\s*$`)
	for _, kind := range []string{"udp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, "demo", "--workers", "3", "--elements", "100000", "--iters", "2", "--transport", kind).CombinedOutput()
			if err != nil {
				t.Fatalf("demo --transport %s: %v\n%s", kind, err, out)
			}
			rows := row.FindAllStringSubmatch(string(out), -1)
			if len(rows) != 3 {
				t.Fatalf("demo printed %d rank rows, want 3:\n%s", len(rows), out)
			}
			for _, r := range rows {
				if r[2] != "true" || r[3] != kind {
					t.Errorf("rank %s: verified %s, transport %s; want true, %s", r[1], r[2], r[3], kind)
				}
			}
			if !strings.Contains(string(out), "checked element by element") {
				t.Errorf("no verification summary:\n%s", out)
			}
		})
	}
}
