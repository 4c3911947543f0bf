// Package chaos is a bounded chaos run on loopback: allreduce jobs in a
// loop while workers are killed, the switch and the controller restarted
// and packets lost. It reports failures by cause, the time from a fault to
// the last surviving rank's error, recoveries, wrong sums and leaked slots
// (a last job that needs every slot of the switch must run).
//
// Run drives the processes (`switchml switch`, `controller` and
// `allreduce`, started through Config.Command); what a round's outcome is
// and what the run concludes are plain functions of the workers' reports,
// tested on their own. `switchml chaos` is the command line.
package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/switchml/switchml-go/internal/progress"
)

// Faults are what a round may do to its job.
var Faults = []string{"none", "loss", "kill-worker", "restart-switch", "restart-controller"}

// Outcomes of a round.
const (
	OutcomeOK         = "ok"         // every rank verified its sums
	OutcomeDetected   = "detected"   // ranks failed, each naming a cause the fault explains
	OutcomeMissed     = "missed"     // the job ended before the fault landed
	OutcomeWrongSum   = "wrong-sum"  // a rank's sum was wrong
	OutcomeUnexpected = "unexpected" // a rank failed for a cause the fault does not explain
)

// Round is one job and the fault done to it.
type Round struct {
	Round    int            `json:"round"`
	Fault    string         `json:"fault"`
	Workers  int            `json:"workers"`
	Outcome  string         `json:"outcome"` // one of the Outcome constants
	Causes   map[string]int `json:"causes,omitempty"`
	DetectS  float64        `json:"detect_s,omitempty"` // fault to the last surviving rank's error
	Seconds  float64        `json:"seconds"`
	Messages []string       `json:"messages,omitempty"`
}

// Summary is what a run found (written as JSON by `switchml chaos --json`).
type Summary struct {
	Seed        uint64         `json:"seed"`
	DurationS   float64        `json:"duration_s"`
	Rounds      []Round        `json:"rounds"`
	ByOutcome   map[string]int `json:"by_outcome"`
	Recoveries  int            `json:"recoveries"`
	WorstDetect float64        `json:"worst_detect_s"`
	WrongSums   int            `json:"wrong_sums"`
	LeakedSlots int            `json:"leaked_slots"`
	LeakCheck   string         `json:"leak_check"`

	lastFailed bool
}

// Config is a chaos run; `switchml chaos` gives its defaults.
type Config struct {
	Duration   time.Duration // how long to run rounds
	Seed       uint64        // seed of the fault schedule
	MaxWorkers int           // largest job: 2 to this many workers (at least 2)
	Elements   int           // tensor elements per worker (at least 1)
	Iters      int           // allreduces per round (at least 1)
	Slots      int           // slots of the switch, small so that a leak shows (at least 64)

	// Command returns the command that runs `switchml ARGS...`, stopped
	// when the run's context ends (required).
	Command func(args ...string) *exec.Cmd
	// Verbose copies every process's log to stderr.
	Verbose bool
	// Out receives a line per round (default: discarded).
	Out io.Writer
	// Line, if set, shows the running round.
	Line *progress.Line
}

func (c *Config) check() error {
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.MaxWorkers < 2 || c.Elements < 1 || c.Iters < 1 || c.Slots < 64 {
		return errors.New("want --max-workers >= 2, --elements >= 1, --iters >= 1 and --slots >= 64")
	}
	if c.Command == nil {
		return errors.New("chaos: no Command to start switchml processes with")
	}
	return nil
}

// causes are the chaos run's words for the causes a worker reports
// (benchmarks.Causes' names); a cause missing here counts as "other".
var causes = map[string]string{
	"wrong-sum":            "wrong sum",
	"rank-lost":            "rank lost",
	"switch-lost":          "switch lost",
	"controller-restarted": "controller restarted",
	"rank-failed":          "rank failed",
	"switch-silent":        "switch silent",
	"ranks-missing":        "rank missing at join",
}

// Cause names what happened to a worker, from its report's error and
// cause (benchmarks.WorkerReport): "ok" when it has no error.
func Cause(msg, cause string) string {
	if msg == "" {
		return "ok"
	}
	if c, ok := causes[cause]; ok {
		return c
	}
	return "other"
}

// expected lists the causes a fault may legitimately produce; a fault
// missing here is not injected while the job runs.
var expected = map[string][]string{
	// A worker killed before it registered leaves the others waiting for
	// it until their join timeout, which names it.
	"kill-worker": {"rank lost", "rank failed", "rank missing at join"},
	// A restart that lands while the ranks join ends the ranks that had
	// registered; one that registers afterwards waits for them until its
	// join timeout, which names them.
	"restart-switch": {"switch lost", "rank failed", "rank missing at join"},
	// A restarted controller takes running jobs back from the switch; a
	// job it could not take back must fail naming the restart.
	"restart-controller": {"controller restarted", "rank failed", "rank missing at join"},
}

// schedule draws each round's fault, job size and timing from the seed,
// in an order that keeps a seed's schedule what it was.
type schedule struct {
	rng        *rand.Rand
	maxWorkers int
}

func newSchedule(seed uint64, maxWorkers int) *schedule {
	return &schedule{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), maxWorkers: maxWorkers}
}

// next is round's job: its fault, its size and its element type.
func (s *schedule) next(round int) (Round, string) {
	r := Round{Round: round, Fault: Faults[s.rng.IntN(len(Faults))], Workers: 2 + s.rng.IntN(s.maxWorkers-1), Causes: map[string]int{}}
	dtype := []string{"float32", "int32"}[s.rng.IntN(2)]
	return r, dtype
}

