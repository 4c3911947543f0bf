package tna

import (
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The checked-in P4Infos parse with the global registry and survive the
// binary form a controller sends. Compiled with
// --p4runtime-force-std-externs, they list the registers and the counter as
// standard P4Runtime objects; the one Tofino extern left is the port
// metadata, whose info bf-p4c then writes as the key's name in raw bytes.
func TestP4InfoParsesAndRoundTrips(t *testing.T) {
	for name, c := range map[string]struct {
		text      []byte
		registers int
	}{"tofino": {P4InfoText, 35}, "tofino2": {P4InfoTofino2Text, 36}, "tofino2 leaf": {P4InfoTofino2LeafText, 38}} {
		info := &p4configv1.P4Info{}
		if err := prototext.Unmarshal(c.text, info); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := proto.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		back := &p4configv1.P4Info{}
		if err := proto.Unmarshal(b, back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(info, back) {
			t.Fatalf("%s: binary round trip changed the P4Info", name)
		}
		kinds := map[string]int{}
		for _, e := range info.GetExterns() {
			kinds[e.GetExternTypeName()] += len(e.GetInstances())
		}
		if len(kinds) != 1 || kinds["PortMetadata"] != 1 {
			t.Errorf("%s: externs %v, want the port metadata alone", name, kinds)
		}
		if len(info.GetRegisters()) != c.registers || len(info.GetCounters()) != 1 {
			t.Errorf("%s: %d registers and %d counters, want %d and 1", name, len(info.GetRegisters()), len(info.GetCounters()), c.registers)
		}
		for _, r := range info.GetRegisters() {
			if r.GetPreamble().GetName() == "SwitchMLIngress.pool_count" && r.GetSize() != 16384 {
				t.Errorf("%s: pool_count size %d, want 16384", name, r.GetSize())
			}
		}
	}
}

// The field numbers are those of the compiler's definitions: a
// P4Runtime server decodes the binary form by number.
func TestBarefootFieldNumbers(t *testing.T) {
	want := map[protoreflect.FullName]map[string]protoreflect.FieldNumber{
		"barefoot.Counter":            {"spec": 1, "size": 2},
		"barefoot.CounterSpec":        {"unit": 1},
		"barefoot.Register":           {"type_spec": 1, "size": 2, "data_field_name": 3},
		"barefoot.PortMetadata":       {"key_name": 1, "type_spec": 2},
		"barefoot.Snapshot":           {"pipe": 1, "direction": 2, "fields": 3},
		"barefoot.Snapshot.Field":     {"id": 1, "name": 2, "bitwidth": 3},
		"barefoot.DynHash":            {"type_spec": 1, "field_infos": 2, "hash_width": 3},
		"barefoot.DynHash.field_info": {"field_name": 1, "is_constant": 2},
	}
	for name, fields := range want {
		mt, err := protoTypes().FindMessageByName(name)
		if err != nil {
			t.Fatal(err)
		}
		fds := mt.Descriptor().Fields()
		if fds.Len() != len(fields) {
			t.Errorf("%s has %d fields, want %d", name, fds.Len(), len(fields))
		}
		for f, num := range fields {
			fd := fds.ByName(protoreflect.Name(f))
			if fd == nil || fd.Number() != num {
				t.Errorf("%s.%s: %v, want number %d", name, f, fd, num)
			}
		}
	}
}
