package wire

import (
	"bytes"
	"testing"
)

// A request is recognised, answered with its nonce, and neither parses as
// an aggregation packet; an answer is not taken for a request, nor a
// request for an answer.
func TestProbe(t *testing.T) {
	req := AppendProbe(nil, 0x0102030405060708)
	if len(req) != ProbeLen || !IsProbe(req) {
		t.Fatalf("request %x (%d bytes) is not a probe", req, len(req))
	}
	if _, _, err := Parse(req); err == nil {
		t.Error("a probe parses as an aggregation packet")
	}
	ans := AppendProbeAnswer(nil, req)
	if n, ok := ProbeAnswer(ans); !ok || n != 0x0102030405060708 {
		t.Errorf("answer %x: nonce %x, %v", ans, n, ok)
	}
	if IsProbe(ans) {
		t.Error("an answer is taken for a request")
	}
	if _, ok := ProbeAnswer(req); ok {
		t.Error("a request is taken for an answer")
	}
	for _, bad := range [][]byte{req[:ProbeLen-1], append(bytes.Clone(req), 0), {0xF0, 'S', 'W', 'M', 'L', 'P', 'X', 0, 1, 2, 3, 4, 5, 6, 7, 8}} {
		if IsProbe(bad) {
			t.Errorf("%x is taken for a probe", bad)
		}
	}
}
