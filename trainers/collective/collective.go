// Package collective is the allreduce seam of the trainers: every backend
// (a float64 TCP star, the TCP ring, the SwitchML switch, dense or
// block-sparse) sums a float32 buffer in place across the workers of a
// job.
package collective

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// Backend sums buf element-wise over all workers, in place. Every worker
// must make the same calls with the same lengths in the same order.
type Backend interface {
	AllReduceFloat32(ctx context.Context, buf []float32) error
	Close() error
}

// Kind names a backend.
type Kind string

const (
	// Exact sums in float64 at a star server: the reference result.
	Exact Kind = "exact"
	// Ring is the pipelined TCP ring allreduce.
	Ring Kind = "ring"
	// SwitchML aggregates in the (software) switch.
	SwitchML Kind = "switchml"
	// SwitchMLSparse is SwitchML in the block-sparse mode
	// (switchml.Config.Sparse): a worker sends only its blocks that are
	// not all zero. It needs the software switch.
	SwitchMLSparse Kind = "switchml-sparse"
)

// Switch tells whether the backend aggregates in a SwitchML switch (and
// so needs a controller).
func (k Kind) Switch() bool { return k == SwitchML || k == SwitchMLSparse }

// ParseKind validates a backend name.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(s)); k {
	case Exact, Ring, SwitchML, SwitchMLSparse:
		return k, nil
	}
	return "", fmt.Errorf("unknown backend %q (want exact, ring, switchml or switchml-sparse)", s)
}

// Config tells a worker how to reach the others for a given backend.
type Config struct {
	Kind    Kind
	Rank    int
	Workers int
	// Exact: address of the star server.
	StarAddr string
	// Ring: listen address of every rank.
	RingAddrs []string
	// SwitchML: controller address and job name.
	Controller string
	Job        string
	// Token is the job owner's secret (switchml.Config.Token), the same on
	// every rank: a controller beyond loopback refuses jobs without one.
	Token string
	// SwitchML tuning; zero values take the library's defaults.
	Lanes, Window, PacketElements int
	// WireBits is switchml.Config.WireBits: 16 sends float32 gradients at
	// 16 bits a value.
	WireBits int
	// Trace, if set, receives the SwitchML session's timeline when the
	// backend closes (switchml.Config.Trace).
	Trace io.Writer
}

// Dial connects this worker to its backend.
func Dial(ctx context.Context, cfg Config) (Backend, error) {
	if cfg.Workers <= 0 || cfg.Rank < 0 || cfg.Rank >= cfg.Workers {
		return nil, fmt.Errorf("collective: rank %d of %d workers is out of range", cfg.Rank, cfg.Workers)
	}
	switch cfg.Kind {
	case Exact:
		return DialStar(ctx, cfg.StarAddr, cfg.Rank, cfg.Workers)
	case Ring:
		return dialRing(ctx, cfg)
	case SwitchML, SwitchMLSparse:
		return dialSwitchML(ctx, cfg)
	}
	return nil, fmt.Errorf("collective: unknown backend %q", cfg.Kind)
}
