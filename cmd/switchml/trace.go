package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
)

// traceFile is where a worker's timeline goes (--trace): a buffered file
// that remembers the first write error, since the library writes it from
// Session.Close, whose error the commands do not report.
type traceFile struct {
	f   *os.File
	w   *bufio.Writer
	err error
}

func createTrace(path string) (*traceFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	return &traceFile{f: f, w: bufio.NewWriter(f)}, nil
}

func (t *traceFile) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if err != nil && t.err == nil {
		t.err = err
	}
	return n, err
}

// Close flushes and closes the file, and reports the first error writing it.
func (t *traceFile) Close() error {
	err := errors.Join(t.err, t.w.Flush(), t.f.Close())
	if err != nil {
		return fmt.Errorf("--trace %s: %w", t.f.Name(), err)
	}
	return nil
}
