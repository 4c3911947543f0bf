package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/switchml/switchml-go/field"
	_ "github.com/switchml/switchml-go/p4/bmv2" // the bmv2 kind registers itself
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/stratum"
	"github.com/switchml/switchml-go/p4/targets"
)

// testKind is a target kind added the way the registry says: one entry,
// with its own device-config packer and register server.
const testKind = "testswitch"

type testRegisters string

func (testRegisters) RegisterWriteRange(context.Context, string, int, int, uint64) error { return nil }

func init() {
	targets.Register(targets.Target{
		Kind:    testKind,
		Summary: "a test switch",
		P4Info:  func(string) (*p4configv1.P4Info, error) { return p4info.Load() },
		DeviceConfig: func(dir string) ([]byte, error) {
			b, err := os.ReadFile(filepath.Join(dir, "program.bin"))
			return append([]byte("packed:"), b...), err
		},
		DeviceConfigNeeds: "a directory with program.bin",
		Registers:         &targets.RegisterServer{Name: "the test register server", DefaultPort: 7777, Writer: func(addr string) targets.RegisterWriter { return testRegisters(addr) }},
		Capabilities: func(int) (targets.Capabilities, error) {
			return targets.Capabilities{PacketElements: []int{64}, MaxWorkers: 8, NeedsMAC: true, NeedsPortMap: true}, nil
		},
	})
}

// flagDefaults are the options `switchml controller` starts from.
func flagDefaults(kind string) Options {
	o := Options{TargetKind: kind, MaxElements: DefaultSoftswitchMaxElements}
	o.Target, o.Slots = "10.0.0.5:9559", 8192
	o.LeaseGrace, o.JoinTimeout, o.MaxJobsPerClient, o.MaxBytesPerClient = DefaultLeaseGrace, DefaultJoinTimeout, DefaultMaxJobsPerClient, DefaultMaxBytesPerClient
	return o
}

// bfOutput lays out a directory as bf-p4c writes it for chip.
func bfOutput(t *testing.T, chip string) string {
	t.Helper()
	dir := t.TempDir()
	bin := "tofino.bin"
	if chip == "tofino2" {
		bin = "tofino2.bin"
	}
	for name, text := range map[string]string{
		"manifest.json":     `{"target": "` + chip + `", "programs": [{"program_name": "switchml.p4", "pipes": [{"pipe_id": 0, "pipe_name": "pipe"}]}]}`,
		"bfrt.json":         `{"tables": []}`,
		"pipe/context.json": `{"program_name": "switchml.p4"}`,
		"pipe/" + bin:       "\x00\x01",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, name, text)
	}
	return dir
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOptionsPrepareLooksTheKindUp(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "program.bin", "PROGRAM")

	checkPrepareSoftswitch(t)
	checkPrepareBMv2(t)
	// Tofino: bf-p4c's output directory is packed for Stratum, and a Tofino
	// 2 build brings its own P4Info; a packed file is pushed as it is.
	for _, chip := range []string{"tofino", "tofino2"} {
		checkPrepareTofino(t, dir, chip)
	}
	checkPrepareRegisteredKind(t, dir)
}

// checkPrepareSoftswitch checks the default kind is the software switch.
func checkPrepareSoftswitch(t *testing.T) {
	t.Helper()
	soft, err := flagDefaults("").Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if soft.Switch.Kind != KindSoftswitch || soft.Switch.P4() || soft.P4Info == nil || soft.DeviceConfig != nil || soft.Registers != nil ||
		!slices.Equal(soft.Switch.PacketElements, []int{32, 64, 128, 256}) {
		t.Errorf("default kind: switch %+v, P4Info %v, device config %q, registers %v; want the software switch", soft.Switch, soft.P4Info != nil, soft.DeviceConfig, soft.Registers)
	}
}

// checkPrepareBMv2 checks a BMv2 switch and a tree of them reset their
// pools through Thrift.
func checkPrepareBMv2(t *testing.T) {
	t.Helper()
	o := flagDefaults(KindBMv2)
	o.Ports, o.SkipPipeline = ports, true
	bm, err := o.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if !bm.Switch.P4() || !bm.Switch.NeedsMAC || fmt.Sprint(bm.Registers) != "10.0.0.5:9090" || bm.P4Info.GetPkgInfo().GetArch() != "v1model" {
		t.Errorf("bmv2: switch %+v, registers %v, arch %q; want a P4 switch reset through Thrift at 10.0.0.5:9090 with the v1model P4Info", bm.Switch, bm.Registers, bm.P4Info.GetPkgInfo().GetArch())
	}

	o.Topology = parseTopology(t, `{"spine": {"p4runtime": "10.0.0.1:9559", "dataplane": "10.0.0.1:48864", "thrift": "10.0.0.1:9090"},
		"leaves": [{"p4runtime": "10.0.1.1:9559", "dataplane": "10.0.1.1:48864", "thrift": "10.0.1.1:9090", "workers": ["10.0.1.0/24"], "uplink_port": 9, "port": 1}]}`)
	if tree, err := o.Prepare(); err != nil || tree.Topology == nil || tree.Topology.Registers == nil || fmt.Sprint(tree.Topology.Registers("10.0.1.1:9090")) != "10.0.1.1:9090" {
		t.Errorf("a tree of bmv2 switches: %v; want each switch's pool reset through the Thrift server it names", err)
	}
}

