package bmv2

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4tools"
	"github.com/switchml/switchml-go/p4/v1model"
)

func TestCheckProgram(t *testing.T) {
	tools := p4tools.ForTest(t)
	jsonPath, _ := compiled(t, tools)
	js, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	v1 := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(v1model.P4InfoText, v1); err != nil {
		t.Fatal(err)
	}
	if err := CheckProgram(js, v1); err != nil {
		t.Fatalf("the compiled program and its checked-in P4Info: %v", err)
	}
	mainInfo, _ := p4info.Load()
	for _, c := range []struct {
		name string
		js   []byte
		info *p4configv1.P4Info
		is   error
		want string
	}{
		{"not JSON", []byte("\x00binary"), v1, ErrNotProgram, "not a BMv2 JSON program"},
		{"other JSON", []byte(`{"program": "x"}`), v1, ErrNotProgram, "no pipelines"},
		{"main P4Info", js, mainInfo, ErrP4InfoMismatch, "the program's table SwitchMLIngress.arp_reply is not in the P4Info"},
		{"renamed register", bytes.ReplaceAll(js, []byte(`"SwitchMLIngress.pool_count"`), []byte(`"SwitchMLIngress.pool_cnt"`)), v1, ErrP4InfoMismatch, "register SwitchMLIngress.pool_count is not in the program"},
	} {
		err := CheckProgram(c.js, c.info)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v containing %q", c.name, err, c.is, c.want)
		}
	}
}
