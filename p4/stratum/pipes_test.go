package stratum_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/tna"
)

// A Tofino keeps the aggregation registers in each pipe (p4/pipeline's
// TestCrossPipe tests show a job across two pipes never completing). The
// real controller, programming a Tofino through the Stratum stand-in,
// serves a job whose ranks all sit in pipe 1 as it serves one in pipe 0
// (every write checked as in TestStratumJobControlTraffic), and refuses a
// job whose ranks sit in pipes 0 and 1 before it writes anything for it:
// every rank's registration fails, naming the ranks, ports and pipes.
func TestCrossPipeStratumJob(t *testing.T) {
	t.Run("one pipe verified", func(t *testing.T) {
		runStratumJob(t, "tofino", tna.P4InfoText, false, []uint32{136, 144, 255})
	})
	t.Run("two pipes refused", func(t *testing.T) {
		rec := newRecorder(t, tna.P4InfoText)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := stratumController(t, rec, rec.serve(t), packed(t, "tofino"), []uint32{8, 136, 24})
		jobs, stop := serveJobs(ctx, t, start)
		defer stop()
		_, errs := registerAll(ctx, jobs)
		for r, err := range errs {
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("rank %d: %v, want the job refused (FailedPrecondition)", r, err)
				continue
			}
			for _, want := range []string{"2 pipes", "pipe 0: rank 0 on port 8, rank 2 on port 24", "pipe 1: rank 1 on port 136", "device port / 128"} {
				if !errContains(err, want) {
					t.Errorf("rank %d: refusal %q does not say %q", r, status.Convert(err).Message(), want)
				}
			}
		}
		// Nothing of the job reached the switch: no worker entry, no group.
		_, writes, refused, groups := rec.snapshot()
		workers := rec.id(t, p4info.TableWorkers)
		for _, w := range writes {
			for _, u := range w.GetUpdates() {
				if u.GetEntity().GetTableEntry().GetTableId() == workers {
					t.Errorf("a workers entry was written for the refused job: %v", u)
				}
			}
		}
		if groups != 0 || len(refused) != 0 {
			t.Errorf("%d multicast groups left, %d updates refused; want none", groups, len(refused))
		}
	})
}
