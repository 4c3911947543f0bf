package benchmarks

import (
	"errors"
	"fmt"
	"testing"

	"github.com/switchml/switchml-go/switchml"
)

// TestCauseOf: each cause is found behind context, none is hidden by an
// earlier one of the table, and an abort by a restarted controller, which
// also says the switch was lost, is the restart.
func TestCauseOf(t *testing.T) {
	for _, c := range Causes {
		if got := CauseOf(fmt.Errorf("allreduce 3: %w", c.Err)); got != c.Name {
			t.Errorf("CauseOf(%v) = %q, want %q", c.Err, got, c.Name)
		}
	}
	restart := fmt.Errorf("%w: %w: %w: join again", switchml.ErrAborted, switchml.ErrControllerRestarted, switchml.ErrSwitchLost)
	if got := CauseOf(restart); got != "controller-restarted" {
		t.Errorf("a restarted controller's abort: %q", got)
	}
	if CauseOf(nil) != "" || CauseOf(errors.New("disk full")) != CauseOther {
		t.Errorf("CauseOf(nil) = %q, CauseOf(other) = %q", CauseOf(nil), CauseOf(errors.New("disk full")))
	}
	var rep WorkerReport
	rep.Fail(fmt.Errorf("x: %w", switchml.ErrRankFailed))
	if rep.Cause != "rank-failed" || rep.Verified || rep.Error == "" {
		t.Errorf("Fail: %+v", rep)
	}
}
