package collective

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/ring"
)

// JoinConfig tells one rank of a job how to find the others when each runs
// on its own host.
type JoinConfig struct {
	// Config names the backend, this rank, the world size and, for
	// SwitchML, the controller and job. Join fills in StarAddr and RingAddrs
	// from the rendezvous.
	Config
	// Peers lists host:port addresses in rank order: the rendezvous for the
	// ring and exact backends without a controller. Rank 0 meets the others
	// at Peers[0]; with the ring every rank r listens on Peers[r], with
	// exact rank 0 serves the float64 sums at Peers[0] and the other entries
	// may be left out.
	Peers []string
	// Listen is, for the ring and exact backends meeting at Controller, the
	// address this rank listens on (port 0 picks a free one); empty means
	// the local address this host uses toward the controller, any port.
	Listen string
	// Settings are what every rank must share; Join fails with ErrDisagree
	// naming each difference before the backend starts.
	Settings []Setting
}

// rendezvousLanes and rendezvousWindow keep the session the ring and exact
// backends meet in as small as the switch allows: it carries no tensors.
const rendezvousLanes, rendezvousWindow = 1, 1

// Join meets the other ranks, checks that they agree on cfg.Settings and
// connects this rank's backend:
//
//   - switchml joins the job at cfg.Controller and gathers the settings
//     through the controller's job service;
//   - ring and exact with cfg.Peers meet at Peers[0] (rank 0 gathers over
//     TCP), then connect to the peers' addresses;
//   - ring and exact with cfg.Controller join a small session of job
//     cfg.Job only to gather each rank's listen address and settings,
//     leave it, and connect to those addresses.
//
// ctx bounds the whole set-up: a rank that cannot reach its peers or the
// controller fails when it ends, with an error naming what did not answer.
func Join(ctx context.Context, cfg JoinConfig) (Backend, error) {
	if cfg.Workers <= 0 || cfg.Rank < 0 || cfg.Rank >= cfg.Workers {
		return nil, fmt.Errorf("collective: rank %d of %d workers is out of range", cfg.Rank, cfg.Workers)
	}
	switch {
	case cfg.Kind.Switch():
		return joinSwitchML(ctx, cfg)
	case cfg.Kind != Ring && cfg.Kind != Exact:
		return nil, fmt.Errorf("collective: unknown backend %q", cfg.Kind)
	case len(cfg.Peers) > 0 && cfg.Controller != "":
		return nil, errors.New("collective: give either peer addresses or a controller to meet at, not both")
	case len(cfg.Peers) > 0:
		return joinPeers(ctx, cfg)
	case cfg.Controller != "":
		return joinAtController(ctx, cfg)
	}
	return nil, fmt.Errorf("collective: the %s backend needs the peers' addresses or a controller to meet at", cfg.Kind)
}

func joinSwitchML(ctx context.Context, cfg JoinConfig) (Backend, error) {
	be, err := dialSwitchML(ctx, cfg.Config)
	if err != nil {
		return nil, err
	}
	s, ok := be.(Broadcaster)
	if !ok {
		be.Close()
		return nil, fmt.Errorf("collective: the switchml backend (%T) cannot relay the ranks' settings", be)
	}
	if _, err := agree(ctx, SessionRendezvous(s), cfg.Settings, ""); err != nil {
		be.Close()
		return nil, err
	}
	return be, nil
}

