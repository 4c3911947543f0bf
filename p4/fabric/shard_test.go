package fabric

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestShardAddrs(t *testing.T) {
	got, err := shardAddrs("10.0.0.1:48864", 3)
	if want := []string{"10.0.0.1:48864", "10.0.0.1:48865", "10.0.0.1:48866"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("shardAddrs(port, 3) = %v, %v; want %v", got, err, want)
	}
	got, err = shardAddrs("127.0.0.1:0", 2)
	if want := []string{"127.0.0.1:0", "127.0.0.1:0"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("shardAddrs(free, 2) = %v, %v; want %v", got, err, want)
	}
	got, err = shardAddrs("127.0.0.1:7,127.0.0.1:9", 2)
	if want := []string{"127.0.0.1:7", "127.0.0.1:9"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("shardAddrs(list, 2) = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []struct {
		addr string
		n    int
	}{{"127.0.0.1:7,127.0.0.1:9", 3}, {"127.0.0.1:65535", 2}, {"127.0.0.1:x", 1}, {"no-port", 1}} {
		if _, err := shardAddrs(bad.addr, bad.n); err == nil {
			t.Errorf("shardAddrs(%q, %d) accepted", bad.addr, bad.n)
		}
	}
}

// TestShardListenSwitch: every shard gets a socket of its own; the first is
// the switch's address; shard counts out of range are refused.
func TestShardListenSwitch(t *testing.T) {
	sw, err := ListenSwitch(SwitchConfig{Shards: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.closeConns()
	defer sw.lis.Close()
	addrs := sw.DataplaneAddrs()
	if sw.Shards() != 3 || len(addrs) != 3 || addrs[0] != sw.DataplaneAddr() {
		t.Fatalf("shards %d at %v, first %s", sw.Shards(), addrs, sw.DataplaneAddr())
	}
	if slices.Contains(addrs[1:], addrs[0]) || addrs[1] == addrs[2] {
		t.Fatalf("shards share a socket: %v", addrs)
	}
	for _, n := range []int{-1, MaxShards + 1} {
		if _, err := ListenSwitch(SwitchConfig{Shards: n}); err == nil || !strings.Contains(err.Error(), "shards") {
			t.Errorf("Shards %d: %v, want a refusal", n, err)
		}
	}
}

func TestShardProcDataplanes(t *testing.T) {
	n := 0
	free := func() (string, error) { n++; return "127.0.0.1:" + strconv.Itoa(40000+n), nil }
	for _, c := range []struct {
		dp       string
		explicit bool
		shards   int
		want     string
	}{
		{"10.0.0.1:48864", true, 1, "10.0.0.1:48864"},
		{"10.0.0.1:48864", true, 2, "10.0.0.1:48864,10.0.0.1:48865"},
		{"127.0.0.1:7,127.0.0.1:9", true, 2, "127.0.0.1:7,127.0.0.1:9"},
		{"127.0.0.1:39999", false, 3, "127.0.0.1:39999,127.0.0.1:40001,127.0.0.1:40002"},
	} {
		got, err := procDataplanes(c.dp, c.explicit, c.shards, free)
		if err != nil || got != c.want {
			t.Errorf("procDataplanes(%q, %v, %d) = %q, %v; want %q", c.dp, c.explicit, c.shards, got, err, c.want)
		}
	}
	if _, err := procDataplanes("127.0.0.1:0", true, 2, free); err == nil {
		t.Error("an explicit port 0 with 2 shards was accepted: the controller could not be told the ports")
	}
}
