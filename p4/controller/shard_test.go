package controller

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/jobpb"
)

func TestShardDataplanesFor(t *testing.T) {
	got, err := DataplanesFor("127.0.0.1:48864, 127.0.0.1:48865", "127.0.0.1:9559")
	if err != nil || len(got) != 2 || got[1].Port() != 48865 {
		t.Fatalf("DataplanesFor(two) = %v, %v", got, err)
	}
	got, err = DataplanesFor("", "10.1.2.3:9559")
	if err != nil || len(got) != 1 || got[0].String() != "10.1.2.3:48864" {
		t.Fatalf("DataplanesFor(default) = %v, %v", got, err)
	}
	for _, bad := range []string{"127.0.0.1:1,,127.0.0.1:2", "127.0.0.1:1,127.0.0.1:1", "127.0.0.1:1,0.0.0.0:2"} {
		if _, err := DataplanesFor(bad, "127.0.0.1:9559"); err == nil {
			t.Errorf("DataplanesFor(%q) accepted", bad)
		}
	}
	target, err := TargetFor(KindBMv2, 0)
	if err != nil {
		t.Fatal(err)
	}
	target.Ports = map[netip.Addr]uint32{netip.MustParseAddr("10.0.0.1"): 1}
	dp := netip.MustParseAddrPort("127.0.0.1:48864")
	shards := []netip.AddrPort{dp, netip.MustParseAddrPort("127.0.0.1:48865")}
	_, err = NewJobService(noSwitch{}, ServiceConfig{Dataplane: dp, Shards: shards, Target: target, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "several shards") {
		t.Fatalf("a BMv2 switch with two data-plane addresses: %v, want a refusal naming the shards", err)
	}
	svc, err := NewJobService(noSwitch{}, ServiceConfig{Dataplane: dp, Shards: shards, Logger: quiet})
	if err != nil {
		t.Fatalf("a software switch with two shards: %v", err)
	}
	st, err := svc.Status(context.Background(), &jobpb.StatusRequest{SkipSwitchCounters: true})
	if err != nil || st.GetDataplane() != "127.0.0.1:48864,127.0.0.1:48865" {
		t.Fatalf("status data plane %q (%v), want both shards", st.GetDataplane(), err)
	}
}

// noSwitch is a Switch the test never calls.
type noSwitch struct{ Switch }
