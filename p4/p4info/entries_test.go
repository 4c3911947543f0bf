package p4info

import (
	"bytes"
	"testing"
)

func TestSetReplyParams(t *testing.T) {
	a := SetReply([6]byte{0, 0, 0, 0, 0x12, 0x34}, 0x0a000002, 48864).GetAction()
	if a.GetActionId() != ActionSetReplyID || len(a.GetParams()) != 3 {
		t.Fatalf("set_reply action %v", a)
	}
	want := [][]byte{{0x12, 0x34}, {10, 0, 0, 2}, {0xbe, 0xe0}}
	for i, p := range a.GetParams() {
		if !bytes.Equal(p.GetValue(), want[i]) {
			t.Errorf("param %d = %x, want %x", p.GetParamId(), p.GetValue(), want[i])
		}
	}
}
