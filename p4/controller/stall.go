package controller

// When a rank gives up on the switch (no answer for its give-up time), the
// switch may be lost, or a rank of the job may have stopped sending: the
// slots it did not contribute to wait for it, and no result comes. The
// controller tells the two apart by asking the switch which ranks the
// job's waiting slots lack, before it records a switch loss; the job core
// words the job's end by what it learned (jobcore.Stall).

import (
	"context"

	"github.com/switchml/switchml-go/p4/controller/jobcore"
)

// stallReader is a switch that can say which ranks a job's slots wait for
// (a P4Runtime Client on a target that serves register reads).
type stallReader interface {
	WaitingFor(ctx context.Context, base, size, slots, world int) (map[int]int, error)
}

// diagnose asks the switch which ranks the partition's slots wait for,
// within statusReadTimeout.
func (s *JobService) diagnose(ctx context.Context, p jobcore.Partition) jobcore.Stall {
	sr, ok := s.current.Load().Switch.(stallReader)
	if !ok {
		return jobcore.Stall{}
	}
	ctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
	defer cancel()
	missing, err := sr.WaitingFor(ctx, p.Base, p.Size, s.cfg.Slots, p.World)
	if err != nil {
		s.log.Warn("controller: reading which ranks a job's slots wait for", "job", p.Job, "err", err)
		return jobcore.Stall{Asked: true}
	}
	return jobcore.Stall{Asked: true, Answered: true, Missing: missing}
}
