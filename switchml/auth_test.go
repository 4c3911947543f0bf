package switchml_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/switchml"
)

// TestAuthAllReduce runs a job with Auth on a switch that checks tags, over
// UDP, over shared memory and on a switch with two data-plane shards (each
// checking with taggers of its own): every sum is exact, every packet passed
// the switch's check and every result the workers'.
func TestAuthAllReduce(t *testing.T) {
	for _, c := range []struct {
		name, transport string
		shards          int
	}{{"udp", switchml.TransportUDP, 1}, {"shm", switchml.TransportShm, 1}, {"udp-2-shards", switchml.TransportUDP, 2}} {
		tr := c.transport
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			fab := local.ForTest(t, local.Options{Slots: 512, Auth: true, Transport: tr, Shards: c.shards})
			const workers, elements = 3, 20_000
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for r := range workers {
				wg.Go(func() {
					errs[r] = runAuthRank(ctx, switchml.Config{
						Controller: fab.ControllerAddr(), Job: "auth", Rank: r, Workers: workers, Lanes: 2, Window: 16,
						Extended: true, Auth: true, Transport: tr, Bind: "127.0.0.1",
					}, elements)
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			c := fab.Counters()
			if c[switchjob.StatMulticast] == 0 {
				t.Fatal("no slot completed")
			}
			if c[switchjob.StatDropBadTag] != 0 {
				t.Fatalf("%d genuine packets failed the switch's tag check", c[switchjob.StatDropBadTag])
			}
		})
	}
}

func runAuthRank(ctx context.Context, cfg switchml.Config, elements int) error {
	s, err := switchml.Join(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	n := cfg.Workers
	x := make([]int32, elements)
	for i := range x {
		x[i] = int32(cfg.Rank*1000 + i)
	}
	if err := s.AllReduceInt32(ctx, x); err != nil {
		return err
	}
	for i, v := range x {
		if want := int32(1000*n*(n-1)/2 + n*i); v != want {
			return fmt.Errorf("rank %d: int32 sum[%d] = %d, want %d", cfg.Rank, i, v, want)
		}
	}
	f := make([]float32, elements)
	for i := range f {
		f[i] = float32(cfg.Rank+1) * 0.25 * float32(i%100)
	}
	if err := s.AllReduceFloat32(ctx, f); err != nil {
		return err
	}
	for i, v := range f {
		want := float64(n*(n+1)/2) * 0.25 * float64(i%100)
		if math.Abs(float64(v)-want) > 1e-3*math.Max(1, want) {
			return fmt.Errorf("rank %d: float32 sum[%d] = %v, want %v", cfg.Rank, i, v, want)
		}
	}
	return nil
}

// TestAuthMismatch: a worker and a switch that disagree on tags fail at
// Join with ErrJobMismatch, saying what to start with --auth; Auth with
// the compatible header is a configuration error.
func TestAuthMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keyed := local.ForTest(t, local.Options{Slots: 64, Auth: true})
	plain := local.ForTest(t, local.Options{Slots: 64})
	// With PacketElements 0 the worker learns from Describe before it
	// registers; with a packet size it learns from the registration's key.
	for _, pe := range []int{0, 256} {
		join := func(addr string, auth bool) error {
			s, err := switchml.Join(ctx, switchml.Config{Controller: addr, Job: fmt.Sprint("mismatch-", pe), Rank: 0, Workers: 1, Lanes: 1, Window: 4,
				Extended: true, PacketElements: pe, Auth: auth})
			if err == nil {
				s.Close()
			}
			return err
		}
		if err := join(plain.ControllerAddr(), true); !errors.Is(err, switchml.ErrJobMismatch) {
			t.Fatalf("packet elements %d: Auth against a switch that does not check tags: %v, want ErrJobMismatch", pe, err)
		}
		if err := join(keyed.ControllerAddr(), false); !errors.Is(err, switchml.ErrJobMismatch) {
			t.Fatalf("packet elements %d: no Auth against a switch that checks tags: %v, want ErrJobMismatch", pe, err)
		}
	}
	_, err := switchml.Join(ctx, switchml.Config{Controller: keyed.ControllerAddr(), Job: "compat", Rank: 0, Workers: 1, Lanes: 1, Window: 4, Auth: true})
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field() != "Auth" {
		t.Fatalf("Auth with the compatible header: %v, want a field.Error on Auth", err)
	}
}
