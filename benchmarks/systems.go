package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchml/switchml-go/internal/harness"
)

// rankReport is what the driver keeps of one worker's report.
type rankReport struct {
	TATs        []float64
	Verified    bool
	Retransmits uint64
	Packets     uint64
	Transport   string
	WireBits    int // the width the values travelled at, 0 where unknown
	cpu         cpuTime
	start, end  float64 // the timed calls, Unix seconds (SwitchML)
	bytes       *rankBytes
}

// runSystem starts one process per rank (one mpirun for mpi) and collects
// their reports.
func (b *driver) runSystem(ctx context.Context, idx int, p Point, fab *harness.Fabric) ([]rankReport, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := launcher{b: b, ctx: ctx, p: p, idx: idx, rack: p.Mode == "rack"}
	var cmds []*exec.Cmd
	var err error
	switch p.System {
	case "switchml", "switchml-sparse", "switchml-auth", "switchml-tree", "switchml-afxdp", "switchml-shm":
		cmds = l.switchml(fab)
	case "ring":
		cmds, err = l.ring()
	case "gloo", "torch-switchml":
		cmds, err = l.torch(fab)
	case "mpi":
		cmds = l.mpi()
	default:
		return nil, fmt.Errorf("unknown system %q: want one of %s", p.System, strings.Join(Systems, ", "))
	}
	if err != nil {
		return nil, err
	}
	outs, err := runAll(ctx, cancel, cmds, b.o.Verbose, p.System)
	if err != nil {
		return nil, err
	}
	if p.System == "mpi" {
		return mpiReports(outs[0], p.Workers)
	}
	return b.workerReports(outs, p)
}

// launcher builds the commands of one point's ranks: in the rack, each in
// its worker's namespace and address; on loopback, here.
type launcher struct {
	b    *driver
	ctx  context.Context
	p    Point
	idx  int
	rack bool
}

func (l launcher) command(rank int, name string, args ...string) *exec.Cmd {
	if l.rack {
		return l.b.rack.Command(l.ctx, l.b.rack.WorkerNS(rank), name, args...)
	}
	return exec.CommandContext(l.ctx, name, args...)
}

func (l launcher) host(rank int) string {
	if l.rack {
		return l.b.rack.WorkerIP(rank)
	}
	return "127.0.0.1"
}

// counts are the elements, iterations and warm-up calls as arguments.
func (l launcher) counts() (elements, iters, warmup string) {
	return strconv.FormatInt(l.p.elements(), 10), strconv.Itoa(l.b.o.Iters), strconv.Itoa(l.b.o.Warmup)
}

// switchml is one `switchml allreduce` per rank. The jobs sweep runs
// several jobs at once, rank r of every job in worker r's namespace;
// int32 (the planner's type for them) with a seed per job, so that one
// job's values in another's sums would show.
func (l launcher) switchml(fab *harness.Fabric) []*exec.Cmd {
	p := l.p
	verify := l.b.o.Verify && l.rack
	jobs := 1
	if p.Jobs > 0 {
		jobs, verify = p.Jobs, l.b.o.Verify
	}
	var cmds []*exec.Cmd
	for j := 0; j < jobs; j++ {
		name := fmt.Sprintf("p%d", l.idx)
		if p.Jobs > 0 {
			name = fmt.Sprintf("p%d-j%d", l.idx, j)
		}
		for r := 0; r < p.Workers; r++ {
			args := switchmlArgs(l.b.o, p, fab.ControllerAddr(), name, r, verify, j+1)
			if l.rack {
				args = append(args, "--bind", l.host(r))
			}
			cmds = append(cmds, l.command(r, l.b.exe, args...))
		}
	}
	return cmds
}

// ring is one `switchml ring` per rank.
func (l launcher) ring() ([]*exec.Cmd, error) {
	p := l.p
	elements, iters, warmup := l.counts()
	addrs := make([]string, p.Workers)
	for r := range addrs {
		port := 41000 + r
		if !l.rack {
			var err error
			if port, err = harness.FreePort("tcp"); err != nil {
				return nil, err
			}
		}
		addrs[r] = fmt.Sprintf("%s:%d", l.host(r), port)
	}
	var cmds []*exec.Cmd
	for r := 0; r < p.Workers; r++ {
		cmds = append(cmds, l.command(r, l.b.exe, "ring", "--rank", strconv.Itoa(r), "--workers", strconv.Itoa(p.Workers),
			"--addrs", strings.Join(addrs, ","), "--elements", elements, "--iters", iters, "--warmup", warmup,
			fmt.Sprintf("--verify=%v", l.b.o.Verify), "--json"))
	}
	return cmds, nil
}

