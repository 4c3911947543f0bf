package softswitch

import (
	"slices"
	"strings"
	"testing"
)

func TestShardAddrs(t *testing.T) {
	got, err := ShardAddrs("10.0.0.1:48864", 3)
	if want := []string{"10.0.0.1:48864", "10.0.0.1:48865", "10.0.0.1:48866"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("ShardAddrs(port, 3) = %v, %v; want %v", got, err, want)
	}
	got, err = ShardAddrs("127.0.0.1:0", 2)
	if want := []string{"127.0.0.1:0", "127.0.0.1:0"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("ShardAddrs(free, 2) = %v, %v; want %v", got, err, want)
	}
	got, err = ShardAddrs("127.0.0.1:7,127.0.0.1:9", 2)
	if want := []string{"127.0.0.1:7", "127.0.0.1:9"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("ShardAddrs(list, 2) = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []struct {
		addr string
		n    int
	}{{"127.0.0.1:7,127.0.0.1:9", 3}, {"127.0.0.1:65535", 2}, {"127.0.0.1:x", 1}, {"no-port", 1}} {
		if _, err := ShardAddrs(bad.addr, bad.n); err == nil {
			t.Errorf("ShardAddrs(%q, %d) accepted", bad.addr, bad.n)
		}
	}
}

// TestShardListen: every shard gets a socket of its own; the first is
// the switch's address; shard counts out of range are refused.
func TestShardListen(t *testing.T) {
	sw, err := Listen(Config{Shards: 3})
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
		if _, err := Listen(Config{Shards: n}); err == nil || !strings.Contains(err.Error(), "shards") {
			t.Errorf("Shards %d: %v, want a refusal", n, err)
		}
	}
}
