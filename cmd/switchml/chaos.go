package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/benchmarks/progress"
	"github.com/switchml/switchml-go/p4/fabric"
)

func init() {
	register("chaos", "a bounded chaos run on loopback: jobs in a loop while workers are killed, the switch and the controller restarted and packets lost; reports failures by cause, time to detect, recoveries, wrong sums and leaked slots", runChaos)
}

// chaosFaults are what a round may do to its job.
var chaosFaults = []string{"none", "loss", "kill-worker", "restart-switch", "restart-controller"}

// chaosRound is one job and the fault done to it.
type chaosRound struct {
	Round    int            `json:"round"`
	Fault    string         `json:"fault"`
	Workers  int            `json:"workers"`
	Outcome  string         `json:"outcome"` // ok, detected, missed (fault after the job), wrong-sum, unexpected
	Causes   map[string]int `json:"causes,omitempty"`
	DetectS  float64        `json:"detect_s,omitempty"` // fault to the last surviving rank's error
	Seconds  float64        `json:"seconds"`
	Messages []string       `json:"messages,omitempty"`
}

// chaosSummary is the --json output.
type chaosSummary struct {
	Seed        uint64         `json:"seed"`
	DurationS   float64        `json:"duration_s"`
	Rounds      []chaosRound   `json:"rounds"`
	ByOutcome   map[string]int `json:"by_outcome"`
	Recoveries  int            `json:"recoveries"`
	WorstDetect float64        `json:"worst_detect_s"`
	WrongSums   int            `json:"wrong_sums"`
	LeakedSlots int            `json:"leaked_slots"`
	LeakCheck   string         `json:"leak_check"`
}

// chaosCause names what a worker's error says happened.
func chaosCause(msg string) string {
	switch {
	case msg == "":
		return "ok"
	case strings.Contains(msg, "verification failed"):
		return "wrong sum"
	case strings.Contains(msg, "lost its connection"):
		return "rank lost"
	case strings.Contains(msg, "lost the switch"):
		return "switch lost"
	case strings.Contains(msg, "no longer holds this session"):
		return "controller restarted"
	case strings.Contains(msg, "aborted by rank"):
		return "rank failed"
	case strings.Contains(msg, "no answer from the switch"):
		return "switch silent"
	case strings.Contains(msg, "never registered"):
		return "rank missing at join"
	}
	return "other"
}

