package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/internal/progress"
)

// Run starts a switch and a controller, runs rounds until cfg.Duration has
// passed or ctx ends, then the leak check, and returns what it found. Its
// error is about the run itself (a process that could not start); what
// the rounds found is the summary's Err.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every job comes from this host, and the leak check needs every slot.
	fab, err := harness.Start(ctx, harness.Config{Command: cfg.Command, Slots: cfg.Slots, Echo: cfg.Verbose,
		MaxSlotsPerClient: -1})
	if err != nil {
		return nil, err
	}
	defer fab.Close()
	r := &runner{cfg: cfg, fab: fab, controller: fab.ControllerAddr(), sched: newSchedule(cfg.Seed, cfg.MaxWorkers)}
	sum := &Summary{Seed: cfg.Seed, ByOutcome: map[string]int{}}
	begin := time.Now()
	fmt.Fprintf(cfg.Out, "chaos: %v of jobs on loopback (switch %s, controller %s, %d slots), seed %d\n",
		cfg.Duration, fab.DataplaneAddr(), fab.ControllerAddr(), cfg.Slots, cfg.Seed)
	roundHeader(cfg.Out)
	for round := 1; time.Since(begin) < cfg.Duration && ctx.Err() == nil; round++ {
		rd, err := r.round(ctx, round, begin)
		if err != nil {
			return nil, err
		}
		sum.add(rd)
		writeRound(cfg.Out, rd)
	}
	sum.DurationS = time.Since(begin).Seconds()
	cfg.Line.Show(func() string { return "chaos: leak check, a job holding every slot" })
	if err := r.leakCheck(sum); err != nil {
		return nil, err
	}
	return sum, nil
}

// runner runs the rounds of one run on its fabric.
type runner struct {
	cfg        Config
	fab        *harness.Fabric
	controller string
	sched      *schedule
}

// round runs one job, injects its fault while it runs and classifies how
// its ranks ended.
func (r *runner) round(ctx context.Context, round int, begin time.Time) (Round, error) {
	rd, dtype := r.sched.next(round)
	start := time.Now()
	r.showRound(rd, start, begin)
	ws := make([]*harness.Proc, rd.Workers)
	for w := range ws {
		var err error
		if ws[w], err = harness.StartProc(fmt.Sprintf("rank%d", w), r.cfg.Verbose, r.cfg.Command(r.workerArgs(rd, dtype, w)...)); err != nil {
			return rd, err
		}
	}
	exited, done := watchExits(ws)
	victim, faultAt, missed, err := r.inject(ctx, rd.Fault, ws, done)
	if err != nil {
		return rd, err
	}
	for _, d := range done {
		<-d
	}
	rd.Seconds = time.Since(start).Seconds()
	var ranks []rankResult
	for w, c := range ws {
		if w != victim {
			msg, cause := workerResult(c)
			ranks = append(ranks, rankResult{rank: w, msg: msg, cause: cause, exitedAt: exited[w]})
		}
	}
	classify(&rd, ranks, faultAt, missed)
	return rd, nil
}

func (r *runner) showRound(rd Round, start, begin time.Time) {
	r.cfg.Line.Show(func() string {
		run := time.Since(begin)
		left := max(r.cfg.Duration-run, 0)
		return fmt.Sprintf("chaos: round %d (%s, %d workers, %s); %s of %s, %s left, then the leak check",
			rd.Round, rd.Fault, rd.Workers, progress.Round(time.Since(start)), progress.Round(run), r.cfg.Duration, progress.Round(left))
	})
}

// workerArgs are the flags of rank w of round rd.
func (r *runner) workerArgs(rd Round, dtype string, w int) []string {
	a := []string{"allreduce", "--controller", r.controller, "--job", fmt.Sprintf("chaos-%d", rd.Round), "--rank", strconv.Itoa(w),
		"--workers", strconv.Itoa(rd.Workers), "--elements", strconv.Itoa(r.cfg.Elements), "--dtype", dtype, "--iters", strconv.Itoa(r.cfg.Iters),
		"--lanes", "2", "--window", "16", "--seed", strconv.Itoa(rd.Round), "--give-up", "60s", "--join-timeout", "15s", "--json"}
	if rd.Fault == "loss" {
		a = append(a, "--drop", "0.01", "--duplicate", "0.005", "--reorder", "0.005")
	}
	return a
}

