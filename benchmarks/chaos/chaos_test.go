package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

// Library failures as a worker ends with them: each wraps the library's
// own error value, as the library's calls do.
var (
	errWrongSum  = fmt.Errorf("verification failed after allreduce 3: %w", fmt.Errorf("%w: element 7 = 2, want 3", dtype.ErrUnexpected))
	errRankLost  = fmt.Errorf("switchml: allreduce: %w: %w: rank 2's lease lapsed", switchml.ErrAborted, switchml.ErrRankLost)
	errSwitch    = fmt.Errorf("switchml: allreduce: %w: %w: the switch went away", switchml.ErrAborted, switchml.ErrSwitchLost)
	errRestarted = fmt.Errorf("switchml: barrier: %w: %w: %w: join again", switchml.ErrAborted, switchml.ErrControllerRestarted, switchml.ErrSwitchLost)
	errRankFail  = fmt.Errorf("switchml: allreduce: %w: %w: input not finite", switchml.ErrAborted, switchml.ErrRankFailed)
	errSilent    = fmt.Errorf("switchml: no answer from the switch: %w", switchml.ErrTimeoutBudget)
	errMissing   = fmt.Errorf("%w (join timed out): ranks 1, 3 of 4", switchml.ErrRanksMissing)
)

// result is rank's result as the chaos run reads it from the report a
// worker that ended with err prints (nil: a verified run).
func result(t *testing.T, rank int, err error) rankResult {
	t.Helper()
	rep := benchmarks.WorkerReport{Verified: true}
	if err != nil {
		rep.Fail(err)
	}
	out, jerr := json.Marshal(rep)
	if jerr != nil {
		t.Fatal(jerr)
	}
	msg, cause := reportResult(out, nil, func() string { return "" })
	return rankResult{rank: rank, msg: msg, cause: cause}
}

// TestCause: a worker's failure is told by the library's error it holds,
// as its report carries it, whatever the words around it.
func TestCause(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{errWrongSum, "wrong sum"},
		{errRankLost, "rank lost"},
		{errSwitch, "switch lost"},
		{errRestarted, "controller restarted"},
		{errRankFail, "rank failed"},
		{errSilent, "switch silent"},
		{errMissing, "rank missing at join"},
		{errors.New("panic: runtime error: index out of range"), "other"},
	} {
		r := result(t, 0, tc.err)
		if got := Cause(r.msg, r.cause); got != tc.want {
			t.Errorf("Cause of %v (cause %q) = %q, want %q", tc.err, r.cause, got, tc.want)
		}
	}
	msg, cause := reportResult([]byte("not json"), errors.New("exit status 2"), func() string { return "killed" })
	if got := Cause(msg, cause); got != "other" || !strings.Contains(msg, "killed") {
		t.Errorf("a worker without a report: %q, %q", msg, got)
	}
	// Every cause the chaos run has a word for is one a worker reports.
	for name := range causes {
		if !slices.ContainsFunc(benchmarks.Causes, func(c benchmarks.Cause) bool { return c.Name == name }) {
			t.Errorf("chaos reads the cause %q, which benchmarks.Causes does not name", name)
		}
	}
}

// TestClassify: a round's outcome follows from its ranks' errors and its
// fault; the time to detect runs from the fault to the last failing rank.
func TestClassify(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ok := func(rank int) rankResult { return rankResult{rank: rank, exitedAt: at.Add(time.Second)} }
	fail := func(rank int, err error, after time.Duration) rankResult {
		r := result(t, rank, err)
		r.exitedAt = at.Add(after)
		return r
	}
	for _, tc := range []struct {
		name    string
		fault   string
		ranks   []rankResult
		faultAt time.Time
		missed  bool
		want    string
		detect  float64
	}{
		{"clean", "none", []rankResult{ok(0), ok(1)}, time.Time{}, false, OutcomeOK, 0},
		{"loss recovered", "loss", []rankResult{ok(0), ok(1), ok(2)}, time.Time{}, false, OutcomeOK, 0},
		{"fault after the job", "restart-switch", []rankResult{ok(0), ok(1)}, at, true, OutcomeMissed, 0},
		{"fault survived", "restart-controller", []rankResult{ok(0), ok(1)}, at, false, OutcomeOK, 0},
		{"kill detected", "kill-worker", []rankResult{fail(0, errRankLost, 2*time.Second), fail(2, errRankFail, 3*time.Second)}, at, false, OutcomeDetected, 3},
		{"restart detected", "restart-switch", []rankResult{fail(0, errSwitch, 1500*time.Millisecond), ok(1)}, at, false, OutcomeDetected, 1.5},
		{"wrong cause", "restart-switch", []rankResult{fail(0, errRankLost, time.Second)}, at, false, OutcomeUnexpected, 1},
		{"failure without a fault", "none", []rankResult{fail(0, errSilent, time.Second), ok(1)}, time.Time{}, false, OutcomeUnexpected, 0},
		{"wrong sum", "kill-worker", []rankResult{fail(0, errWrongSum, time.Second), fail(1, errRankFail, time.Second)}, at, false, OutcomeWrongSum, 1},
		{"failed before the fault", "kill-worker", []rankResult{fail(0, errRankFail, -time.Second)}, at, false, OutcomeDetected, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Round{Fault: tc.fault}
			classify(&r, tc.ranks, tc.faultAt, tc.missed)
			if r.Outcome != tc.want || r.DetectS != tc.detect {
				t.Errorf("outcome %q, detect %v s; want %q, %v s (round %+v)", r.Outcome, r.DetectS, tc.want, tc.detect, r)
			}
			failed := 0
			for _, k := range tc.ranks {
				if k.msg != "" {
					failed++
				}
			}
			if len(r.Messages) != failed {
				t.Errorf("%d messages for %d failed ranks: %q", len(r.Messages), failed, r.Messages)
			}
		})
	}
}

