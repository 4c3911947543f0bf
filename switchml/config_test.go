package switchml

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/switchml/dtype"
)

func TestConfigValidation(t *testing.T) {
	good := Config{Job: "j", Rank: 1, Workers: 4}.withDefaults()
	if err := good.validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no job", func(c *Config) { c.Job = "" }, "Job is empty"},
		{"rank too big", func(c *Config) { c.Rank = 4 }, "Rank = 4"},
		{"negative rank", func(c *Config) { c.Rank = -1 }, "Rank = -1"},
		{"no workers", func(c *Config) { c.Workers = 0 }, "world size"},
		{"compat packet size", func(c *Config) { c.PacketElements = 100 }, "32, 64, 128 or 256"},
		{"extended packet size", func(c *Config) { c.Extended, c.PacketElements = true, 4096 }, "1..2048"},
		{"compat workers", func(c *Config) { c.Workers, c.Rank = 33, 0 }, "allows 32"},
		{"lanes", func(c *Config) { c.Lanes = 65 }, "Lanes = 65"},
		{"transport", func(c *Config) { c.Transport = "dpdk" }, "Transport = dpdk"},
		{"window", func(c *Config) { c.Window = 5000 }, "Window = 5000"},
		{"faults", func(c *Config) { c.Faults.Drop = 2 }, "Faults.Drop = 2: a drop probability"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "Timeout = -1s: must not be negative"},
		{"negative join timeout", func(c *Config) { c.JoinTimeout = -time.Second }, "JoinTimeout = -1s: must not be negative"},
		{"wire bits", func(c *Config) { c.WireBits = 8 }, "WireBits = 8: want 0"},
		{"16-bit sparse", func(c *Config) { c.WireBits, c.Sparse, c.Extended = 16, true, true }, "WireBits = 16: the sparse mode sends 32-bit values"},
		{"16-bit world", func(c *Config) { c.WireBits, c.Extended, c.Workers = 16, true, 300 }, "serves up to 256 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			err := c.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for _, bits := range []int{0, 16, 32} {
		c := good
		c.WireBits = bits
		if err := c.validate(); err != nil {
			t.Errorf("WireBits %d rejected: %v", bits, err)
		}
	}
	ext := good
	ext.Extended, ext.Workers, ext.PacketElements = true, 100, 1000
	if err := ext.validate(); err != nil {
		t.Fatalf("extended config with 100 workers and 1000 values rejected: %v", err)
	}
}

// A ConfigError lists every invalid field with its value, and restates
// itself under other names (a command's flags) without losing the advice.
func TestConfigErrorNamesFields(t *testing.T) {
	err := Config{Job: "j", Rank: 0, Workers: 40, PacketElements: 3000, GiveUp: -time.Second}.Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Validate() = %v (%T), want a *ConfigError", err, err)
	}
	var fields []string
	for _, f := range ce.Fields {
		fields = append(fields, f.Field())
	}
	if want := []string{"PacketElements", "Workers", "GiveUp"}; !slices.Equal(fields, want) {
		t.Fatalf("invalid fields %v, want %v", fields, want)
	}
	if ce.Fields[0].Value != 3000 || ce.Fields[2].Value != -time.Second {
		t.Errorf("values %v and %v, want 3000 and -1s", ce.Fields[0].Value, ce.Fields[2].Value)
	}
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field() != "PacketElements" {
		t.Errorf("errors.As(*field.Error) = %v, want the PacketElements error", fe)
	}

	const goText = "switchml: bad config: PacketElements = 3000: the compatible header carries 32, 64, 128 or 256; set Extended for other sizes\n" +
		"Workers = 40: the compatible format allows 32; set Extended for more\n" +
		"GiveUp = -1s: must not be negative (0 takes the default)"
	if err.Error() != goText {
		t.Errorf("Error() =\n%s\nwant\n%s", err, goText)
	}
	flag := func(field string) string { return "--" + strings.ToLower(field) }
	const flagText = "--packetelements = 3000: the compatible header carries 32, 64, 128 or 256; set --extended for other sizes\n" +
		"--workers = 40: the compatible format allows 32; set --extended for more\n" +
		"--giveup = -1s: must not be negative (0 takes the default)"
	if got := field.Named(err, flag).Error(); got != "switchml: bad config: "+flagText {
		t.Errorf("Named(flags) =\n%s\nwant\n%s", got, flagText)
	}

	rank := Config{Job: "j", Rank: 4, Workers: 4}.Validate()
	if !errors.As(rank, &fe) || fe.Text(flag) != "--rank = 4: want 0 <= rank < --workers (4)" {
		t.Errorf("rank error restated as %q", fe.Text(flag))
	}
	if job := (Config{Workers: 1}).Validate(); !errors.As(job, &fe) || fe.Text(flag) != "--job is empty: name the job (every rank uses the same name)" {
		t.Errorf("job error restated as %q", fe.Text(flag))
	}
	if err := (Config{Job: "j", Workers: 1}).Validate(); err != nil {
		t.Errorf("Validate() of a config whose zero fields take defaults = %v", err)
	}
}

func TestInFlags(t *testing.T) {
	err := Config{Job: "j", Workers: 2, Rank: 0, PacketElements: 100, Lanes: 99}.Validate()
	flags := map[string]string{"PacketElements": "packet-elements", "Extended": "extended"}
	got := InFlags(fmt.Errorf("joining: %w", err), flags)
	const want = "joining: switchml: bad config: Lanes = 99: want 1..64\n" +
		"--packet-elements = 100: the compatible header carries 32, 64, 128 or 256; set --extended for other sizes"
	if got.Error() != want {
		t.Errorf("InFlags() =\n%s\nwant\n%s", got, want)
	}
	var ce *ConfigError
	if !errors.As(got, &ce) || len(ce.Fields) != 2 {
		t.Errorf("InFlags() does not unwrap to the ConfigError: %v", ce)
	}
	other := errors.New("controller unreachable")
	if InFlags(other, flags) != other {
		t.Errorf("InFlags changed an error that holds no ConfigError")
	}
}

func TestJoinBadConfigFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ce *ConfigError
	if _, err := Join(ctx, Config{Workers: 2, Rank: 5}); !errors.As(err, &ce) {
		t.Fatalf("Join with a bad config = %v, want a *ConfigError", err)
	}
}

func TestJoinWithoutController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Join(ctx, Config{Controller: "127.0.0.1:1", Job: "j", Workers: 1})
	if !errors.Is(err, ErrControllerUnreachable) {
		t.Fatalf("Join without a controller = %v, want ErrControllerUnreachable", err)
	}
}

func TestNeedsExtended(t *testing.T) {
	for _, c := range []struct {
		workers, elements int
		want              bool
	}{
		{4, 0, false}, {4, 256, false}, {32, 32, false},
		{4, 1000, true}, {4, 2048, true}, {33, 256, true},
	} {
		if got := NeedsExtended(c.workers, c.elements); got != c.want {
			t.Errorf("NeedsExtended(%d, %d) = %v, want %v", c.workers, c.elements, got, c.want)
		}
		// What it says agrees with the validation of Config.
		cfg := Config{Job: "j", Rank: 0, Workers: c.workers, PacketElements: c.elements}.withDefaults()
		if err := cfg.validate(); (err != nil) != c.want {
			t.Errorf("%d workers, %d values: compatible config error %v, NeedsExtended %v", c.workers, c.elements, err, c.want)
		}
	}
}

func TestFallbackConfigValidation(t *testing.T) {
	good := Config{Job: "j", Rank: 1, Workers: 3, Fallback: FallbackRing, FallbackOnLoss: true,
		FallbackListen: "127.0.0.1:0", FallbackPeers: []string{"h0:4000", "h1:4000", "h2:4000"}}.withDefaults()
	if err := good.validate(); err != nil {
		t.Fatalf("fallback config rejected: %v", err)
	}
	big := Config{Job: "j", Workers: 40, Fallback: FallbackRing}.withDefaults()
	if err := big.validate(); err != nil {
		t.Fatalf("40 workers with the ring to fall back to rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"unknown fallback", func(c *Config) { c.Fallback = "tree" }, `Fallback = tree: want "" `},
		{"on loss without the ring", func(c *Config) { c.Fallback = ""; c.FallbackPeers, c.FallbackListen = nil, "" }, `FallbackOnLoss = true: needs Fallback = "ring"`},
		{"listen without a port", func(c *Config) { c.FallbackListen = "127.0.0.1" }, "FallbackListen = 127.0.0.1: want host:port"},
		{"too few peers", func(c *Config) { c.FallbackPeers = c.FallbackPeers[:2] }, "one ring address per rank"},
		{"peer without a port", func(c *Config) { c.FallbackPeers = []string{"h0:4000", "h1:0", "h2:4000"} }, "rank 1's address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			err := c.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestShmTimeoutDefault: shared-memory lanes default to the longer
// timeout; one given is kept, and other transports keep theirs.
func TestShmTimeoutDefault(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, DefaultTimeout},
		{Config{Transport: TransportUDP}, DefaultTimeout},
		{Config{Transport: TransportShm}, DefaultShmTimeout},
		{Config{Transport: TransportShm, Timeout: 3 * time.Millisecond}, 3 * time.Millisecond},
	} {
		if got := c.cfg.withDefaults().Timeout; got != c.want {
			t.Errorf("transport %q, timeout %v: got %v, want %v", c.cfg.Transport, c.cfg.Timeout, got, c.want)
		}
	}
}

// TestJoinAtAnotherGRPCServer: a controller address that answers gRPC
// without the job service (the switch's P4Runtime port, given by mistake)
// fails at once, saying so.
func TestJoinAtAnotherGRPCServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Join(ctx, Config{Controller: lis.Addr().String(), Job: "j", Workers: 1})
	if !errors.Is(err, ErrControllerUnreachable) || !strings.Contains(err.Error(), "not a switchml controller") || !strings.Contains(err.Error(), "P4Runtime port") {
		t.Fatalf("Join at a gRPC server without the job service = %v, want ErrControllerUnreachable naming the P4Runtime port", err)
	}
}

// TestWireBitsPerType: what each type travels at, by Config.
func TestWireBitsPerType(t *testing.T) {
	for _, tc := range []struct {
		bits   int
		sparse bool
		want   map[string]int
	}{
		{0, false, map[string]int{"float32": 32, "float16": 16, "bfloat16": 16, "int32": 32}},
		{16, false, map[string]int{"float32": 16, "float16": 16, "bfloat16": 16, "int32": 32}},
		{32, false, map[string]int{"float32": 32, "float16": 32, "bfloat16": 32, "int32": 32}},
		{0, true, map[string]int{"float32": 32, "float16": 32, "bfloat16": 32, "int32": 32}},
	} {
		c := Config{Job: "j", Workers: 4, WireBits: tc.bits, Sparse: tc.sparse}
		for name, want := range tc.want {
			codec, err := dtype.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.WireWidth(codec); got != want {
				t.Errorf("WireBits %d sparse %v: %s travels at %d bits, want %d", tc.bits, tc.sparse, name, got, want)
			}
		}
	}
}
