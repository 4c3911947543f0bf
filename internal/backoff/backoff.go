// Package backoff spaces the tries of a loop that waits for a peer to come
// back: a controller restarting, a rank not yet listening, a switch being
// reprogrammed. Waits grow exponentially up to a cap, and each is drawn
// at random between half its bound and its bound ("equal jitter"), so that
// the workers of a job, which all lose the same controller at once, do not
// come back at it in step, while none waits longer than the cap.
//
// It imports nothing of the module, so that both sides (switchml, p4) and
// the trainers may use it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the state of one retry loop. It is not safe for concurrent
// use: each loop has its own.
type Backoff struct {
	base, max time.Duration
	// bound is the largest next wait, before jitter.
	bound time.Duration
	// rand draws the jitter; nil is the global source (tests seed it).
	rand *rand.Rand
}

// New returns the back-off of a loop whose first wait is at most base and
// no wait more than limit (a limit below base is taken as base).
func New(base, limit time.Duration) *Backoff {
	return &Backoff{base: base, max: max(base, limit), bound: base}
}

// Next is the wait before the next try: drawn in [bound/2, bound], after
// which the bound doubles, up to the cap.
func (b *Backoff) Next() time.Duration {
	half := b.bound / 2
	var j time.Duration
	if n := int64(b.bound - half); n > 0 {
		if b.rand != nil {
			j = time.Duration(b.rand.Int64N(n + 1))
		} else {
			j = time.Duration(rand.Int64N(n + 1))
		}
	}
	b.bound = min(2*b.bound, b.max)
	return half + j
}

// Reset starts the waits over from the first, after the peer came back.
func (b *Backoff) Reset() { b.bound = b.base }

// Wait sleeps for Next, or until ctx ends, whose error it then returns.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep sleeps for d, or until ctx ends, whose error it then returns.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
