package main

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/internal/harness"
)

// TestShardedSwitchProcesses runs `switchml switch --shards 2` and a
// controller given both shards' addresses, with loss on the switch's
// output: jobs of one and four lanes get exact sums, both shards carry
// packets and none reaches a shard that does not serve its slot.
func TestShardedSwitchProcesses(t *testing.T) {
	needProcesses(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab, err := harness.Start(ctx, harness.Config{
		Command: func(args ...string) *exec.Cmd { return binaryCmd(nil, args...) },
		Shards:  2, SwitchArgs: []string{"--drop", "0.01", "--seed", "5"}, ReadyTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	sw, ctl := fab.Procs()
	f := switchSide{dataplane: fab.DataplaneAddr(), p4rt: fab.P4RuntimeAddr(), controller: fab.ControllerAddr(), sw: adopt(t, sw), ctl: adopt(t, ctl), fab: fab}
	for _, js := range []jobSpec{
		{name: "shards-l4", dtype: "int32", workers: 4, elements: 200_000, iters: 2, lanes: 4},
		{name: "shards-l1", dtype: "float32", workers: 3, elements: 50_000, iters: 2, lanes: 1},
	} {
		t.Run(js.name, func(t *testing.T) { runJob(t, f, nil, js) })
	}
	sw.Stop(5 * time.Second)
	logs := sw.Logs()
	if !strings.Contains(logs, "shards=2") {
		t.Fatalf("the switch does not say it runs 2 shards:\n%s", logs)
	}
	m := regexp.MustCompile(`msg="software switch stopped".*received_per_shard=(\d+),(\d+)`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no per-shard counts in the switch's last log line:\n%s", logs)
	}
	for k, s := range m[1:] {
		if n, _ := strconv.Atoi(s); n == 0 {
			t.Errorf("shard %d received nothing", k)
		}
	}
	if strings.Contains(logs, "drop_wrong_shard") {
		t.Errorf("packets reached a shard that does not serve their slot:\n%s", logs)
	}
}
