package softswitch_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
)

// TestLogCounters: the switch logs its counters once per interval until
// its context ends (on a fake clock).
func TestLogCounters(t *testing.T) {
	sw, err := softswitch.Listen(softswitch.Config{Dataplane: "127.0.0.1:0", P4Runtime: "127.0.0.1:0", Pipeline: pipeline.Config{Slots: 64, MaxElements: 64, MaxWorkers: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = sw.Serve(ctx) // closes the sockets
	}()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			sw.LogCounters(ctx, log, time.Second)
			close(done)
		}()
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		cancel()
		<-done
		time.Sleep(5 * time.Second) // nothing more once ctx ended
	})
	if n := strings.Count(logs.String(), `msg=counters`); n != 3 || !strings.Contains(logs.String(), "received=0") {
		t.Errorf("%d counter lines in 3.5 s at one a second, want 3:\n%s", n, logs.String())
	}
}
