package collective

import (
	"context"
	"fmt"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

// SwitchMLAvailable tells whether this build carries the switchml backend.
const SwitchMLAvailable = true

func dialSwitchML(ctx context.Context, cfg Config) (Backend, error) {
	if cfg.Controller == "" {
		return nil, fmt.Errorf("collective: switchml backend needs a controller address")
	}
	// The extended header (software switch) carries what the compatible
	// one cannot: other packet sizes, larger jobs, the sparse mode (which
	// sets it itself).
	extended := switchml.NeedsExtended(cfg.Workers, cfg.PacketElements)
	scfg := switchml.Config{Controller: cfg.Controller, Job: cfg.Job, Token: cfg.Token, Rank: cfg.Rank, Workers: cfg.Workers,
		Lanes: cfg.Lanes, Window: cfg.Window, PacketElements: cfg.PacketElements, Extended: extended,
		Sparse: cfg.Kind == SwitchMLSparse, Trace: cfg.Trace, WireBits: cfg.WireBits}
	s, err := switchml.Join(ctx, scfg)
	if err != nil {
		return nil, fmt.Errorf("collective: switchml: %w", err)
	}
	return switchmlBackend{Session: s, cfg: scfg}, nil
}

// switchmlBackend is a session and the Config it joined with, which says
// how wide each type travels.
type switchmlBackend struct {
	*switchml.Session
	cfg switchml.Config
}

// WireBits is the width, 16 or 32, at which values of type c travel.
func (b switchmlBackend) WireBits(c dtype.Codec) int { return b.cfg.WireWidth(c) }

// FloatWireBits is the width, 16 or 32, at which be sends float32 values
// through a switch, or 0 for a backend that sums them in floating point
// (exact, ring).
func FloatWireBits(be Backend) int {
	if s, ok := be.(interface{ WireBits(dtype.Codec) int }); ok {
		return s.WireBits(dtype.Float32)
	}
	return 0
}
