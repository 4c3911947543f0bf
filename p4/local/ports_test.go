package local

import (
	"strings"
	"testing"
)

// TestPorts: a base port pins the data plane (a port a shard), the
// P4Runtime server and the controller in that order; port 0 pins none;
// a base that leaves no room is refused, naming the range.
func TestPorts(t *testing.T) {
	dp, p4rt, ctl, err := Ports(41000, 2)
	if err != nil || dp != "127.0.0.1:41000,127.0.0.1:41001" || p4rt != "127.0.0.1:41002" || ctl != "127.0.0.1:41003" {
		t.Fatalf("Ports(41000, 2) = %q, %q, %q, %v", dp, p4rt, ctl, err)
	}
	if dp, p4rt, ctl, err := Ports(0, 1); err != nil || dp+p4rt+ctl != "" {
		t.Fatalf("Ports(0, 1) = %q, %q, %q, %v; want free ports", dp, p4rt, ctl, err)
	}
	for _, base := range []int{80, 65534} {
		if _, _, _, err := Ports(base, 1); err == nil || !strings.Contains(err.Error(), "want 1024..65533") {
			t.Errorf("Ports(%d, 1): %v, want a refusal naming the range", base, err)
		}
	}
}
