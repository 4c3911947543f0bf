package targets

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestKindsAndLookup(t *testing.T) {
	// p4/bmv2 registers itself; this package holds the others.
	if got, want := Kinds(), []string{Softswitch, Tofino}; !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %q, want %q", got, want)
	}
	for _, kind := range []string{"", Softswitch, Tofino} {
		k, err := Lookup(kind)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", kind, err)
		}
		if want := kind; (want == "" && k.Kind != Softswitch) || (want != "" && k.Kind != want) {
			t.Errorf("Lookup(%q) = %q", kind, k.Kind)
		}
		if info, err := k.P4Info(""); err != nil || len(info.GetTables()) == 0 {
			t.Errorf("%s's P4Info: %v tables, %v", k.Kind, len(info.GetTables()), err)
		}
	}
	if _, err := Lookup("tofino2"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), `"tofino2"`) || !strings.Contains(err.Error(), "softswitch or tofino") {
		t.Errorf(`Lookup("tofino2"): %v, want an error naming it and listing the kinds`, err)
	}
	if got := KindsWhere(func(_ Target, c Capabilities) bool { return c.NeedsPortMap }); !slices.Equal(got, []string{Tofino}) {
		t.Errorf("kinds that need a port map: %q, want tofino", got)
	}
	if h := DeviceConfigHelp(); !strings.HasPrefix(h, "tofino: bf-p4c's output directory") || strings.Contains(h, Softswitch) {
		t.Errorf("DeviceConfigHelp() = %q, want what tofino reads and nothing of the software switch", h)
	}
	if h := Help(); !strings.Contains(h, "softswitch (the software switch)") || !strings.Contains(h, "tofino (") {
		t.Errorf("Help() = %q, want every kind with its summary", h)
	}
}

func TestRegisterRefusesDuplicatesAndIncompleteEntries(t *testing.T) {
	soft, err := Lookup(Softswitch)
	if err != nil {
		t.Fatal(err)
	}
	for name, entry := range map[string]Target{"a second softswitch": soft, "no capabilities": {Kind: "x", P4Info: soft.P4Info}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%s) did not panic", name)
				}
			}()
			Register(entry)
		}()
	}
}

func TestCapabilities(t *testing.T) {
	soft, _ := Lookup(Softswitch)
	c, err := soft.Capabilities(100)
	if err != nil || !slices.Equal(c.PacketElements, []int{32, 64}) || c.MaxExtendedElements != 100 || c.NeedsPortMap || !c.Auth || !c.Tree {
		t.Errorf("softswitch with --max-elements 100: %+v, %v", c, err)
	}
	if c, _ := soft.Capabilities(0); c.MaxExtendedElements != DefaultSoftswitchMaxElements {
		t.Errorf("softswitch default: %+v", c)
	}
	if _, err := soft.Capabilities(5000); err == nil {
		t.Error("softswitch with --max-elements 5000 accepted")
	}
	tof, _ := Lookup(Tofino)
	if c, _ := tof.Capabilities(0); !slices.Equal(c.PacketElements, []int{64}) || c.MaxExtendedElements != 0 || !c.NeedsMAC || !c.NeedsPortMap || c.Auth {
		t.Errorf("tofino: %+v", c)
	}
	if tof.DeviceConfig == nil || soft.DeviceConfig != nil || tof.Registers != nil || soft.Registers != nil {
		t.Error("tofino should read a device config and softswitch none; both reset registers over P4Runtime")
	}
}
