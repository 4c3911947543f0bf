package benchmarks

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/switchml"
)

// TestDemoCheck: the demo refuses what its workers would, naming the flag,
// and picks the lanes and window measured best for the transport.
func TestDemoCheck(t *testing.T) {
	base := Demo{Workers: 4, Elements: 100, DType: "float32", Iters: 1, PacketElements: 256, Transport: switchml.TransportUDP}
	for _, tc := range []struct {
		change func(*Demo)
		want   string
	}{
		{func(d *Demo) { d.Workers = 0 }, "--workers must be at least 1"},
		{func(d *Demo) { d.Transport = "afxdp" }, `--transport "afxdp": want udp or shm`},
		{func(d *Demo) { d.DType = "float64" }, `--dtype: unknown dtype "float64"`},
		{func(d *Demo) { d.Elements = 0 }, "--elements 0"},
		{func(d *Demo) { d.Iters = 0 }, "--iters 0"},
		{func(d *Demo) { d.Drop = 1 }, "--drop 1"},
		{func(d *Demo) { d.Window = -1 }, "--window -1"},
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
