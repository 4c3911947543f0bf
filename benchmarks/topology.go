package benchmarks

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/switchml/switchml-go/benchmarks/rack"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/wire"
)

func (b *driver) buildRack(ctx context.Context, points []Point) error {
	n := 0
	for _, p := range points {
		if p.Mode == "rack" {
			n = max(n, p.Workers)
		}
	}
	fmt.Fprintf(b.o.Progress, "building the rack: %d workers, %g Mbit/s ports, MTU %d (namespaces %s*)\n", n, b.o.Rate, b.o.MTU, b.o.Prefix)
	r, err := rack.New(ctx, rack.Config{Workers: n, RateMbit: b.o.Rate, MTU: b.o.MTU, Prefix: b.o.Prefix,
		Subnet: b.o.Subnet, BurstBytes: b.o.Burst, LimitBytes: b.o.Limit, Leaves: b.o.RackLeaves})
	if err != nil {
		return err
	}
	b.rack = r
	b.probed = map[float64]bool{}
	b.file.Environment["rack"] = map[string]any{"workers": n, "mtu": b.o.MTU, "switch_ip": r.SwitchIP(), "prefix": b.o.Prefix,
		"leaves": r.Leaves(), "trunk_ratio": r.TrunkRatio()}
	if r.Leaves() > 0 {
		fmt.Fprintf(b.o.Progress, "the rack is a tree: %d leaves, trunks at %g times the port rate\n", r.Leaves(), r.TrunkRatio())
	}
	return nil
}

// setRate reshapes the rack and measures what a port delivers for UDP.
func (b *driver) setRate(ctx context.Context, rate float64) error {
	if cur, _, _ := b.rack.Shape(); cur != rate {
		if err := b.rack.SetRate(rate); err != nil {
			return err
		}
	}
	if !b.probed[rate] {
		b.probed[rate] = true
		_, burst, limit := b.rack.Shape()
		probe, err := b.rack.MeasureUDP(ctx, 0, 1024+10, time.Second)
		entry := map[string]any{"rate_mbit": rate, "tbf_burst_bytes": burst, "tbf_limit_bytes": limit, "udp_probe": probe}
		if err != nil {
			entry["udp_probe_error"] = err.Error()
		}
		probes, _ := b.file.Environment["ports"].([]any)
		b.file.Environment["ports"] = append(probes, entry)
		fmt.Fprintf(b.o.Progress, "ports at %g Mbit/s: tbf burst %d B, limit %d B; UDP probe %.1f Mbit/s of frames\n", rate, burst, limit, probe.FrameMbit)
	}
	return nil
}

// fabric returns the software switch and controller of a topology, started
// on first use and kept up across its points; one that crashed is replaced.
// On the rack both run in the switch's namespace on the bridge's address,
// so that SwitchML traffic crosses each worker's port once each way.
func (b *driver) fabric(ctx context.Context, mode, system string) (*harness.Fabric, error) {
	cur, key := b.fabricSlot(mode, system)
	// The rack's one switch serves plain UDP, AF_XDP or --auth on the
	// same ports: only one of them runs at a time.
	if mode == "rack" && system != "switchml-tree" {
		for _, other := range []struct {
			f   **harness.Fabric
			key string
		}{{&b.rackFab, "rack"}, {&b.xdpFab, "rack-afxdp"}, {&b.rackAuth, "rack-auth"}} {
			if other.f != cur && *other.f != nil {
				b.file.Fabric[other.key] = stopFabric(*other.f)
				*other.f = nil
			}
		}
	}
	if f := *cur; f != nil {
		if !f.Exited() {
			return f, nil
		}
		b.file.Fabric[key+"-crashed"] = stopFabric(f)
		*cur = nil
	}
	cfg := b.fabricConfig(system)
	switch {
	case system == "switchml-tree":
		var err error
		if cfg, err = b.rack.TreeFabric(context.WithoutCancel(ctx), b.exe, cfg); err != nil {
			return nil, err
		}
	case mode == "rack":
		// The fabric outlives the point that starts it: the driver stops
		// it when the topology is done.
		cfg = b.rack.Fabric(context.WithoutCancel(ctx), b.exe, cfg)
	}
	f, err := harness.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	*cur = f
	return f, nil
}

// fabricSlot is where the driver keeps the fabric of a system in a mode,
// and the name its logs are kept under in results.json.
func (b *driver) fabricSlot(mode, system string) (**harness.Fabric, string) {
	switch {
	case system == "switchml-tree":
		return &b.treeFab, "rack-tree"
	case system == "switchml-afxdp":
		return &b.xdpFab, "rack-afxdp"
	case system == "switchml-shm":
		return &b.shmFab, "loopback-shm"
	case systemAuth(system) && mode == "rack":
		return &b.rackAuth, "rack-auth"
	case systemAuth(system):
		return &b.loopAuth, "loopback-auth"
	case mode == "rack":
		return &b.rackFab, "rack"
	}
	return &b.loopFab, "loopback"
}

// fabricConfig is the switch and controller a system runs on, before the
// rack places them in its switch's namespace: the switch takes the largest
// packet the wire format allows (so every packet size a sweep may ask
// for), on the system's transport, with --auth on the switch and the
// controller for switchml-auth.
func (b *driver) fabricConfig(system string) harness.Config {
	cfg := harness.Config{MaxElements: wire.MaxElements, Shards: b.o.SwitchShards, Echo: b.o.Verbose,
		Transport: systemTransport(system), Auth: systemAuth(system),
		Command: func(args ...string) *exec.Cmd { return exec.Command(b.exe, args...) }}
	if system == "switchml-tree" {
		cfg.Shards = 0
	}
	return cfg
}

// stopFabric stops the switch and the controller and returns their last
// log lines (the switch logs its counters when it stops).
func stopFabric(f *harness.Fabric) map[string]string {
	err := f.Close()
	out := map[string]string{}
	for name, logs := range f.Logs() {
		out[name] = tail(strings.TrimSpace(logs), 2000)
	}
	if err != nil {
		out["error"] = err.Error()
	}
	return out
}

func (b *driver) close() {
	if b.loopFab != nil {
		b.file.Fabric["loopback"] = stopFabric(b.loopFab)
		b.loopFab = nil
	}
	if b.shmFab != nil {
		b.file.Fabric["loopback-shm"] = stopFabric(b.shmFab)
		b.shmFab = nil
	}
	if b.loopAuth != nil {
		b.file.Fabric["loopback-auth"] = stopFabric(b.loopAuth)
		b.loopAuth = nil
	}
	b.closeRack()
}

func (b *driver) closeRack() {
	if b.treeFab != nil {
		b.file.Fabric["rack-tree"] = stopFabric(b.treeFab)
		b.treeFab = nil
	}
	if b.rackFab != nil {
		b.file.Fabric["rack"] = stopFabric(b.rackFab)
		b.rackFab = nil
	}
	if b.xdpFab != nil {
		b.file.Fabric["rack-afxdp"] = stopFabric(b.xdpFab)
		b.xdpFab = nil
	}
	if b.rackAuth != nil {
		b.file.Fabric["rack-auth"] = stopFabric(b.rackAuth)
		b.rackAuth = nil
	}
	if b.rack != nil {
		if err := b.rack.Close(); err != nil {
			fmt.Fprintf(b.o.Progress, "tearing down the rack: %v\n", err)
		}
		b.rack = nil
	}
}

// switchTransport reads the transport a software switch serves on from its
// start-up log line ("transport=afxdp"), or "unknown".
func switchTransport(logs string) string {
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, "software switch up") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "transport="); ok {
				return v
			}
		}
	}
	return "unknown"
}