func joinPeers(ctx context.Context, cfg JoinConfig) (Backend, error) {
	switch n := len(cfg.Peers); {
	case cfg.Kind == Ring && n != cfg.Workers:
		return nil, fmt.Errorf("collective: the ring needs the address of each of the %d ranks, got %d", cfg.Workers, n)
	case cfg.Kind == Exact && n != 1 && n != cfg.Workers:
		return nil, fmt.Errorf("collective: exact needs rank 0's address (or one address per rank, %d), got %d", cfg.Workers, n)
	}
	// The listener is opened first, so that a taken port fails at once and
	// the others' connections wait in its queue until it is served.
	var ln net.Listener
	if cfg.Rank == 0 || cfg.Kind == Ring {
		var err error
		if ln, err = listenTCP(ctx, cfg.Peers[cfg.Rank]); err != nil {
			return nil, err
		}
	}
	rdv, err := JoinPeers(ctx, cfg.Rank, cfg.Workers, cfg.Peers[0], ln)
	if err == nil {
		_, err = agree(ctx, rdv, cfg.Settings, "")
		rdv.Close()
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	return dialListening(ctx, cfg.Config, ln, cfg.Peers)
}

func joinAtController(ctx context.Context, cfg JoinConfig) (Backend, error) {
	s, err := switchml.Join(ctx, switchml.Config{Controller: cfg.Controller, Job: cfg.Job, Token: cfg.Token, Rank: cfg.Rank, Workers: cfg.Workers,
		Lanes: rendezvousLanes, Window: rendezvousWindow})
	if err != nil {
		return nil, fmt.Errorf("collective: meeting at the controller: %w", err)
	}
	defer s.Close()
	var ln net.Listener
	addr := ""
	if cfg.Rank == 0 || cfg.Kind == Ring {
		listen := cfg.Listen
		if listen == "" {
			ip, err := localAddressToward(cfg.Controller)
			if err != nil {
				return nil, err
			}
			listen = net.JoinHostPort(ip, "0")
		}
		if ln, err = listenTCP(ctx, listen); err != nil {
			return nil, err
		}
		if addr, err = advertised(ln, cfg.Controller); err != nil {
			ln.Close()
			return nil, err
		}
	}
	addrs, err := agree(ctx, SessionRendezvous(s), cfg.Settings, addr)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	return dialListening(ctx, cfg.Config, ln, addrs)
}

// dialListening connects the ring or exact backend once every rank knows
// addrs; ln is this rank's listener (nil for an exact rank other than 0),
// which the backend takes over.
func dialListening(ctx context.Context, cfg Config, ln net.Listener, addrs []string) (Backend, error) {
	if cfg.Kind == Ring {
		r, err := ring.Dial(ctx, ring.Config{Rank: cfg.Rank, Workers: cfg.Workers, Addrs: addrs, Listener: ln})
		if err != nil {
			return nil, fmt.Errorf("collective: ring: %w", err)
		}
		return r, nil
	}
	var star *Star
	if ln != nil {
		// The server outlives the set-up: it stops when this rank's
		// backend closes, not when the join's deadline passes.
		star = ServeStar(context.WithoutCancel(ctx), ln, cfg.Workers)
	}
	c, err := DialStar(ctx, addrs[0], cfg.Rank, cfg.Workers)
	if err != nil {
		if star != nil {
			star.Close()
		}
		return nil, fmt.Errorf("collective: exact: rank %d: %w", cfg.Rank, err)
	}
	if star == nil {
		return c, nil
	}
	return &hostedStar{StarClient: c, star: star}, nil
}

// hostedStar is rank 0's end of the exact backend across hosts: it serves
// the sums for every rank as well as taking part.
type hostedStar struct {
	*StarClient
	star *Star
}

func (h *hostedStar) Close() error {
	err := h.StarClient.Close()
	// The server may still be sending the last round's sums to the other
	// ranks; closing it now would cut them off mid-round. It ends by itself
	// once every rank has closed; wait for that, within a bound.
	t := time.NewTimer(starDrain)
	defer t.Stop()
	select {
	case <-h.star.done:
	case <-t.C:
	}
	h.star.Close()
	return err
}

// starDrain bounds how long rank 0's Close waits for the other ranks to
// leave the exact backend's server.
const starDrain = 10 * time.Second

// rendezvousHello is what a rank tells the others while joining.
type rendezvousHello struct {
	Settings []Setting `json:"settings"`
	Addr     string    `json:"addr,omitempty"`
}

// agree gathers every rank's settings and address and checks the settings
// match; it returns the addresses by rank.
func agree(ctx context.Context, rdv Rendezvous, settings []Setting, addr string) ([]string, error) {
	msg, err := json.Marshal(rendezvousHello{Settings: settings, Addr: addr})
	if err != nil {
		return nil, err
	}
	all, err := rdv.AllGather(ctx, msg)
	if err != nil {
		return nil, err
	}
	got := make([][]Setting, len(all))
	addrs := make([]string, len(all))
	for r, b := range all {
		var h rendezvousHello
		if err := json.Unmarshal(b, &h); err != nil {
			return nil, fmt.Errorf("collective: rank %d: rendezvous message not ours (%v): another version of the program?", r, err)
		}
		got[r], addrs[r] = h.Settings, h.Addr
	}
	if err := CheckAgreement(got); err != nil {
		return nil, err
	}
	return addrs, nil
}

func listenTCP(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("collective: listen on %s: %w (is the address this host's, and the port free?)", addr, err)
	}
	return ln, nil
}

// advertised is the address the other ranks reach ln at: a listener on
// every interface is reached at the address toward the controller.
func advertised(ln net.Listener, controller string) (string, error) {
	a := ln.Addr().(*net.TCPAddr)
	if !a.IP.IsUnspecified() {
		return a.String(), nil
	}
	ip, err := localAddressToward(controller)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ip, fmt.Sprint(a.Port)), nil
}

// localAddressToward returns the local IP the routing table picks to reach
// target (host:port); connecting a UDP socket sends nothing.
func localAddressToward(target string) (string, error) {
	c, err := net.Dial("udp", target)
	if err != nil {
		return "", fmt.Errorf("collective: no route to the controller %s: %v (give the address to listen on)", target, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
