package local_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
)

// sparseInputs fills rank's tensors of size elements: every block of k
// values is zero except those listed for the rank (and block 0, which
// every rank holds). Values are small integers and quarters, so float
// sums are exact.
func sparseInputs(rank, size, k int, own []int) ([]int32, []float32) {
	ints := make([]int32, size)
	floats := make([]float32, size)
	for _, b := range append([]int{0}, own...) {
		for i := b * k; i < min((b+1)*k, size); i++ {
			ints[i] = int32(i*(rank+1)) - 7
			floats[i] = float32(i%50) * 0.25 * float32(rank+1)
		}
	}
	return ints, floats
}

// TestSparseJobOnEmbeddedFabric runs a sparse job of three workers over
// real UDP through the embedded switch: the sums are right where any rank
// holds values and zero elsewhere, and the workers send a small share of
// what the same job sends dense. Packets are counted as first transmissions.
func TestSparseJobOnEmbeddedFabric(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	const n, size, k = 3, 100_000, 256
	own := [n][]int{{3, 200}, {3, 17, 390}, {100}}
	packets := func(sparse bool) uint64 {
		var wg sync.WaitGroup
		errs := make([]error, n)
		sent := make([]uint64, n)
		for r := 0; r < n; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sent[r], errs[r] = sparseWorker(ctx, fab.ControllerAddr(), fmt.Sprint("sparse-", sparse), r, n, size, k, own[:], sparse)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("sparse %v, rank %d: %v", sparse, r, err)
			}
		}
		return sent[0] + sent[1] + sent[2]
	}
	sparse, dense := packets(true), packets(false)
	t.Logf("packets sent (first transmissions): sparse %d, dense %d", sparse, dense)
	if sparse*10 > dense {
		t.Fatalf("the sparse job sent %d packets, the dense one %d: want at most a tenth", sparse, dense)
	}
}

func sparseWorker(ctx context.Context, ctl, job string, rank, n, size, k int, own [][]int, sparse bool) (uint64, error) {
	sess, err := switchml.Join(ctx, switchml.Config{Controller: ctl, Job: job, Rank: rank, Workers: n, Lanes: 2, Window: 16, PacketElements: k, Sparse: sparse})
	if err != nil {
		return 0, err
	}
	defer sess.Close()
	ints, floats := sparseInputs(rank, size, k, own[rank])
	if err := sess.AllReduceInt32(ctx, ints); err != nil {
		return 0, fmt.Errorf("int32: %w", err)
	}
	if err := sess.AllReduceFloat32(ctx, floats); err != nil {
		return 0, fmt.Errorf("float32: %w", err)
	}
	wi, wf := make([]int32, size), make([]float32, size)
	for r := 0; r < n; r++ {
		ri, rf := sparseInputs(r, size, k, own[r])
		for i := range wi {
			wi[i] += ri[i]
			wf[i] += rf[i]
		}
	}
	for i := range ints {
		if ints[i] != wi[i] || floats[i] != wf[i] {
			return 0, fmt.Errorf("element %d = %d, %v; want %d, %v", i, ints[i], floats[i], wi[i], wf[i])
		}
	}
	// First transmissions, what the protocol decides: retransmissions
	// grow with the load on the machine, and would move the bound.
	st := sess.Stats()
	return st.Packets - st.Retransmits, nil
}

// TestSparseMustAgree: ranks that disagree on the sparse mode cannot form
// a job, and are told why.
func TestSparseMustAgree(t *testing.T) {
	mustAgree(t, "mixed", "sparse", func(c *switchml.Config) { c.Extended = true }, func(c *switchml.Config) { c.Sparse = true })
}

// mustAgree starts a job of two ranks, both configured by both, rank 1
// also by rank1: neither may join, and one must be told the job
// mismatches on what.
func mustAgree(t *testing.T, job, what string, both, rank1 func(*switchml.Config)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := switchml.Config{Controller: fab.ControllerAddr(), Job: job, Rank: r, Workers: 2}
			both(&cfg)
			if r == 1 {
				rank1(&cfg)
			}
			sess, err := switchml.Join(ctx, cfg)
			if err == nil {
				sess.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	named := false
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d joined a job whose ranks disagree on %s", r, what)
		}
		named = named || errors.Is(err, switchml.ErrJobMismatch) && strings.Contains(err.Error(), what)
		t.Logf("rank %d: %v", r, err)
	}
	if !named {
		t.Fatalf("no rank was told the job mismatches on %s", what)
	}
}

// TestSparseFallsBackToDense: a Sparse session sends a tensor size dense
// once two calls found nearly all its blocks held, and sparse again once a
// call finds fewer; tensors of one size that alternate between dense and
// sparse stay sparse. Every sum is right either way.
func TestSparseFallsBackToDense(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	const n, calls = 2, 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	stats := make([]switchml.Stats, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[r], errs[r] = crossoverWorker(ctx, fab.ControllerAddr(), r, n, calls)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// The tensor of 10,000 values is full at calls 0..9, then holds one
	// block: calls 0 and 1 run sparse, 2..10 dense (call 10 finds it
	// sparse), 11..19 sparse. The tensors of 3,000 values alternate full
	// and sparse and never run dense.
	for r, st := range stats {
		if st.DenseCalls != 9 {
			t.Fatalf("rank %d: %d calls ran dense, want 9", r, st.DenseCalls)
		}
	}
}

// crossoverWorker is rank's part of TestSparseFallsBackToDense.
func crossoverWorker(ctx context.Context, ctl string, rank, n, calls int) (switchml.Stats, error) {
	sess, err := switchml.Join(ctx, switchml.Config{Controller: ctl, Job: "crossover", Rank: rank, Workers: n, Lanes: 2, Window: 8, PacketElements: 64, Sparse: true})
	if err != nil {
		return switchml.Stats{}, err
	}
	defer sess.Close()
	fill := func(size int, full bool) []int32 {
		x := make([]int32, size)
		for i := range x {
			if full || i == 640+rank {
				x[i] = int32(i + rank)
			}
		}
		return x
	}
	for c := 0; c < calls; c++ {
		for _, t := range []struct {
			size int
			full bool
		}{{10_000, c < 10}, {3000, true}, {3000, false}} {
			x := fill(t.size, t.full)
			if err := sess.AllReduceInt32(ctx, x); err != nil {
				return switchml.Stats{}, err
			}
			for i, v := range x {
				want := int32(0)
				switch {
				case t.full:
					want = int32(2*i + 1)
				case i == 640 || i == 641:
					want = int32(i + i - 640)
				}
				if v != want {
					return switchml.Stats{}, fmt.Errorf("call %d, %d values (full %v): [%d] = %d, want %d", c, t.size, t.full, i, v, want)
				}
			}
		}
	}
	return sess.Stats(), nil
}