// delay is how long after the start of a round its fault lands.
func (s *schedule) delay() time.Duration {
	return time.Duration(200+s.rng.IntN(1300)) * time.Millisecond
}

// victim is the rank a kill-worker fault kills.
func (s *schedule) victim(workers int) int { return s.rng.IntN(workers) }

// rankResult is how one surviving rank of a round ended.
type rankResult struct {
	rank     int
	msg      string    // its error; empty if it verified its sums
	cause    string    // its error's cause, as its report names it
	exitedAt time.Time // when its process ended
}

// classify fills in r's causes, messages, time to detect and outcome from
// its surviving ranks' results. faultAt is when the fault landed (zero:
// none was injected); missed says the job had ended by then.
func classify(r *Round, ranks []rankResult, faultAt time.Time, missed bool) {
	if r.Causes == nil {
		r.Causes = map[string]int{}
	}
	failed := false
	for _, k := range ranks {
		cause := Cause(k.msg, k.cause)
		r.Causes[cause]++
		if cause == "ok" {
			continue
		}
		failed = true
		r.Messages = append(r.Messages, fmt.Sprintf("rank %d: %s", k.rank, k.msg))
		if !faultAt.IsZero() && k.exitedAt.After(faultAt) {
			r.DetectS = max(r.DetectS, k.exitedAt.Sub(faultAt).Seconds())
		}
	}
	switch {
	case r.Causes["wrong sum"] > 0:
		r.Outcome = OutcomeWrongSum
	case !failed && missed:
		r.Outcome = OutcomeMissed
	case !failed:
		r.Outcome = OutcomeOK
	case expectedOnly(r.Causes, expected[r.Fault]):
		r.Outcome = OutcomeDetected
	default:
		r.Outcome = OutcomeUnexpected
	}
}

// failed reports whether a rank of r failed.
func (r *Round) failed() bool {
	for c, n := range r.Causes {
		if c != "ok" && n > 0 {
			return true
		}
	}
	return false
}

func expectedOnly(causes map[string]int, expected []string) bool {
	for c, n := range causes {
		if n > 0 && c != "ok" && !slices.Contains(expected, c) {
			return false
		}
	}
	return true
}

// add counts a classified round: a round without failures after one with
// failures is a recovery.
func (s *Summary) add(r Round) {
	if s.ByOutcome == nil {
		s.ByOutcome = map[string]int{}
	}
	if r.Outcome == OutcomeWrongSum {
		s.WrongSums += r.Causes["wrong sum"]
	}
	failed := r.failed()
	if !failed && s.lastFailed {
		s.Recoveries++
	}
	s.lastFailed = failed
	s.WorstDetect = max(s.WorstDetect, r.DetectS)
	s.ByOutcome[r.Outcome]++
	s.Rounds = append(s.Rounds, r)
}

// Err is the run's verdict: an error if a sum was wrong, a slot leaked or
// a failure named a cause its fault does not explain.
func (s *Summary) Err() error {
	if s.WrongSums > 0 || s.LeakedSlots != 0 || s.ByOutcome[OutcomeUnexpected] > 0 {
		return fmt.Errorf("chaos: %d wrong sums, leak check: %s, %d unexpected failures", s.WrongSums, s.LeakCheck, s.ByOutcome[OutcomeUnexpected])
	}
	return nil
}

// WriteJSON writes the summary as indented JSON to the file at path.
func (s *Summary) WriteJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable writes the summary as a one-row Markdown table.
func (s *Summary) WriteTable(w io.Writer) error {
	leaked := "0"
	if s.LeakedSlots != 0 {
		leaked = "some (" + s.LeakCheck + ")"
	}
	_, err := fmt.Fprintf(w, "| rounds | ok | detected | fault after the job | unexpected | wrong sums | recoveries | worst time to detect | leaked slots |\n"+
		"|---|---|---|---|---|---|---|---|---|\n"+
		"| %d | %d | %d | %d | %d | %d | %d | %.2f s | %s |\n", len(s.Rounds), s.ByOutcome[OutcomeOK], s.ByOutcome[OutcomeDetected],
		s.ByOutcome[OutcomeMissed], s.ByOutcome[OutcomeUnexpected], s.WrongSums, s.Recoveries, s.WorstDetect, leaked)
	return err
}

// roundHeader and writeRound are the line per round.
func roundHeader(w io.Writer) {
	fmt.Fprintf(w, "%6s  %-19s  %7s  %-10s  %8s  %s\n", "round", "fault", "workers", "outcome", "detect", "causes")
}

func writeRound(w io.Writer, r Round) {
	detect := "-"
	if r.DetectS > 0 {
		detect = fmt.Sprintf("%.2f s", r.DetectS)
	}
	fmt.Fprintf(w, "%6d  %-19s  %7d  %-10s  %8s  %s\n", r.Round, r.Fault, r.Workers, r.Outcome, detect, causesText(r.Causes))
	if r.Outcome == OutcomeUnexpected || r.Outcome == OutcomeWrongSum {
		for _, m := range r.Messages {
			fmt.Fprintf(w, "        %s\n", m)
		}
	}
}

func causesText(causes map[string]int) string {
	var parts []string
	for c, n := range causes {
		parts = append(parts, fmt.Sprintf("%s x%d", c, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
