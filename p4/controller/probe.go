package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/wire"
)

// DataplaneProbeTimeout bounds the wait for a switch to answer the
// controller's probes of its data-plane addresses.
const DataplaneProbeTimeout = 3 * time.Second

// probeResend is how often an unanswered probe is sent again: a datagram
// can be lost, even on loopback when a socket's buffer is full.
const probeResend = 100 * time.Millisecond

// ProbeDataplanes sends a probe to each data-plane address and waits until
// a switch has answered from every one of them, or ctx ends; the error
// then names the addresses that stayed silent. Only a switch whose kind
// answers probes (targets.Capabilities.AnswersProbe) can pass.
func ProbeDataplanes(ctx context.Context, addrs []netip.AddrPort) error {
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return fmt.Errorf("controller: probe the data plane: %w", err)
	}
	defer conn.Close()
	nonce := rand.Uint64()
	waiting := map[netip.AddrPort]bool{}
	for _, a := range addrs {
		waiting[a] = true
	}
	var mu sync.Mutex
	answered := make(chan struct{})
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // the socket was closed
			}
			from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
			if got, ok := wire.ProbeAnswer(buf[:n]); !ok || got != nonce {
				continue
			}
			mu.Lock()
			delete(waiting, from)
			done := len(waiting) == 0
			mu.Unlock()
			if done {
				close(answered)
				return
			}
		}
	}()
	probe := wire.AppendProbe(nil, nonce)
	tick := time.NewTicker(probeResend)
	defer tick.Stop()
	for {
		mu.Lock()
		for a := range waiting {
			// A send error (no route) is as good as silence: the
			// address stays waiting.
			_, _ = conn.WriteToUDPAddrPort(probe, a)
		}
		mu.Unlock()
		select {
		case <-answered:
			return nil
		case <-tick.C:
		case <-ctx.Done():
			mu.Lock()
			silent := &SilentDataplaneError{Cause: ctx.Err()}
			for _, a := range addrs {
				if waiting[a] {
					silent.Addrs = append(silent.Addrs, a)
				}
			}
			mu.Unlock()
			return silent
		}
	}
}

// SilentDataplaneError is ProbeDataplanes' error: no switch answered at
// Addrs before the probe ended (Cause, the context's error).
type SilentDataplaneError struct {
	Addrs []netip.AddrPort
	Cause error
}

func (e *SilentDataplaneError) addrs() string {
	s := make([]string, len(e.Addrs))
	for i, a := range e.Addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func (e *SilentDataplaneError) Error() string {
	return fmt.Sprintf("no switch answered at %s (%v)", e.addrs(), e.Cause)
}

func (e *SilentDataplaneError) Unwrap() error { return e.Cause }

// dataplaneCheck holds why the controller does not hand out its data-plane
// addresses: the switch did not answer its probe there ("" once it did).
// Registrations are refused with it (Target.check), so that every rank
// learns at once what to fix instead of waiting for results that cannot
// come.
type dataplaneCheck struct{ why atomic.Pointer[string] }

// refusal is why registrations are refused, "" when they are not (also
// for a nil check: a switch that is not probed).
func (d *dataplaneCheck) refusal() string {
	if d == nil {
		return ""
	}
	if w := d.why.Load(); w != nil {
		return *w
	}
	return ""
}

// probe checks the switch's data-plane addresses; explicit says they came
// from --dataplane rather than from the P4Runtime target's host. It logs
// and keeps the outcome.
func (d *dataplaneCheck) probe(ctx context.Context, cfg Config, addrs []netip.AddrPort) {
	pctx, cancel := context.WithTimeout(ctx, DataplaneProbeTimeout)
	defer cancel()
	err := ProbeDataplanes(pctx, addrs)
	if err == nil {
		d.why.Store(nil)
		cfg.Logger.Info("controller: the switch answers at its data-plane address", "dataplane", addrs[0].String())
		return
	}
	if ctx.Err() != nil {
		return // the controller is stopping
	}
	silent := &SilentDataplaneError{Addrs: addrs}
	if !errors.As(err, &silent) {
		cfg.Logger.Warn("controller: cannot probe the data plane; handing it out unchecked", "err", err)
		d.why.Store(nil)
		return
	}
	from, args := "its {Dataplane}", []any{silent.addrs()}
	if cfg.Dataplane == "" {
		from, args = "its {Dataplane} is not set, so it took the host of its {Target} %s and port %d", append(args, cfg.Target, wire.UDPPort)
	}
	why := field.Errorf("no answer from the switch at %s, the data-plane address this controller hands to workers ("+from+"), within %v of its probe: restart the controller with {Dataplane} set to the address the switch's data plane listens on (the switch's own data-plane address)",
		append(args, DataplaneProbeTimeout)...).Text(cfg.Names)
	d.why.Store(&why)
	cfg.Logger.Error("controller: " + why)
}
