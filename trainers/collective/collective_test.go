package collective

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/trainers/internal/freeport"
)

func runWorkers(t *testing.T, n int, dial func(ctx context.Context, rank int) (Backend, error), length int) [][]float32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			b, err := dial(ctx, r)
			if err != nil {
				errs[r] = err
				return
			}
			defer b.Close()
			x := make([]float32, length)
			for i := range x {
				x[i] = float32(r+1) * (float32(i) + 0.5)
			}
			// Two rounds: the second must not see the first's state.
			for round := 0; round < 2; round++ {
				y := append([]float32(nil), x...)
				if errs[r] = b.AllReduceFloat32(ctx, y); errs[r] != nil {
					return
				}
				out[r] = y
			}
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

func checkSums(t *testing.T, n int, out [][]float32) {
	t.Helper()
	k := float32(n * (n + 1) / 2)
	for r, y := range out {
		for i, v := range y {
			if want := k * (float32(i) + 0.5); v != want {
				t.Fatalf("rank %d element %d = %v, want %v", r, i, v, want)
			}
		}
	}
}

func TestStarSums(t *testing.T) {
	const n = 3
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := ServeStar(context.Background(), ln, n)
	defer s.Close()
	out := runWorkers(t, n, func(ctx context.Context, r int) (Backend, error) {
		return Dial(ctx, Config{Kind: Exact, Rank: r, Workers: n, StarAddr: s.Addr()})
	}, 100003)
	checkSums(t, n, out)
}

func TestStarLengthMismatch(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	s := ServeStar(context.Background(), ln, 2)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := DialStar(ctx, s.Addr(), r, 2)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			errs[r] = c.AllReduceFloat32(ctx, make([]float32, 10+r))
		}(r)
	}
	wg.Wait()
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("mismatched lengths were summed: %v", errs)
	}
}

func TestRingBackendSums(t *testing.T) {
	const n = 3
	addrs := freeport.Loopback(t, n)
	out := runWorkers(t, n, func(ctx context.Context, r int) (Backend, error) {
		return Dial(ctx, Config{Kind: Ring, Rank: r, Workers: n, RingAddrs: addrs})
	}, 5000)
	checkSums(t, n, out)
}

func TestParseKind(t *testing.T) {
	for _, s := range []string{"exact", "ring", "SwitchML"} {
		if _, err := ParseKind(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseKind("nccl"); err == nil {
		t.Error("nccl accepted")
	}
}
