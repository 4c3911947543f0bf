package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchml/switchml-go/secure"
)

const metricsFlagHelp = "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100; empty: none)"

// newMetricsRegistry is a registry with the Go runtime's and the process's
// collectors beside cols.
func newMetricsRegistry(cols ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cols = append(cols, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cols {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// serveMetrics serves g at http://addr/metrics until ctx ends, and returns
// the address it listens on. An empty addr serves nothing. Off loopback it
// warns at start: the endpoint is plain HTTP and asks no caller who it is,
// as the job service and the switch warn when they serve in the clear.
func serveMetrics(ctx context.Context, addr string, g prometheus.Gatherer, log *slog.Logger) (string, error) {
	if addr == "" {
		return "", nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { srv.Close() })
	bound := lis.Addr().String()
	if !secure.Loopback(bound) {
		log.Warn("metrics: served over plain HTTP, without authentication, on a non-loopback address: whoever reaches it reads what runs here and how much (job counts, slots, packets, a worker's job name); give --metrics a loopback address (127.0.0.1:PORT), or let a firewall pass only the Prometheus server", "metrics", bound)
	}
	log.Info("metrics", "url", "http://"+bound+"/metrics")
	return bound, nil
}
