// Command capi is libswitchml, the SwitchML worker library behind a C
// interface (switchml.h), for programs and language bindings that are not
// Go: the Python package in python/ loads it with ctypes. Build it with
//
//	go build -buildmode=c-shared -o libswitchml.so ./capi
//
// The library's objects stay on the Go side: C callers hold integer
// handles into a table here, so no Go pointer ever crosses the boundary,
// and C memory is only read and written for the length of the call that
// was given it.
package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
)

// main is never run: a c-shared build needs a main package.
func main() {}

// handles maps the integers C callers hold to the objects they name.
// Handles are never reused, so a stale one fails with errNoHandle instead
// of reaching another caller's object.
type handles[T any] struct {
	mu   sync.Mutex
	next int64
	m    map[int64]T
}

func (h *handles[T]) add(v T) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[int64]T{}
	}
	h.next++
	h.m[h.next] = v
	return h.next
}

func (h *handles[T]) get(id int64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	return v, ok
}

// take removes id, so that exactly one of several concurrent closes gets
// the object.
func (h *handles[T]) take(id int64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	delete(h.m, id)
	return v, ok
}

// session is a joined session and the Config it joined with, which says
// how wide each type travels (switchml.Config.WireWidth).
type session struct {
	*switchml.Session
	cfg switchml.Config
}

var (
	sessions handles[*session]
	switches handles[*local.Fabric]
)

// sessionCall finds session id and bounds a blocking call on it by
// timeoutMS (0: no bound of its own, the library's apply).
func sessionCall(id, timeoutMS int64) (*session, context.Context, context.CancelFunc, error) {
	s, ok := sessions.get(id)
	if !ok {
		return nil, nil, nil, noHandle("session", id)
	}
	switch {
	case timeoutMS < 0 || timeoutMS > maxMillis:
		return nil, nil, nil, invalid("timeout_ms is %d: pass 0 for the library's own bounds or a positive number of milliseconds, at most %d (about 292 years)", timeoutMS, int64(maxMillis))
	case timeoutMS == 0:
		ctx, cancel := context.WithCancel(context.Background())
		return s, ctx, cancel, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeoutMS)*time.Millisecond)
	return s, ctx, cancel, nil
}

// maxMillis is the most milliseconds a time.Duration holds: a longer
// timeout would wrap to a negative one, ending the call at once.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

func noHandle(what string, id int64) error {
	return fmt.Errorf("%w: no open %s has handle %d (closed already, or never opened)", errNoHandle, what, id)
}
