package backoff

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

func seeded(base, limit time.Duration, seed uint64) *Backoff {
	b := New(base, limit)
	b.rand = rand.New(rand.NewPCG(seed, seed))
	return b
}

// TestWaitsDoubleUpToTheCap: the i-th wait lies in [bound/2, bound] for
// bound = base·2^i capped at the limit, and Reset starts over.
func TestWaitsDoubleUpToTheCap(t *testing.T) {
	const base, limit = 20 * time.Millisecond, time.Second
	for _, b := range []*Backoff{seeded(base, limit, 1), New(base, limit)} {
		for round := range 2 {
			bound := base
			for i := range 12 {
				d := b.Next()
				if d < bound/2 || d > bound {
					t.Fatalf("round %d, wait %d: %v, want within [%v, %v]", round, i, d, bound/2, bound)
				}
				bound = min(2*bound, limit)
			}
			b.Reset()
		}
	}
	if d := New(time.Second, time.Millisecond).Next(); d < time.Second/2 || d > time.Second {
		t.Errorf("a limit below the first wait: %v, want the first wait's bound, 1s", d)
	}
}

// TestWaitsAreJittered: at the cap, the waits spread over [limit/2, limit]
// rather than repeating one value, so that loops that started together do
// not retry together.
func TestWaitsAreJittered(t *testing.T) {
	const limit = time.Second
	b := seeded(limit, limit, 7)
	seen := map[time.Duration]bool{}
	lo, hi := limit, time.Duration(0)
	for range 200 {
		d := b.Next()
		seen[d] = true
		lo, hi = min(lo, d), max(hi, d)
	}
	if len(seen) < 190 || lo > 6*limit/10 || hi < 9*limit/10 {
		t.Errorf("200 waits at the cap: %d distinct, from %v to %v; want them spread over [%v, %v]", len(seen), lo, hi, limit/2, limit)
	}
	a, c := seeded(limit, limit, 1), seeded(limit, limit, 2)
	same := 0
	for range 20 {
		if a.Next() == c.Next() {
			same++
		}
	}
	if same > 1 {
		t.Errorf("two loops drew the same wait %d times in 20", same)
	}
}

// TestWaitSleepsOnAFakeClock: Wait returns after exactly the wait Next
// would have drawn, on the fake clock of a synctest bubble.
func TestWaitSleepsOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, twin := seeded(10*time.Millisecond, 80*time.Millisecond, 3), seeded(10*time.Millisecond, 80*time.Millisecond, 3)
		for i := range 6 {
			start := time.Now()
			if err := b.Wait(t.Context()); err != nil {
				t.Fatalf("wait %d: %v", i, err)
			}
			if got, want := time.Since(start), twin.Next(); got != want {
				t.Errorf("wait %d took %v, want %v", i, got, want)
			}
		}
	})
}

// TestWaitEndsWithTheContext: a wait ends when its context does, with the
// context's error, not when the wait would have.
func TestWaitEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(time.Hour, time.Hour)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait past its context's deadline: %v, want %v", err, context.DeadlineExceeded)
		}
		if got := time.Since(start); got != 5*time.Millisecond {
			t.Errorf("Wait returned after %v, want 5ms (its context's deadline)", got)
		}
		ctx, cancel = context.WithCancel(t.Context())
		cancel()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("Sleep on a canceled context: %v, want %v", err, context.Canceled)
		}
	})
}

// TestALoopSpendsItsBounds: a loop that fails four times and then
// succeeds waits between the sum of the halves of its first four bounds
// and the sum of the bounds.
func TestALoopSpendsItsBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(20*time.Millisecond, 50*time.Millisecond)
		start := time.Now()
		tries := 0
		for {
			tries++
			if tries == 5 {
				break
			}
			if err := b.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		// bounds 20, 40, 50, 50 ms
		if got := time.Since(start); got < 80*time.Millisecond || got > 160*time.Millisecond {
			t.Errorf("four waits took %v, want within [80ms, 160ms]", got)
		}
	})
}