// TestSummary: the run fails on a wrong sum, a leak or an unexpected
// failure, and counts a clean round after a failed one as a recovery.
func TestSummary(t *testing.T) {
	round := func(fault string, errs ...error) Round {
		r := Round{Fault: fault}
		var ranks []rankResult
		for i, err := range errs {
			ranks = append(ranks, result(t, i, err))
		}
		classify(&r, ranks, time.Time{}, false)
		return r
	}
	var s Summary
	s.add(round("none", nil, nil))
	s.add(round("kill-worker", errRankLost, nil))
	s.add(round("none", nil, nil)) // recovery
	s.add(round("loss", nil, nil))
	s.add(round("restart-switch", errSwitch))
	s.add(round("restart-switch", errSwitch))
	s.add(round("none", nil)) // recovery
	s.LeakCheck = "a job holding all 512 slots ran"
	if err := s.Err(); err != nil {
		t.Errorf("a clean run: %v", err)
	}
	if s.Recoveries != 2 || len(s.Rounds) != 7 || s.ByOutcome[OutcomeOK] != 4 || s.ByOutcome[OutcomeDetected] != 3 {
		t.Errorf("summary %+v: want 7 rounds, 4 ok, 3 detected, 2 recoveries", s)
	}
	var table strings.Builder
	if err := s.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "| 7 | 4 | 3 | 0 | 0 | 0 | 2 | 0.00 s | 0 |") {
		t.Errorf("table:\n%s", table.String())
	}

	for name, spoil := range map[string]func(*Summary){
		"wrong sum":  func(s *Summary) { s.add(round("loss", errWrongSum)) },
		"unexpected": func(s *Summary) { s.add(round("none", errSilent)) },
		"leak":       func(s *Summary) { s.LeakedSlots, s.LeakCheck = -1, "a job holding every slot failed: no room" },
	} {
		bad := s
		bad.Rounds = slices.Clone(s.Rounds)
		bad.ByOutcome = maps.Clone(s.ByOutcome)
		spoil(&bad)
		if bad.Err() == nil {
			t.Errorf("%s: the run passed: %+v", name, bad)
		}
	}

	// The JSON keeps the names `switchml chaos --json` has written.
	path := filepath.Join(t.TempDir(), "chaos.json")
	if err := s.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rounds) != 7 || back.Recoveries != 2 {
		t.Errorf("read back %+v, %v", back, err)
	}
	for _, key := range []string{`"seed"`, `"rounds"`, `"by_outcome"`, `"recoveries"`, `"worst_detect_s"`, `"wrong_sums"`, `"leaked_slots"`, `"leak_check"`, `"outcome"`, `"causes"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("the summary's JSON lacks %s: %s", key, b)
		}
	}
}

// TestSchedule: a seed gives the same rounds every time, every fault comes
// up, and job sizes stay within 2..MaxWorkers.
func TestSchedule(t *testing.T) {
	draw := func(seed uint64) []string {
		s := newSchedule(seed, 4)
		var out []string
		for i := range 200 {
			r, dtype := s.next(i + 1)
			if r.Workers < 2 || r.Workers > 4 {
				t.Fatalf("round %d: %d workers, want 2..4", i+1, r.Workers)
			}
			d := s.delay()
			if d < 200*time.Millisecond || d >= 1500*time.Millisecond {
				t.Fatalf("round %d: the fault lands after %v, want 200 ms to 1.5 s", i+1, d)
			}
			out = append(out, r.Fault+"/"+dtype+"/"+string(rune('0'+r.Workers)))
		}
		return out
	}
	a, b := draw(3), draw(3)
	if !slices.Equal(a, b) {
		t.Errorf("seed 3 drew two schedules")
	}
	if slices.Equal(a, draw(4)) {
		t.Errorf("seeds 3 and 4 drew the same schedule")
	}
	for _, f := range Faults {
		if !slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, f+"/") }) {
			t.Errorf("fault %s never drawn in 200 rounds", f)
		}
	}
}

// TestWorkerArgs: only the loss fault adds packet faults, and every rank of
// a round joins the same job with the same size.
func TestWorkerArgs(t *testing.T) {
	r := &runner{cfg: Config{Elements: 1000, Iters: 7}, controller: "127.0.0.1:50051"}
	loss := strings.Join(r.workerArgs(Round{Round: 5, Fault: "loss", Workers: 3}, "int32", 2), " ")
	for _, want := range []string{"--controller 127.0.0.1:50051", "--job chaos-5", "--rank 2", "--workers 3", "--elements 1000", "--iters 7", "--dtype int32", "--drop 0.01", "--json"} {
		if !strings.Contains(loss, want) {
			t.Errorf("args %q lack %q", loss, want)
		}
	}
	if none := strings.Join(r.workerArgs(Round{Round: 5, Fault: "kill-worker", Workers: 3}, "float32", 0), " "); strings.Contains(none, "--drop") {
		t.Errorf("a kill-worker round injects loss too: %q", none)
	}
}

func TestConfigCheck(t *testing.T) {
	good := Config{MaxWorkers: 2, Elements: 1, Iters: 1, Slots: 64, Command: nil}
	if err := good.check(); err == nil || !strings.Contains(err.Error(), "Command") {
		t.Errorf("no Command: %v", err)
	}
	for _, bad := range []Config{{MaxWorkers: 1, Elements: 1, Iters: 1, Slots: 64}, {MaxWorkers: 2, Elements: 1, Iters: 1, Slots: 63}} {
		if err := bad.check(); err == nil || !strings.Contains(err.Error(), "--max-workers >= 2") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
