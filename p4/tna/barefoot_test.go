package tna

import (
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The checked-in P4Info, with its Tofino extension messages, parses with
// the global registry and survives the binary form a controller sends.
func TestP4InfoParsesAndRoundTrips(t *testing.T) {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(P4InfoText, info); err != nil {
		t.Fatal(err)
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
		t.Fatal("binary round trip changed the P4Info")
	}
	kinds := map[string]int{}
	for _, e := range info.GetExterns() {
		kinds[e.GetExternTypeName()] += len(e.GetInstances())
		for _, in := range e.GetInstances() {
			x, err := in.GetInfo().UnmarshalNew()
			if err != nil {
				t.Fatalf("%s: %v", in.GetPreamble().GetName(), err)
			}
			if got, want := string(x.ProtoReflect().Descriptor().FullName()), BarefootPackage+"."+e.GetExternTypeName(); got != want {
				t.Errorf("%s: info is %s, want %s", in.GetPreamble().GetName(), got, want)
			}
			if in.GetPreamble().GetName() == "pipe.SwitchMLIngress.pool_count" {
				m := x.ProtoReflect()
				if size := m.Get(m.Descriptor().Fields().ByName("size")).Int(); size != 16384 {
					t.Errorf("pool_count size %d, want 16384", size)
				}
			}
		}
	}
	want := map[string]int{"Counter": 1, "Register": 35, "PortMetadata": 1, "Snapshot": 2, "DynHash": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s externs, want %d (all: %v)", kinds[k], k, n, kinds)
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
