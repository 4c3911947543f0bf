package main

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/switchml"
)

// TestDemo runs the README's first command, over UDP and over shared
// memory, on a small tensor: every rank must report a verified sum, no
// failure, and the transport asked for.
func TestDemo(t *testing.T) {
	needProcesses(t)
	row := regexp.MustCompile(`(?m)^\s+(\d+)\s+\S+ s\s+\S+ Gb/s\s+(\S+)\s+\d+\s+\S+ s\s+(\S+)\s+(\d+) bits\s*$`)
	for _, tc := range []struct {
		name, transport, wire string
		args                  []string
	}{
		{"udp", "udp", "32", nil},
		{"shm", "shm", "32", nil},
		// Verified within the 16-bit wire's bound, which the workers
		// choose from their packets' size at 16 bits.
		{"udp-bfloat16", "udp", "16", []string{"--dtype", "bfloat16"}},
		{"udp-wire-bits-16", "udp", "16", []string{"--wire-bits", "16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append([]string{"demo", "--workers", "3", "--elements", "100000", "--iters", "2", "--transport", tc.transport}, tc.args...)
			out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
			rows := row.FindAllStringSubmatch(string(out), -1)
			if len(rows) != 3 {
				t.Fatalf("demo printed %d rank rows, want 3:\n%s", len(rows), out)
			}
			for _, r := range rows {
				if r[2] != "true" || r[3] != tc.transport || r[4] != tc.wire {
					t.Errorf("rank %s: verified %s, transport %s, %s bits; want true, %s, %s bits", r[1], r[2], r[3], r[4], tc.transport, tc.wire)
				}
			}
			if !strings.Contains(string(out), "checked element by element") {
				t.Errorf("no verification summary:\n%s", out)
			}
		})
	}
}

// TestDemoCheck: the demo refuses what its workers would, naming the flag,
// and picks the lanes and window measured best for the transport.
func TestDemoCheck(t *testing.T) {
	base := demo{Workers: 4, Elements: 100, DType: "float32", Iters: 1, PacketElements: 256, Transport: switchml.TransportUDP}
	for _, tc := range []struct {
		change func(*demo)
		want   string
	}{
		{func(d *demo) { d.Workers = 0 }, "--workers must be at least 1"},
		{func(d *demo) { d.Transport = "afxdp" }, `--transport "afxdp": want udp or shm`},
		{func(d *demo) { d.DType = "float64" }, `--dtype: unknown dtype "float64"`},
		{func(d *demo) { d.Elements = 0 }, "--elements 0"},
		{func(d *demo) { d.Iters = 0 }, "--iters 0"},
		{func(d *demo) { d.Drop = 1 }, "--drop 1"},
		{func(d *demo) { d.Window = -1 }, "--window -1"},
	} {
		d := base
		tc.change(&d)
		if err := d.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error with %q", d, err, tc.want)
		}
	}
	d := base
	d.PacketElements = 3000
	var ce *switchml.ConfigError
	if err := d.Check(); !errors.As(err, &ce) {
		t.Errorf("3000 values per packet without the extended header: %v; want a ConfigError", err)
	}

	for kind, want := range map[string][2]int{switchml.TransportUDP: {switchml.DefaultLanes, switchml.DefaultWindow}, switchml.TransportShm: {1, 256}} {
		d := base
		d.Transport = kind
		if err := d.Check(); err != nil || d.Lanes != want[0] || d.Window != want[1] {
			t.Errorf("%s: %v, %d lanes x %d; want %d x %d", kind, err, d.Lanes, d.Window, want[0], want[1])
		}
	}
	d = base
	d.Lanes, d.Window = 3, 7
	if err := d.Check(); err != nil || d.Lanes != 3 || d.Window != 7 {
		t.Errorf("lanes and window given: %v, %d x %d; want 3 x 7", err, d.Lanes, d.Window)
	}
}
