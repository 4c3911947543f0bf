package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// rankTrace opens the file rank writes its SwitchML timeline to (--trace
// PATH): PATH with ".rankR" before its extension, so that the ranks of a
// job on one host do not overwrite each other. Without a path the writer
// is nil. done closes the file once the backend has written it, and says
// on stderr if writing failed (the backend's Close, which writes it, is
// not checked).
func rankTrace(path string, rank int) (w io.Writer, done func(), err error) {
	if path == "" {
		return nil, func() {}, nil
	}
	ext := filepath.Ext(path)
	name := strings.TrimSuffix(path, ext) + fmt.Sprintf(".rank%d", rank) + ext
	f, err := os.Create(name)
	if err != nil {
		return nil, nil, fmt.Errorf("--trace: %w", err)
	}
	tw := &traceWriter{f: f}
	return tw, func() {
		if err := tw.err; err != nil || f.Close() != nil {
			fmt.Fprintf(os.Stderr, "rank %d: writing the timeline %s failed: %v\n", rank, name, err)
		}
	}, nil
}

// traceWriter keeps the first write error.
type traceWriter struct {
	f   *os.File
	err error
}

func (t *traceWriter) Write(p []byte) (int, error) {
	n, err := t.f.Write(p)
	if err != nil && t.err == nil {
		t.err = err
	}
	return n, err
}
