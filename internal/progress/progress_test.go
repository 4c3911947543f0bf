package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestQuietOnAPipe: on a pipe the line is never drawn and output passes
// through unchanged.
func TestQuietOnAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := New(w, false)
	if l.On() {
		t.Fatal("a pipe is not a terminal")
	}
	l.Show(func() string { return "status" })
	fmt.Fprintf(l, "row 1\n")
	fmt.Fprintf(l.Above(w), "row 2\n")
	l.Done()
	w.Close()
	got, _ := io.ReadAll(r)
	if string(got) != "row 1\nrow 2\n" {
		t.Errorf("pipe got %q", got)
	}
}

// TestLineStaysBelow: on a terminal the status is drawn, erased before
// other output and drawn again after it, but not after a partial line.
func TestLineStaysBelow(t *testing.T) {
	var out bytes.Buffer
	l := &Line{out: &out, fd: -1, on: true}
	n := 0
	l.Show(func() string { n++; return fmt.Sprintf("step %d", n) })
	fmt.Fprint(l, "partial ")
	fmt.Fprint(l, "done\n")
	l.Done()
	want := "\rstep 1\x1b[K" + "\r\x1b[K" + "partial " + "done\n" + "\rstep 2\x1b[K" + "\r\x1b[K"
	if got := out.String(); got != want {
		t.Errorf("terminal got %q,\nwant %q", got, want)
	}
	if strings.Contains(out.String()[len(want):], "step") {
		t.Error("drawn after Done")
	}
}

func TestLeft(t *testing.T) {
	for _, c := range []struct {
		done    float64
		elapsed time.Duration
		want    string
	}{
		{0, time.Minute, ""},
		{0.25, time.Minute, "about 3m0s left"},
		{0.5, 90 * time.Minute, "about 1h30m0s left"},
		{1, time.Minute, "about 0s left"},
	} {
		if got := Left(c.done, c.elapsed); got != c.want {
			t.Errorf("Left(%v, %v) = %q, want %q", c.done, c.elapsed, got, c.want)
		}
	}
}