// torch is the PyTorch script per rank, over gloo or, for torch-switchml,
// the same script with one string changed, on the suite's switch and with
// SwitchML's settings of this point.
func (l launcher) torch(fab *harness.Fabric) ([]*exec.Cmd, error) {
	p, b := l.p, l.b
	elements, iters, warmup := l.counts()
	port, ifname := 29500+l.idx%1000, "eth0"
	if !l.rack {
		var err error
		if port, err = harness.FreePort("tcp"); err != nil {
			return nil, err
		}
		ifname = "lo"
	}
	backend := "gloo"
	var env []string
	if p.System == "torch-switchml" {
		backend = "switchml"
		env = append(os.Environ(), b.torchSML...)
		env = append(env, "SWITCHML_CONTROLLER="+fab.ControllerAddr(), "SWITCHML_LANES="+strconv.Itoa(p.Lanes),
			"SWITCHML_WINDOW="+strconv.Itoa(p.Window), "SWITCHML_PACKET_ELEMENTS="+strconv.Itoa(p.PacketElements))
		if extendedHeader(b.o, p) {
			env = append(env, "SWITCHML_EXTENDED=1")
		}
		if p.WireBits != 0 {
			env = append(env, "SWITCHML_WIRE_BITS="+strconv.Itoa(p.WireBits))
		}
	}
	var cmds []*exec.Cmd
	for r := 0; r < p.Workers; r++ {
		c := l.command(r, b.o.Python, b.gloo, "--rank", strconv.Itoa(r), "--world", strconv.Itoa(p.Workers),
			"--master-addr", l.host(0), "--master-port", strconv.Itoa(port), "--ifname", ifname,
			"--elements", elements, "--dtype", p.dtypeName(), "--iters", iters, "--warmup", warmup, "--backend", backend)
		if p.Gradients != "" {
			c.Args = append(c.Args, "--input", gradientFile(p.Gradients, r), "--inputs", p.Gradients)
		}
		if p.Op != "" {
			c.Args = append(c.Args, "--op", p.Op)
		}
		if l.rack && slices.Contains(p.Sweeps, "collectives") {
			// The rank's port is its namespace's eth0 alone: what it
			// counts is this rank's traffic.
			c.Args = append(c.Args, "--count-bytes")
		}
		if !b.o.Verify {
			c.Args = append(c.Args, "--no-verify")
		}
		c.Env = env
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// mpi is one mpirun of every rank.
func (l launcher) mpi() []*exec.Cmd {
	elements, iters, warmup := l.counts()
	return []*exec.Cmd{exec.CommandContext(l.ctx, "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(l.p.Workers),
		"--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", l.b.mpi, elements, iters, warmup)}
}

// mpiReports reads mpirun's one report, which gives the slowest rank's
// time per repetition, into one report per rank.
func mpiReports(out []byte, workers int) ([]rankReport, error) {
	var m struct {
		TATs     []float64   `json:"tat_s"`
		Verified bool        `json:"verified"`
		CPU      [][]float64 `json:"cpu"`
	}
	if err := json.Unmarshal(lastJSONLine(out), &m); err != nil {
		return nil, fmt.Errorf("mpirun output: %v: %q", err, out)
	}
	reps := make([]rankReport, workers)
	for r := range reps {
		reps[r] = rankReport{TATs: m.TATs, Verified: m.Verified}
		if r < len(m.CPU) && len(m.CPU[r]) == 2 {
			reps[r].cpu = cpuTime{User: m.CPU[r][0], Sys: m.CPU[r][1]}
		}
	}
	return reps, nil
}

// workerReports reads each rank's JSON report (WorkerReport).
func (b *driver) workerReports(outs [][]byte, p Point) ([]rankReport, error) {
	reps := make([]rankReport, len(outs))
	for r, out := range outs {
		var j WorkerReport
		if err := json.Unmarshal(lastJSONLine(out), &j); err != nil {
			return nil, fmt.Errorf("rank %d output: %v: %q", r, err, out)
		}
		if j.Error != "" {
			return nil, fmt.Errorf("rank %d: %s", r, j.Error)
		}
		reps[r] = rankReport{TATs: j.TATs, Verified: j.Verified, Retransmits: j.Retransmits, Packets: j.Packets, Transport: j.Transport, WireBits: j.WireBits,
			cpu:   cpuTime{User: j.CPUUserS, Sys: j.CPUSysS},
			start: j.TimedStart, end: j.TimedEnd}
		if j.CPULoopUserS != nil && j.CPULoopSysS != nil {
			reps[r].cpu = cpuTime{User: *j.CPULoopUserS, Sys: *j.CPULoopSysS}
		}
		if runsTorch(p.System) {
			var rb rankBytes
			if err := json.Unmarshal(lastJSONLine(out), &rb); err == nil && rb.NetSent+rb.NetRecv > 0 {
				reps[r].bytes = &rb
			}
		}
		if !b.o.Verify || (p.System == "switchml" && p.Mode != "rack" && p.Jobs == 0) {
			reps[r].Verified = false
		}
	}
	return reps, nil
}

// switchmlArgs are the arguments of rank's `switchml allreduce` at a point
// of a SwitchML system (--bind aside): the point's knobs, the header the
// point asks for, and the system's transport and --auth.
func switchmlArgs(o *Options, p Point, controller, job string, rank int, verify bool, seed int) []string {
	args := []string{"allreduce", "--controller", controller, "--job", job,
		"--rank", strconv.Itoa(rank), "--workers", strconv.Itoa(p.Workers), "--elements", strconv.FormatInt(p.elements(), 10), "--dtype", p.dtypeName(),
		"--iters", strconv.Itoa(o.Iters), "--warmup", strconv.Itoa(o.Warmup), "--lanes", strconv.Itoa(p.Lanes), "--window", strconv.Itoa(p.Window),
		"--packet-elements", strconv.Itoa(p.PacketElements), fmt.Sprintf("--verify=%v", verify), "--json",
		"--seed", strconv.Itoa(seed)}
	if o.SMLTimeout > 0 {
		args = append(args, "--timeout", o.SMLTimeout.String())
	}
	if p.WireBits != 0 {
		args = append(args, "--wire-bits", strconv.Itoa(p.WireBits))
	}
	if extendedHeader(o, p) {
		args = append(args, "--extended")
	}
	if systemAuth(p.System) {
		args = append(args, "--auth")
	}
	if systemSparse(p.System) {
		args = append(args, "--sparse")
		if o.SparseCrossover != 0 {
			args = append(args, "--sparse-crossover", strconv.FormatFloat(o.SparseCrossover, 'g', -1, 64))
		}
	}
	switch {
	case p.Gradients != "":
		args = append(args, "--gradients", p.Gradients) // the files set --elements
	case p.Density > 0 && p.Density < 1:
		args = append(args, "--density", strconv.FormatFloat(p.Density, 'g', -1, 64))
	}
	if t := systemTransport(p.System); t != "" {
		args = append(args, "--transport", t)
	}
	return args
}

func lastJSONLine(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && l[0] == '{' {
			return l
		}
	}
	return nil
}

// runAll runs the commands together and returns their stdouts. When one
// fails, the others get 15 s to finish before they are stopped: a missing
// rank would otherwise keep them waiting until the point's timeout.
// The commands must have been made with a context that cancel ends.
func runAll(ctx context.Context, cancel context.CancelFunc, cmds []*exec.Cmd, verbose bool, name string) ([][]byte, error) {
	procs := make([]*harness.Proc, len(cmds))
	for i, c := range cmds {
		c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
		c.WaitDelay = 5 * time.Second
		p, err := harness.StartProc(fmt.Sprintf("%s %d", name, i), verbose, c)
		if err != nil {
			for _, s := range procs[:i] {
				s.Cmd().Process.Kill()
				s.Wait()
			}
			return nil, fmt.Errorf("%w (command: %s)", err, strings.Join(c.Args, " "))
		}
		procs[i] = p
	}
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	var once sync.Once
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Wait()
			if errs[i] != nil {
				once.Do(func() { time.AfterFunc(15*time.Second, cancel) })
			}
		}()
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			msg := strings.TrimSpace(procs[i].Logs())
			if j := lastJSONLine(procs[i].Stdout()); j != nil {
				var e struct {
					Error string `json:"error"`
				}
				if json.Unmarshal(j, &e) == nil && e.Error != "" {
					msg = e.Error
				}
			}
			failed = append(failed, fmt.Sprintf("%s %d: %v: %s", name, i, err, tail(msg, 600)))
		}
	}
	if len(failed) > 0 {
		if err := ctx.Err(); err != nil && len(failed) == len(cmds) {
			failed = append(failed, "(stopped: "+err.Error()+")")
		}
		return nil, errors.New(strings.Join(failed, "\n"))
	}
	res := make([][]byte, len(procs))
	for i, p := range procs {
		res[i] = p.Stdout()
	}
	return res, nil
}

