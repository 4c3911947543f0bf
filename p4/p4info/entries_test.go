package p4info

import (
	"bytes"
	"testing"
)

func TestBytesCanonical(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		want []byte
	}{
		{0, []byte{0}}, {1, []byte{1}}, {255, []byte{255}}, {256, []byte{1, 0}},
		{0xBEE0, []byte{0xbe, 0xe0}}, {0x0a000001, []byte{10, 0, 0, 1}}, {1<<64 - 1, bytes.Repeat([]byte{0xff}, 8)},
	} {
		if got := Bytes(tc.v); !bytes.Equal(got, tc.want) {
			t.Errorf("Bytes(%#x) = %x, want %x", tc.v, got, tc.want)
		}
	}
}

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
