package switchml

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"
)

// TraceJSON is the part of the trace-event format the tests read (exported
// for the package's external tests).
type TraceJSON struct {
	TraceEvents []struct {
		Ph   string         `json:"ph"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Cat  string         `json:"cat"`
		Name string         `json:"name"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
	OtherData map[string]any `json:"otherData"`
}

// TestTraceSpanNoAllocs: recording an event costs no allocation, so a
// traced lane's loop stays allocation-free.
func TestTraceSpanNoAllocs(t *testing.T) {
	tr := newTracer(io.Discard, 64, 0, 1, "test")
	now := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		tr.span(1, "loss", "retransmit burst", "", now, now, traceArg{"timeouts", 3})
	})
	if allocs != 0 {
		t.Errorf("span allocates %v times", allocs)
	}
}

// TestTraceRingKeepsTheLatest: a full ring keeps the newest events and
// says how many it dropped.
func TestTraceRingKeepsTheLatest(t *testing.T) {
	var out bytes.Buffer
	tr := newTracer(&out, 4, 3, 2, "job j rank 3 of 4")
	start := tr.epoch
	for i := range 10 {
		tr.span(0, "allreduce", "allreduce", "", start.Add(time.Duration(i)*time.Millisecond), start.Add(time.Duration(i+1)*time.Millisecond), traceArg{"seq", int64(i)})
	}
	if err := tr.flush(); err != nil {
		t.Fatal(err)
	}
	var got TraceJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var seqs []float64
	for _, e := range got.TraceEvents {
		if e.Ph == "X" {
			seqs = append(seqs, e.Args["seq"].(float64))
			if e.Dur != 1000 {
				t.Errorf("event %v lasts %v µs, want 1000", e.Args, e.Dur)
			}
		}
	}
	if len(seqs) != 4 || seqs[0] != 6 || seqs[3] != 9 {
		t.Errorf("kept %v, want the last four, 6 to 9", seqs)
	}
	if got.OtherData["events_dropped"] != float64(6) || got.OtherData["session"] != "job j rank 3 of 4" {
		t.Errorf("otherData %v", got.OtherData)
	}
	if len(got.TraceEvents) != 4+4 { // and the names of the process, of the calls and of two lanes
		t.Errorf("%d events, want 4 spans and 4 names", len(got.TraceEvents))
	}
}