// switchmlBackend finds the switchml Python package for python: installed
// (pip install ./python), or else built from the checkout the suite runs
// in, with libswitchml.so compiled into work. It returns the environment
// that makes the package importable (empty when installed), or why it
// cannot.
func switchmlBackend(ctx context.Context, python, work string) (env []string, why string) {
	probe := func(env []string) error {
		cmd := exec.CommandContext(ctx, python, "-c", "import switchml, torch.distributed as d; d.Backend.SWITCHML")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, tail(string(out), 300))
		}
		return nil
	}
	if probe(nil) == nil {
		return []string{}, ""
	}
	checkout, err := filepath.Abs(".")
	if err != nil {
		return nil, err.Error()
	}
	pkg := filepath.Join(checkout, "python")
	if _, err := os.Stat(filepath.Join(pkg, "switchml", "__init__.py")); err != nil {
		return nil, fmt.Sprintf("%s has no switchml package (pip install ./python from the checkout), and %s is not a checkout to build it from", python, checkout)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = "/usr/local/go/bin/go"
	}
	lib := filepath.Join(work, "libswitchml.so")
	if out, err := exec.CommandContext(ctx, goCmd, "build", "-buildmode=c-shared", "-o", lib, "./capi").CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("building libswitchml.so (go build -buildmode=c-shared ./capi): %v: %s", err, tail(string(out), 600))
	}
	env = []string{"PYTHONPATH=" + pkg, "SWITCHML_LIBRARY=" + lib}
	if err := probe(env); err != nil {
		return nil, fmt.Sprintf("the switchml package of %s does not load: %v", checkout, err)
	}
	return env, ""
}
