package switchml

import (
	"bufio"
	"io"
	"strconv"
	"sync"
	"time"
)

// DefaultTraceEvents is how many trace events a session keeps when
// Config.TraceEvents is 0: the latest ones, about 4 MiB of memory.
const DefaultTraceEvents = 1 << 15

// maxTraceEvents bounds Config.TraceEvents (about 2 GiB of events).
const maxTraceEvents = 1 << 24

// traceArg is a numeric argument of a trace event.
type traceArg struct {
	key string
	val int64
}

// traceEvent is one span of the timeline. Its fields are strings the
// package holds and numbers, so that recording one allocates nothing.
type traceEvent struct {
	name, cat string
	// detail, if set, is shown as the event's "name" argument (a barrier's
	// name, an error).
	detail     string
	tid        int32
	start, end time.Time
	args       [5]traceArg
	nargs      uint8
}

// tracer keeps a session's timeline in a ring of the latest events and
// writes it as Chrome trace-event JSON (the format Perfetto and
// chrome://tracing open) when the session closes. Lanes record from their
// own goroutines, so it locks; nothing in it runs unless tracing is on.
type tracer struct {
	w     io.Writer
	epoch time.Time
	pid   int
	label string
	lanes int

	mu      sync.Mutex
	ring    []traceEvent
	written uint64 // events recorded, including those the ring has overwritten
}

func newTracer(w io.Writer, events, rank, lanes int, label string) *tracer {
	if events == 0 {
		events = DefaultTraceEvents
	}
	return &tracer{w: w, epoch: time.Now(), pid: rank, label: label, lanes: lanes, ring: make([]traceEvent, events)}
}

// span records an event from start to end on thread tid (0: the session's
// calls, 1+l: lane l).
func (t *tracer) span(tid int, cat, name, detail string, start, end time.Time, args ...traceArg) {
	t.mu.Lock()
	e := &t.ring[t.written%uint64(len(t.ring))]
	t.written++
	*e = traceEvent{name: name, cat: cat, detail: detail, tid: int32(tid), start: start, end: end}
	e.nargs = uint8(copy(e.args[:], args))
	t.mu.Unlock()
}

// wait records a call that waits for every rank (a barrier, a broadcast)
// and began at start; a nil tracer records nothing.
func (t *tracer) wait(what, name string, start time.Time) {
	if t != nil {
		t.span(0, "wait", what, name, start, time.Now())
	}
}

// micros is t's offset from the epoch in the trace's unit, microseconds.
func (t *tracer) micros(b []byte, at time.Time) []byte {
	return strconv.AppendFloat(b, float64(at.Sub(t.epoch).Nanoseconds())/1e3, 'f', 3, 64)
}

// flush writes the events still in the ring, oldest first.
func (t *tracer) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := min(t.written, uint64(len(t.ring)))
	oldest := t.written - kept
	bw := bufio.NewWriter(t.w)
	b := make([]byte, 0, 512)
	b = append(b, `{"displayTimeUnit":"ms","otherData":{"source":"switchml","session":`...)
	b = strconv.AppendQuote(b, t.label)
	b = append(b, `,"events":`...)
	b = strconv.AppendUint(b, t.written, 10)
	b = append(b, `,"events_dropped":`...)
	b = strconv.AppendUint(b, oldest, 10)
	b = append(b, `},"traceEvents":[`...)
	// Every event but the first is preceded by its separator.
	first := true
	begin := func(ph string) {
		if !first {
			b = append(b, ",\n"...)
		}
		first = false
		b = append(b, `{"ph":"`...)
		b = append(b, ph...)
		b = append(b, `","pid":`...)
	}
	meta := func(tid int, what, name string) {
		begin("M")
		b = strconv.AppendInt(b, int64(t.pid), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, `,"name":`...)
		b = strconv.AppendQuote(b, what)
		b = append(b, `,"args":{"name":`...)
		b = strconv.AppendQuote(b, name)
		b = append(b, "}}"...)
	}
	meta(0, "process_name", t.label)
	meta(0, "thread_name", "calls")
	for l := range t.lanes {
		meta(l+1, "thread_name", "lane "+strconv.Itoa(l))
	}
	for i := oldest; i < t.written; i++ {
		e := &t.ring[i%uint64(len(t.ring))]
		begin("X")
		b = strconv.AppendInt(b, int64(t.pid), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(e.tid), 10)
		b = append(b, `,"cat":`...)
		b = strconv.AppendQuote(b, e.cat)
		b = append(b, `,"name":`...)
		b = strconv.AppendQuote(b, e.name)
		b = append(b, `,"ts":`...)
		b = t.micros(b, e.start)
		b = append(b, `,"dur":`...)
		b = strconv.AppendFloat(b, float64(e.end.Sub(e.start).Nanoseconds())/1e3, 'f', 3, 64)
		b = append(b, `,"args":{`...)
		sep := ""
		if e.detail != "" {
			b = append(b, `"name":`...)
			b = strconv.AppendQuote(b, e.detail)
			sep = ","
		}
		for _, a := range e.args[:e.nargs] {
			b = append(b, sep...)
			b = strconv.AppendQuote(b, a.key)
			b = append(b, ':')
			b = strconv.AppendInt(b, a.val, 10)
			sep = ","
		}
		b = append(b, "}}"...)
		if len(b) > 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, "]}\n"...)
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.Flush()
}
