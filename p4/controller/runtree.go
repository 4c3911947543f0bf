package controller

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"

	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/p4info"
)

// runTree is Run for a Topology: it programs the spine and every leaf, and
// serves one job service for the tree. Losing any switch aborts the live
// jobs, as losing the one switch does, and the controller programs the
// whole tree afresh once every switch answers again.
func runTree(ctx context.Context, cfg Config) error {
	if cfg.Switch.P4() {
		if err := cfg.Topology.checkP4(cfg.Switch.Kind); err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		if cfg.Topology.Registers == nil {
			return fmt.Errorf("controller: a tree of %s switches needs Topology.Registers to reset their pools", cfg.Switch.Kind)
		}
	}
	tree, clients, err := dialTree(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	var leaves []netip.AddrPort
	var subnets []netip.Prefix
	for _, l := range cfg.Topology.Leaves {
		leaves = append(leaves, l.dataplane)
		subnets = append(subnets, l.prefixes...)
	}
	svc, err := NewJobService(tree, ServiceConfig{Dataplane: cfg.Topology.Spine.dataplane, Slots: cfg.Slots, Target: cfg.Switch, Logger: cfg.Logger, Names: cfg.Names, Admin: cfg.Admin, JobLimits: cfg.JobLimits,
		SwitchAddresses: leaves, Subnets: subnets, AllowLaneAddressMismatch: cfg.AllowLaneAddressMismatch, RefuseOpenJobs: cfg.refuseOpenJobs()})
	if err != nil {
		return err
	}
	defer svc.stop()
	cfg.control.attach(svc)
	unregister, err := registerMetrics(cfg, svc)
	if err != nil {
		return err
	}
	defer unregister()
	lis, served, stop, err := listenJobs(cfg, svc)
	if err != nil {
		return err
	}
	defer stop()
	cfg.Logger.Info("controller: serving a tree", "jobs", lis.Addr().String(), "topology", cfg.Topology.String(), "slots", cfg.Slots)
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr())
	}
	for {
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(served)},
		}
		for _, cl := range clients {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(cl.Done())})
		}
		chosen, v, _ := reflect.Select(cases)
		switch chosen {
		case 0:
			return nil
		case 1:
			err, _ := v.Interface().(error)
			served <- err
			return fmt.Errorf("controller: job service: %w", err)
		}
		lostCl := clients[chosen-2]
		name := treeName(cfg.Topology, chosen-2)
		lost := lostCl.StreamError()
		cfg.Logger.Warn("controller: lost a switch of the tree; reconnecting", "switch", name, "err", lost)
		svc.SwitchLost(fmt.Sprintf("aborted: the controller lost %s of the tree (%v); what it held for the job is gone: join again", name, lost))
		for _, cl := range clients {
			cl.Close()
		}
		clients = nil
		if back, err := redial(ctx, cfg.Logger, "tree", func() (err error) {
			tree, clients, err = dialTree(ctx, cfg)
			return err
		}); !back {
			return err
		}
		svc.SwitchBack(tree)
		cfg.Logger.Info("controller: tree programmed again")
	}
}

// treeName names switch i of dialTree's order: the spine, then the leaves.
func treeName(t *Topology, i int) string {
	if i == 0 {
		return t.Spine.Name
	}
	return t.Leaves[i-1].Name
}

// dialTree connects to every switch of the topology and programs it: the
// spine first, then the leaves.
func dialTree(ctx context.Context, cfg Config) (*Tree, []*p4rt.Client, error) {
	t := cfg.Topology
	var clients []*p4rt.Client
	fail := func(err error) (*Tree, []*p4rt.Client, error) {
		for _, cl := range clients {
			cl.Close()
		}
		return nil, nil, err
	}
	sws := append([]TopologySwitch{t.Spine}, t.Leaves...)
	for i, sw := range sws {
		c := cfg
		c.Target = sw.P4Runtime
		if cfg.Switch.P4() {
			c.Registers = t.Registers(sw.Thrift)
		}
		cl, err := connect(ctx, c, sw.dataplane)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", treeName(t, i), err))
		}
		clients = append(clients, cl)
		// A switch that kept its tables (its pipeline found running or
		// left as it was, at start or after a reconnect) holds an
		// earlier controller's entries or those of the jobs that ended
		// with the link; a tree controller takes no jobs over, so they
		// go, or they would collide with the jobs placed now.
		cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
		err = cl.ClearJobs(cctx)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("%s: removing the job entries it holds: %w", treeName(t, i), err))
		}
	}
	// Each switch refuses to be programmed, saying why, while another
	// controller holds its primaryship.
	leaves := make([]Switch, len(t.Leaves))
	for i := range leaves {
		leaves[i] = controlled{clients[i+1]}
	}
	tree, err := NewTree(t, controlled{clients[0]}, leaves)
	if err != nil {
		return fail(err)
	}
	if cfg.Switch.P4() {
		for i, cl := range clients[1:] {
			if !cl.IDs().Leaf() {
				return fail(fmt.Errorf("%s: the program pushed to it has no leaf role (tables %s and %s)", t.Leaves[i].Name, p4info.TableUplink, p4info.TableFromParent))
			}
		}
		tree.shape.Uplinks = true
	}
	return tree, clients, nil
}
