// Package progress keeps one status line at the bottom of a terminal for
// the long commands (the benchmark suite, the chaos run, training): what
// runs, how far along it is, the time left. Other output goes above it.
// On a pipe or a file, or when asked to be quiet, the line is never drawn,
// so logs and scripts read only what they read before.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// Line is the status line. Its methods may be called from several
// goroutines.
type Line struct {
	out io.Writer
	fd  int
	on  bool

	mu      sync.Mutex
	status  func() string
	drawn   bool
	partial bool // output above ended without a newline: no redraw yet
	stop    chan struct{}
	ticking sync.WaitGroup
}

// New returns the status line of f, drawn only when f is a terminal and
// quiet is false.
func New(f *os.File, quiet bool) *Line {
	fd := int(f.Fd())
	return &Line{out: f, fd: fd, on: !quiet && term.IsTerminal(fd)}
}

// On reports whether the line is drawn.
func (l *Line) On() bool { return l != nil && l.on }

// Show makes status the line's text, drawn now and every second until
// Done: status is called each time, so it can tell the time left.
func (l *Line) Show(status func() string) {
	if !l.On() {
		return
	}
	l.mu.Lock()
	l.status = status
	l.redraw()
	if l.stop == nil {
		l.stop = make(chan struct{})
		l.ticking.Add(1)
		go l.tick(l.stop)
	}
	l.mu.Unlock()
}

func (l *Line) tick(stop chan struct{}) {
	defer l.ticking.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			l.mu.Lock()
			l.redraw()
			l.mu.Unlock()
		}
	}
}

// redraw writes the status over the line. Callers hold l.mu.
func (l *Line) redraw() {
	if l.status == nil || l.partial {
		return
	}
	text := l.status()
	// A line longer than the terminal wraps, and \r then rewrites only
	// its last row.
	if w, _, err := term.GetSize(l.fd); err == nil && w > 1 && len(text) >= w {
		text = text[:w-1]
	}
	fmt.Fprintf(l.out, "\r%s\x1b[K", text)
	l.drawn = true
}

// clear erases the line. Callers hold l.mu.
func (l *Line) clear() {
	if l.drawn {
		io.WriteString(l.out, "\r\x1b[K")
		l.drawn = false
	}
}

// Above returns a writer whose output goes to w above the status line (w
// may be the line's own terminal, or another file on the same screen).
func (l *Line) Above(w io.Writer) io.Writer { return above{l, w} }

// Write writes p above the status line, on the line's own file.
func (l *Line) Write(p []byte) (int, error) { return l.Above(l.out).Write(p) }

type above struct {
	l *Line
	w io.Writer
}

func (a above) Write(p []byte) (int, error) {
	l := a.l
	if !l.On() {
		return a.w.Write(p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clear()
	n, err := a.w.Write(p)
	if len(p) > 0 {
		l.partial = p[len(p)-1] != '\n'
	}
	l.redraw()
	return n, err
}

// Done erases the line for good and stops redrawing it.
func (l *Line) Done() {
	if !l.On() {
		return
	}
	l.mu.Lock()
	l.clear()
	l.status = nil
	stop := l.stop
	l.stop = nil
	l.mu.Unlock()
	if stop != nil {
		close(stop)
		l.ticking.Wait()
	}
}

// Left estimates the time left from the fraction done after elapsed, as
// "about 3m10s left", or "" before anything is done.
func Left(done float64, elapsed time.Duration) string {
	if done <= 0 || done > 1 {
		return ""
	}
	left := time.Duration(float64(elapsed) * (1 - done) / done)
	return "about " + Round(left).String() + " left"
}

// Round rounds d for a status line: to seconds, or to minutes past an
// hour.
func Round(d time.Duration) time.Duration {
	if d >= time.Hour {
		return d.Round(time.Minute)
	}
	return d.Round(time.Second)
}