// watchExits notes when each process ends: done[w] is closed once
// exited[w] is set.
func watchExits(ws []*harness.Proc) (exited []time.Time, done []chan struct{}) {
	exited = make([]time.Time, len(ws))
	done = make([]chan struct{}, len(ws))
	for w, c := range ws {
		done[w] = make(chan struct{})
		go func() {
			_ = c.Wait()
			exited[w] = time.Now()
			close(done[w])
		}()
	}
	return exited, done
}

// inject does fault to the running job a while after its start: it returns
// the rank it killed (-1: none), when the fault landed (zero: no fault)
// and whether every rank had already exited by then.
func (r *runner) inject(ctx context.Context, fault string, ws []*harness.Proc, done []chan struct{}) (victim int, faultAt time.Time, missed bool, err error) {
	victim = -1
	if _, ok := expected[fault]; !ok {
		return victim, faultAt, false, nil
	}
	wait := time.NewTimer(r.sched.delay())
	select {
	case <-wait.C:
	case <-ctx.Done():
		wait.Stop()
		return victim, faultAt, false, ctx.Err()
	}
	faultAt = time.Now()
	missed = true
	for _, d := range done {
		select {
		case <-d:
		default:
			missed = false
		}
	}
	switch fault {
	case "kill-worker":
		victim = r.sched.victim(len(ws))
		_ = ws[victim].Cmd().Process.Signal(syscall.SIGKILL)
	case "restart-switch", "restart-controller":
		err = r.restart(fault[len("restart-"):])
	}
	return victim, faultAt, missed, err
}

func (r *runner) restart(which string) error {
	if err := r.fab.Crash(which); err != nil {
		return err
	}
	_, err := r.fab.Restart(which)
	return err
}

// workerResult is how a worker's report says it ended: its error, empty
// if it verified its sums, and the error's cause (WorkerReport.Cause).
func workerResult(c *harness.Proc) (msg, cause string) {
	return reportResult(c.Stdout(), c.Wait(), func() string { return lastLine(c.Logs()) })
}

// reportResult reads a worker's report from its stdout; exitErr is how
// its process ended and lastLog its last line of log, for a worker that
// left no report of a failure.
func reportResult(stdout []byte, exitErr error, lastLog func() string) (msg, cause string) {
	var rep benchmarks.WorkerReport
	_ = json.Unmarshal(bytes.TrimSpace(stdout), &rep)
	if rep.Error == "" && (exitErr != nil || !rep.Verified) {
		return "exited without a verified result: " + lastLog(), benchmarks.CauseOther
	}
	return rep.Error, rep.Cause
}

// leakCheck runs a job that needs every slot: no slot may be left behind
// by the rounds.
func (r *runner) leakCheck(sum *Summary) error {
	lanes, window := 2, r.cfg.Slots/2
	leak := make([]*harness.Proc, 2)
	for w := range leak {
		var err error
		if leak[w], err = harness.StartProc(fmt.Sprintf("leak%d", w), r.cfg.Verbose, r.cfg.Command("allreduce", "--controller", r.controller, "--job", "chaos-leak-check",
			"--rank", strconv.Itoa(w), "--workers", "2", "--elements", "100000", "--iters", "2", "--lanes", strconv.Itoa(lanes),
			"--window", strconv.Itoa(window), "--give-up", "60s", "--json")); err != nil {
			return err
		}
	}
	sum.LeakCheck = "a job holding all " + strconv.Itoa(r.cfg.Slots) + " slots ran"
	for _, c := range leak {
		if err := c.Wait(); err != nil {
			sum.LeakedSlots = -1 // unknown how many: the job did not fit
			sum.LeakCheck = "a job holding every slot failed: " + lastLine(c.Logs())
		}
	}
	return nil
}