// chaosExpected lists the causes a fault may legitimately produce.
var chaosExpected = map[string][]string{
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

func runChaos(ctx context.Context, args []string) error {
	fs := newFlags("chaos", "[--duration D] [--seed S] [flags]")
	duration := fs.Duration("duration", 2*time.Minute, "how long to run rounds")
	seed := fs.Uint64("seed", 1, "seed of the fault schedule")
	maxWorkers := fs.Int("max-workers", 4, "largest job (2 to this many workers)")
	elements := fs.Int("elements", 200_000, "tensor elements per worker")
	iters := fs.Int("iters", 100, "allreduces per round (the fault lands while they run)")
	slots := fs.Int("slots", 512, "slots of the switch (small, so that a leak shows)")
	jsonOut := fs.String("json", "", "write the summary as JSON to this file")
	verbose := fs.Bool("v", false, "show the logs of every process")
	quiet := fs.Bool("quiet", false, "no status line (it is drawn only on a terminal, and not with -v)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *maxWorkers < 2 || *elements < 1 || *iters < 1 || *slots < 64 {
		return fmt.Errorf("want --max-workers >= 2, --elements >= 1, --iters >= 1 and --slots >= 64")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	self, err := selfCommand(ctx)
	if err != nil {
		return err
	}
	fab, err := fabric.Start(ctx, fabric.Config{Command: self, Slots: *slots, Echo: *verbose})
	if err != nil {
		return err
	}
	defer fab.Close()
	dp, ctl := fab.DataplaneAddr(), fab.ControllerAddr()
	restart := func(which string) error {
		if err := fab.Crash(which); err != nil {
			return err
		}
		_, err := fab.Restart(which)
		return err
	}

	line := progress.New(os.Stderr, *quiet || *verbose)
	defer line.Done()
	stdout := line.Above(os.Stdout)
	rng := rand.New(rand.NewPCG(*seed, *seed^0x5eed))
	sum := chaosSummary{Seed: *seed, ByOutcome: map[string]int{}}
	begin := time.Now()
	lastFaulted := false
	fmt.Fprintf(stdout, "chaos: %v of jobs on loopback (switch %s, controller %s, %d slots), seed %d\n", *duration, dp, ctl, *slots, *seed)
	fmt.Fprintf(stdout, "%6s  %-19s  %7s  %-10s  %8s  %s\n", "round", "fault", "workers", "outcome", "detect", "causes")
	for round := 1; time.Since(begin) < *duration && ctx.Err() == nil; round++ {
		r := chaosRound{Round: round, Fault: chaosFaults[rng.IntN(len(chaosFaults))], Workers: 2 + rng.IntN(*maxWorkers-1), Causes: map[string]int{}}
		dtype := []string{"float32", "int32"}[rng.IntN(2)]
		start := time.Now()
		fault, workers := r.Fault, r.Workers
		line.Show(func() string {
			run := time.Since(begin)
			left := max(*duration-run, 0)
			return fmt.Sprintf("chaos: round %d (%s, %d workers, %s); %s of %s, %s left, then the leak check",
				round, fault, workers, progress.Round(time.Since(start)), progress.Round(run), *duration, progress.Round(left))
		})
		ws := make([]*fabric.Proc, r.Workers)
		for w := range ws {
			a := []string{"allreduce", "--controller", ctl, "--job", fmt.Sprintf("chaos-%d", round), "--rank", strconv.Itoa(w),
				"--workers", strconv.Itoa(r.Workers), "--elements", strconv.Itoa(*elements), "--dtype", dtype, "--iters", strconv.Itoa(*iters),
				"--lanes", "2", "--window", "16", "--seed", strconv.Itoa(round), "--give-up", "60s", "--join-timeout", "15s", "--json"}
			if r.Fault == "loss" {
				a = append(a, "--drop", "0.01", "--duplicate", "0.005", "--reorder", "0.005")
			}
			if ws[w], err = fabric.StartProc(fmt.Sprintf("rank%d", w), *verbose, self(a...)); err != nil {
				return err
			}
		}
		exited := make([]time.Time, len(ws))
		done := make([]chan struct{}, len(ws))
		var wg sync.WaitGroup
		for w, c := range ws {
			wg.Add(1)
			done[w] = make(chan struct{})
			go func() {
				defer wg.Done()
				_ = c.Wait()
				exited[w] = time.Now()
				close(done[w])
			}()
		}
		victim := -1
		var faultAt time.Time
		missed := false
		if _, inject := chaosExpected[r.Fault]; inject {
			time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
			faultAt = time.Now()
			missed = true
			for _, d := range done {
				select {
				case <-d:
				default:
					missed = false
				}
			}
			switch r.Fault {
			case "kill-worker":
				victim = rng.IntN(len(ws))
				_ = ws[victim].Cmd().Process.Signal(syscall.SIGKILL)
			case "restart-switch":
				if err := restart("switch"); err != nil {
					return err
				}
			case "restart-controller":
				if err := restart("controller"); err != nil {
					return err
				}
			}
		}
		wg.Wait()
		r.Seconds = time.Since(start).Seconds()
		failed := false
		for w, c := range ws {
			if w == victim {
				continue
			}
			var rep benchmarks.WorkerReport
			_ = json.Unmarshal(bytes.TrimSpace(c.Stdout()), &rep)
			msg := rep.Error
			if rep.Error == "" && (c.Wait() != nil || !rep.Verified) {
				msg = "exited without a verified result: " + lastLine(c.Logs())
			}
			cause := chaosCause(msg)
			r.Causes[cause]++
			if cause != "ok" {
				failed = true
				r.Messages = append(r.Messages, fmt.Sprintf("rank %d: %s", w, msg))
				if !faultAt.IsZero() && exited[w].After(faultAt) {
					r.DetectS = max(r.DetectS, exited[w].Sub(faultAt).Seconds())
				}
			}
		}
		switch {
		case r.Causes["wrong sum"] > 0:
			r.Outcome = "wrong-sum"
			sum.WrongSums += r.Causes["wrong sum"]
		case !failed && missed:
			r.Outcome = "missed" // the job ended before the fault
		case !failed:
			r.Outcome = "ok"
		case expectedOnly(r.Causes, chaosExpected[r.Fault]):
			r.Outcome = "detected"
		default:
			r.Outcome = "unexpected"
		}
		if !failed && lastFaulted {
			sum.Recoveries++
		}
		lastFaulted = failed
		sum.WorstDetect = max(sum.WorstDetect, r.DetectS)
		sum.ByOutcome[r.Outcome]++
		sum.Rounds = append(sum.Rounds, r)
		detect := "-"
		if r.DetectS > 0 {
			detect = fmt.Sprintf("%.2f s", r.DetectS)
		}
		fmt.Fprintf(stdout, "%6d  %-19s  %7d  %-10s  %8s  %s\n", round, r.Fault, r.Workers, r.Outcome, detect, causesText(r.Causes))
		if r.Outcome == "unexpected" || r.Outcome == "wrong-sum" {
			for _, m := range r.Messages {
				fmt.Fprintf(stdout, "        %s\n", m)
			}
		}
	}
	sum.DurationS = time.Since(begin).Seconds()

	// No slot may be left behind: a job that needs every slot must run.
	line.Show(func() string { return "chaos: leak check, a job holding every slot" })
	lanes, window := 2, *slots/2
	leak := make([]*fabric.Proc, 2)
	for w := range leak {
		if leak[w], err = fabric.StartProc(fmt.Sprintf("leak%d", w), *verbose, self("allreduce", "--controller", ctl, "--job", "chaos-leak-check",
			"--rank", strconv.Itoa(w), "--workers", "2", "--elements", "100000", "--iters", "2", "--lanes", strconv.Itoa(lanes),
			"--window", strconv.Itoa(window), "--give-up", "60s", "--json")); err != nil {
			return err
		}
	}
	sum.LeakCheck = "a job holding all " + strconv.Itoa(*slots) + " slots ran"
	for _, c := range leak {
		if err := c.Wait(); err != nil {
			sum.LeakedSlots = -1 // unknown how many: the job did not fit
			sum.LeakCheck = "a job holding every slot failed: " + lastLine(c.Logs())
		}
	}
	line.Done()
	fmt.Println()
	fmt.Printf("| rounds | ok | detected | fault after the job | unexpected | wrong sums | recoveries | worst time to detect | leaked slots |\n|---|---|---|---|---|---|---|---|---|\n")
	leaked := "0"
	if sum.LeakedSlots != 0 {
		leaked = "some (" + sum.LeakCheck + ")"
	}
	fmt.Printf("| %d | %d | %d | %d | %d | %d | %d | %.2f s | %s |\n", len(sum.Rounds), sum.ByOutcome["ok"], sum.ByOutcome["detected"],
		sum.ByOutcome["missed"], sum.ByOutcome["unexpected"], sum.WrongSums, sum.Recoveries, sum.WorstDetect, leaked)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if sum.WrongSums > 0 || sum.LeakedSlots != 0 || sum.ByOutcome["unexpected"] > 0 {
		return fmt.Errorf("chaos: %d wrong sums, leak check: %s, %d unexpected failures", sum.WrongSums, sum.LeakCheck, sum.ByOutcome["unexpected"])
	}
	return nil
}

func expectedOnly(causes map[string]int, expected []string) bool {
	for c, n := range causes {
		if n > 0 && c != "ok" && !slices.Contains(expected, c) {
			return false
		}
	}
	return true
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
