package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsOffLoopbackWarns: a metrics endpoint bound beyond loopback
// (what `controller --metrics 0.0.0.0:PORT` does) warns at start that it
// is plain HTTP without authentication; one on loopback does not.
func TestMetricsOffLoopbackWarns(t *testing.T) {
	for _, c := range []struct {
		addr string
		warn bool
	}{{"0.0.0.0:0", true}, {"[::]:0", true}, {":0", true}, {"127.0.0.1:0", false}, {"localhost:0", false}} {
		var logs strings.Builder
		ctx, cancel := context.WithCancel(context.Background())
		bound, err := serveMetrics(ctx, c.addr, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
		cancel()
		if err != nil {
			if strings.HasPrefix(c.addr, "[::]") {
				continue // no IPv6 here
			}
			t.Fatalf("--metrics %s: %v", c.addr, err)
		}
		warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "without authentication, on a non-loopback address")
		if warned != c.warn {
			t.Errorf("--metrics %s (bound to %s): warned %v, want %v; log:\n%s", c.addr, bound, warned, c.warn, logs.String())
		}
	}
}