// checkPrepareTofino checks a Tofino of chip takes bf-p4c's output
// directory packed for Stratum with the chip's P4Info, and a packed file
// as it is.
func checkPrepareTofino(t *testing.T, dir, chip string) {
	t.Helper()
	bf := bfOutput(t, chip)
	o := flagDefaults(KindTofino)
	o.Ports, o.DeviceConfigFile = ports, bf
	tf, err := o.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	packed, err := stratum.Pack(bf)
	if err != nil {
		t.Fatal(err)
	}
	_, tagErr := p4info.Register(tf.P4Info, p4info.RegisterPoolTag)
	if !bytes.Equal(tf.DeviceConfig, packed) || tf.Registers != nil || !tf.Switch.P4() || (tagErr == nil) != (chip == "tofino2") {
		t.Errorf("%s: device config of %d bytes (packed: %d), registers %v, P4 %v, job tag register %v; want the packed directory, P4Runtime resets and the chip's P4Info",
			chip, len(tf.DeviceConfig), len(packed), tf.Registers, tf.Switch.P4(), tagErr == nil)
	}
	file := writeFile(t, dir, chip+".pb.bin", string(packed))
	o.DeviceConfigFile = file
	if tf, err := o.Prepare(); err != nil || !bytes.Equal(tf.DeviceConfig, packed) {
		t.Errorf("%s: a packed file: %v, %d bytes; want it pushed as it is", chip, err, len(tf.DeviceConfig))
	}
}

// checkPrepareRegisteredKind checks a kind added to the registry gets its
// packer's device config, its register server and its capabilities.
func checkPrepareRegisteredKind(t *testing.T, dir string) {
	t.Helper()
	o := flagDefaults(testKind)
	o.Ports, o.DeviceConfigFile, o.RegisterServer = ports, dir, "10.0.0.9:1"
	tk, err := o.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if string(tk.DeviceConfig) != "packed:PROGRAM" || fmt.Sprint(tk.Registers) != "10.0.0.9:1" || tk.Switch.MaxWorkers != 8 || !tk.Switch.P4() {
		t.Errorf("a registered kind: device config %q, registers %v, switch %+v; want its packer's output, its register server at --bmv2-thrift, its capabilities", tk.DeviceConfig, tk.Registers, tk.Switch)
	}
}

