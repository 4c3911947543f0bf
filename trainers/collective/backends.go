package collective

import (
	"context"
	"fmt"

	"github.com/switchml/switchml-go/switchml/ring"
)

func dialRing(ctx context.Context, cfg Config) (Backend, error) {
	if len(cfg.RingAddrs) != cfg.Workers {
		return nil, fmt.Errorf("collective: ring needs %d addresses, got %d", cfg.Workers, len(cfg.RingAddrs))
	}
	r, err := ring.Dial(ctx, ring.Config{Rank: cfg.Rank, Workers: cfg.Workers, Addrs: cfg.RingAddrs})
	if err != nil {
		return nil, fmt.Errorf("collective: ring: %w", err)
	}
	return r, nil
}
