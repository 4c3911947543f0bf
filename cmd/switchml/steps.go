package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/switchml/switchml-go/internal/progress"
)

// pieceValues is how many values a long step (filling, summing, checking
// a tensor) handles between two looks at its context: small enough that
// an interrupt lands within milliseconds, large enough that looking costs
// nothing.
const pieceValues = 1 << 18

// steps shows, on stderr, how far a worker's long steps are: a status line
// on a terminal; elsewhere, when asked, a line as each step starts (which
// is also what scripts and tests can wait for).
type steps struct {
	who  string // "rank 1/3"
	line *progress.Line
	log  io.Writer // nil: no lines
	// current is the step that runs, or ran last: where an interrupt
	// landed.
	current string
}

// progressFlagHelp is the help of the workers' --progress flag.
const progressFlagHelp = `how to show the long steps (computing the expected sums, filling the tensor, each allreduce, verifying): "auto" (a status line when stderr is a terminal, nothing otherwise), "lines" (a line on stderr as each step starts) or "off"`

// newSteps returns the steps of who, shown as --progress says.
func newSteps(who, show string) (*steps, error) {
	s := &steps{who: who}
	switch show {
	case "auto":
		s.line = progress.New(os.Stderr, false)
	case "lines":
		s.log = os.Stderr
	case "off":
	default:
		return nil, fmt.Errorf("--progress %q: want auto, lines or off", show)
	}
	return s, nil
}

// begin announces a step that is one call (an allreduce): its status line
// counts the time it has taken, until the next step or done.
func (s *steps) begin(what string) {
	if s == nil {
		return
	}
	s.current = what
	if s.log != nil {
		fmt.Fprintf(s.log, "%s: %s\n", s.who, what)
	}
	start := time.Now()
	s.line.Show(func() string {
		return fmt.Sprintf("%s: %s, %s", s.who, what, progress.Round(time.Since(start)))
	})
}

// each runs a step over n values, in pieces of at most pieceValues: fn
// handles values [lo, hi). Between two pieces it stops with ctx's cause
// when ctx ended, so that an interrupt or the end of the job lands at
// once, whatever the step.
func (s *steps) each(ctx context.Context, what string, n int, fn func(lo, hi int) error) error {
	var done atomic.Int64
	if s != nil {
		s.current = what
		if s.log != nil {
			fmt.Fprintf(s.log, "%s: %s\n", s.who, what)
		}
		start := time.Now()
		s.line.Show(func() string {
			share := float64(done.Load()) / float64(max(n, 1))
			status := fmt.Sprintf("%s: %s, %.0f%%", s.who, what, 100*share)
			if left := progress.Left(share, time.Since(start)); left != "" {
				status += ", " + left
			}
			return status
		})
	}
	for lo := 0; lo < n; lo += pieceValues {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		}
		hi := min(lo+pieceValues, n)
		if err := fn(lo, hi); err != nil {
			return err
		}
		done.Store(int64(hi))
	}
	return nil
}

// done erases the status line.
func (s *steps) done() {
	if s != nil {
		s.line.Done()
	}
}

// interrupted is why a rank interrupted in the middle of its steps ends
// the job: its peers fail with "aborted by rank R: interrupted: <step>".
func (s *steps) interrupted() error {
	if s == nil || s.current == "" {
		return errors.New("interrupted")
	}
	return fmt.Errorf("interrupted: %s", s.current)
}