func TestOptionsPrepareRefuses(t *testing.T) {
	dir := t.TempDir()
	garbage := writeFile(t, dir, "garbage.json", `{"not": "a program"}`)
	topology := parseTopology(t, `{"spine": {"p4runtime": "10.0.0.1:9559", "dataplane": "10.0.0.1:48864"},
		"leaves": [{"p4runtime": "10.0.1.1:9559", "dataplane": "10.0.1.1:48864", "workers": ["10.0.1.0/24"]}]}`)
	externs, err := targets.ParseP4Info([]byte(`externs { extern_type_id: 131 extern_type_name: "Register" }`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  func(*Options)
		want []string
	}{
		{"unknown kind", func(o *Options) { o.TargetKind = "tofino2" }, []string{`TargetKind "tofino2": unknown target kind "tofino2"`, "softswitch, bmv2, testswitch or tofino"}},
		{"device config on the software switch", func(o *Options) { o.DeviceConfigFile = garbage }, []string{"DeviceConfigFile is for bmv2, testswitch or tofino", "the software switch runs no compiled program"}},
		{"register server on the software switch", func(o *Options) { o.RegisterServer = "10.0.0.5:9090" }, []string{"RegisterServer is for TargetKind bmv2 or testswitch"}},
		{"auth on a P4 switch", func(o *Options) { o.TargetKind, o.Auth, o.Ports, o.SkipPipeline = KindBMv2, true, ports, true }, []string{"Auth with TargetKind bmv2", "cannot check a MAC"}},
		{"no port map", func(o *Options) { o.TargetKind, o.SkipPipeline = KindTofino, true }, []string{"TargetKind tofino needs Ports"}},
		{"no device config", func(o *Options) { o.TargetKind, o.Ports = KindTofino, ports }, []string{"TargetKind tofino needs DeviceConfigFile or SkipPipeline", "bf-p4c's output directory"}},
		{"device config the kind checks", func(o *Options) { o.TargetKind, o.Ports, o.DeviceConfigFile = KindBMv2, ports, garbage }, []string{"DeviceConfigFile " + garbage + " with the P4Info", "not a BMv2 JSON program"}},
		{"bad values", func(o *Options) { o.Slots, o.MaxElements, o.IngressLoss, o.JoinTimeout = 0, 5000, 1, 0 },
			[]string{"Slots 0", "MaxElements 5000", "IngressLoss 1", "JoinTimeout 0s"}},
		{"admin without mutual TLS", func(o *Options) { o.Admins = []string{"ops"} }, []string{"Admins names a client certificate"}},
		{"topology of Tofinos", func(o *Options) {
			o.TargetKind, o.Topology, o.Ports, o.SkipPipeline = KindTofino, topology, ports, true
		}, []string{"Topology with TargetKind tofino", "a tree runs on softswitch or bmv2"}},
		{"tofino device config that is no packed config", func(o *Options) { o.TargetKind, o.Ports, o.DeviceConfigFile = KindTofino, ports, garbage }, []string{"is not a packed Stratum pipeline config"}},
		{"tofino P4Info with Tofino externs", func(o *Options) {
			o.TargetKind, o.Ports, o.SkipPipeline, o.P4Info = KindTofino, ports, true, externs
		}, []string{"the P4Info lists its Registers as Tofino externs"}},
		{"bad MAC", func(o *Options) { o.SwitchMACAddr = "02:00" }, []string{`SwitchMACAddr "02:00"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := flagDefaults("")
			c.set(&o)
			_, err := o.Prepare()
			var fe *field.Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a field.Error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestTargetForGoesThroughTheRegistry: what a kind takes is its entry's
// capabilities, and P4 follows its port-map need.
func TestTargetForGoesThroughTheRegistry(t *testing.T) {
	tg, err := TargetFor(testKind, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Kind != testKind || tg.MaxWorkers != 8 || !tg.NeedsMAC || !tg.P4() || !slices.Equal(tg.PacketElements, []int{64}) {
		t.Errorf("TargetFor(%q) = %+v, P4 %v; want the registered capabilities", testKind, tg, tg.P4())
	}
	if (Target{Kind: KindSoftswitch}).P4() || !(Target{Kind: KindTofino}).P4() || (Target{Kind: "nonesuch"}).P4() {
		t.Error("P4() does not follow the kinds' port-map need")
	}
}

// TestAuthKeysInClear: --auth is refused when a job's key would leave this
// host without TLS, to the ranks or to the switch, unless
// --insecure-auth-over-plaintext; on loopback it is taken as it is.
func TestAuthKeysInClear(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(o *Options)
		want []string // nil: accepted
	}{
		{"loopback", func(o *Options) { o.Target, o.Listen = "", "" }, nil},
		{"job service off loopback", func(o *Options) { o.Target, o.Listen = "127.0.0.1:9559", "0.0.0.0:50051" },
			[]string{"Auth", "in clear", "Listen 0.0.0.0:50051", "TLSCert", "InsecureAuthOverPlaintext"}},
		{"switch off loopback", func(o *Options) { o.Listen = "localhost:50051" },
			[]string{"P4Runtime at 10.0.0.5:9559", "TargetTLSCA", "InsecureAuthOverPlaintext"}},
		{"allowed", func(o *Options) { o.Listen, o.InsecureAuthOverPlaintext = ":50051", true }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := flagDefaults(targets.Softswitch)
			o.Auth = true
			c.set(&o)
			_, err := o.Prepare()
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *field.Error
			if !errors.As(err, &fe) || !slices.Contains(fe.Fields, "Auth") {
				t.Fatalf("error %v, want a field.Error about Auth", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestExposures: what RunFromOptions warns about, by setting.
func TestExposures(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   func(o *Options)
		addrs []string
	}{
		{"loopback", func(o *Options) { o.Target, o.Listen = "127.0.0.1:9559", "127.0.0.1:50051" }, nil},
		{"everything open", func(o *Options) { o.Listen = "0.0.0.0:50051" }, []string{"0.0.0.0:50051", "10.0.0.5:9559", "10.0.0.5:48864"}},
		{"auth", func(o *Options) { o.Target, o.Dataplane, o.Auth = "127.0.0.1:9559", "10.0.0.5:48864", true }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := flagDefaults(targets.Softswitch)
			c.set(&o)
			cfg, err := o.Prepare()
			if err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, e := range o.exposures(cfg) {
				addrs = append(addrs, e.addr)
				fields := field.Errorf(e.msg).Fields
				if len(fields) == 0 {
					t.Errorf("%q names no setting that fixes it", e.msg)
				}
				for _, f := range fields {
					if _, ok := reflect.TypeFor[Options]().FieldByName(f); !ok {
						t.Errorf("%q names {%s}, which Options lacks", e.msg, f)
					}
				}
			}
			if !slices.Equal(addrs, c.addrs) {
				t.Errorf("warnings about %v, want %v", addrs, c.addrs)
			}
		})
	}
}

// ports is a port map of one worker host.
var ports = map[netip.Addr]uint32{netip.MustParseAddr("10.0.0.1"): 1}

func parseTopology(t *testing.T, text string) *Topology {
	t.Helper()
	topo, err := ParseTopology(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}
