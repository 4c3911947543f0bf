// Command train runs data-parallel training of a TensorFlow model over one
// of the allreduce backends.
//
//	go run ./cmd/train --model cnn --dataset fashion-mnist --workers 4 --backend switchml --epochs 5 --json
//
// On one host, the command starts what the backend needs (a float64 star
// server, ring addresses, or an in-process software switch and controller)
// and then re-executes itself once per worker with a hidden --worker-rank
// flag. Each worker has its own TensorFlow session with thread pools sized
// so the workers share the machine's cores. Rank 0 prints the per-epoch
// results (one JSON object per line with --json) on stdout and its progress
// on stderr.
//
// Across hosts, each host runs one rank with --rank R --workers N, and the
// ranks meet through a SwitchML controller (--controller) or, for the ring
// and exact backends, at each other's addresses (--peers); see multihost.go.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/data"
	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/onnx"
	"github.com/switchml/switchml-go/trainers/train"
)

type flags struct {
	model, dataset, dataDir, backend, optimizer   string
	workers, epochs, batch, trainLimit, testLimit int
	lr                                            float64
	seed                                          int64
	jsonOut, quiet, resume                        bool
	trace                                         string
	checkpointDir, onnxOut, controller, job       string
	bucketElems, intra, inter, evalEvery          int
	timeout                                       time.Duration

	// Benchmark models.
	describe           bool
	profileOut         string
	profileReps        int
	steps, warmupSteps int
	packetElements     int
	wireBits           int

	// One rank of a job across hosts.
	rank          int
	peers, listen string
	joinTimeout   time.Duration
	// token is the switchml job's token, from --token-file or
	// $SWITCHML_TOKEN.
	tokenFile, token string

	// Set by the launcher for the worker processes.
	workerRank int
	starAddr   string
	ringAddrs  string
}

func parseFlags(args []string) (*flags, error) {
	f := &flags{}
	fs := cli.NewFlagSet("train", "[flags]", "Data-parallel training of a TensorFlow model over one of the allreduce backends.")
	fs.StringVar(&f.model, "model", "cnn", "model: "+strings.Join(models.Names(), ", "))
	fs.StringVar(&f.dataset, "dataset", "fashion-mnist", "data set: fashion-mnist or synthetic")
	fs.StringVar(&f.dataDir, "data-dir", data.FashionMNISTDir, "directory of the Fashion-MNIST IDX files")
	fs.IntVar(&f.trainLimit, "train-limit", 0, "use only the first N training examples (0 = all)")
	fs.IntVar(&f.testLimit, "test-limit", 0, "use only the first N test examples (0 = all)")
	fs.IntVar(&f.workers, "workers", 1, "number of worker processes (with --rank: of ranks, on all hosts together)")
	fs.StringVar(&f.backend, "backend", "exact", "allreduce backend: exact (float64 TCP star), ring (TCP ring) or switchml")
	fs.StringVar(&f.controller, "controller", "", "switchml: controller address; empty starts an in-process software switch and controller (not with --rank). With --rank, ring and exact may meet there instead of at --peers")
	fs.StringVar(&f.job, "job", "", "switchml, and ring or exact meeting at --controller: job name (default derived from the process id; with --rank, \""+defaultRankJob+"\": give each job sharing a controller its own)")
	fs.IntVar(&f.rank, "rank", -1, "run only this rank (0..workers-1) of a job whose ranks run on several hosts, each started the same way with its own --rank; -1 runs all --workers ranks on this host")
	fs.StringVar(&f.peers, "peers", "", "ring and exact with --rank: comma-separated host:port of every rank in rank order, where each listens (exact: rank 0's alone is enough); the ranks meet at the first")
	fs.StringVar(&f.listen, "listen", "", "ring and exact with --rank and --controller: host:port this rank listens on (default: this host's address toward the controller, any port)")
	fs.StringVar(&f.tokenFile, "token-file", "", "switchml: `FILE` holding the job's token, the same on every rank (default: $SWITCHML_TOKEN); a controller that listens beyond loopback refuses jobs without one")
	fs.DurationVar(&f.joinTimeout, "join-timeout", 2*time.Minute, "with --rank: how long to wait at start for the other ranks and the controller before giving up")
	fs.IntVar(&f.epochs, "epochs", 3, "training epochs")
	fs.IntVar(&f.batch, "batch", 64, "batch size per worker (the global batch is workers × batch)")
	fs.StringVar(&f.optimizer, "optimizer", "adam", "optimizer: adam or momentum")
	fs.Float64Var(&f.lr, "lr", 0, "learning rate (0 = 1e-3 for adam, 0.05 for momentum)")
	fs.Int64Var(&f.seed, "seed", 1, "seed for initialisation, shuffling and dropout")
	fs.IntVar(&f.bucketElems, "bucket-elems", 1<<18, "gradient values fused into one allreduce bucket")
	fs.IntVar(&f.intra, "intra-op-threads", 0, "TensorFlow intra-op threads per worker (0 = cores / workers)")
	fs.IntVar(&f.inter, "inter-op-threads", 0, "TensorFlow inter-op threads per worker (0 = 1)")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object per epoch on stdout")
	fs.IntVar(&f.evalEvery, "eval-every", 0, "also evaluate on the test set every N steps within an epoch; with --json each prints a line of kind \"eval\" (0: at the end of each epoch only)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr (there is none either when stderr is not a terminal)")
	fs.StringVar(&f.trace, "trace", "", "switchml: each rank writes its timeline (Chrome trace-event JSON, for Perfetto or chrome://tracing) to this file, with .rankR before the extension")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "save a checkpoint here after each epoch (with --rank, every rank its own file)")
	fs.BoolVar(&f.resume, "resume", false, "resume from the checkpoint in --checkpoint-dir (otherwise an old one is removed); with --rank, every rank from its own, and the ranks check they resume from the same point")
	fs.StringVar(&f.onnxOut, "onnx", "", "export the trained model to this ONNX file")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Hour, "give up after this long")
	fs.BoolVar(&f.describe, "describe", false, "print the model's description (one JSON object with model and parameters) and exit")
	fs.StringVar(&f.profileOut, "profile-out", "", "benchmark models: measure per-layer forward and backward time with TensorFlow (batch --batch) and write the profile JSON here")
	fs.IntVar(&f.profileReps, "profile-reps", 3, "timed repetitions of each profile measurement (the minimum is kept)")
	fs.IntVar(&f.steps, "steps", 5, "benchmark models: timed training steps on synthetic input")
	fs.IntVar(&f.warmupSteps, "warmup-steps", 1, "benchmark models: untimed steps before the timed ones")
	fs.IntVar(&f.packetElements, "packet-elements", 0, "switchml: values per packet (32, 64, 128 or 256 in the compatible header; other values up to the switch's --max-elements use the software switch's extended header; 0 = the library's default)")
	fs.IntVar(&f.wireBits, "wire-bits", 0, "switchml: how wide gradients travel: 0 (float32 at 32 bits), 16 (at 16 bits: half the bytes, a coarser sum; see docs/design.md) or 32")
	fs.IntVar(&f.workerRank, "worker-rank", -1, "internal: run as this worker")
	fs.StringVar(&f.starAddr, "star-addr", "", "internal: exact backend server")
	fs.StringVar(&f.ringAddrs, "ring-addrs", "", "internal: comma-separated ring addresses")
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if _, err := models.Lookup(f.model); err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	if f.dataset != "fashion-mnist" && f.dataset != "synthetic" {
		return nil, fmt.Errorf("unknown --dataset %q (want fashion-mnist or synthetic)", f.dataset)
	}
	kind, err := collective.ParseKind(f.backend)
	if err != nil || kind == collective.SwitchMLSparse {
		// The sparse mode is replaybench's; train does not start or join it.
		return nil, fmt.Errorf("--backend %q: want exact, ring or switchml", f.backend)
	}
	if f.workers < 1 || f.workers > 64 {
		return nil, fmt.Errorf("--workers %d: want 1..64", f.workers)
	}
	if kind == collective.SwitchML {
		// Every worker would refuse a bad packet size when it joins: refuse
		// it once, before anything starts. The job name is the launcher's
		// to choose when the flag leaves it empty.
		cfg := switchml.Config{Job: cmp.Or(f.job, "train"), Workers: f.workers, PacketElements: f.packetElements,
			Extended: switchml.NeedsExtended(f.workers, f.packetElements), WireBits: f.wireBits}
		if err := cfg.Validate(); err != nil {
			return nil, switchml.InFlags(err, switchmlFlags)
		}
	}
	if f.epochs < 1 || f.batch < 1 {
		return nil, fmt.Errorf("--epochs and --batch must be positive")
	}
	if f.evalEvery < 0 {
		return nil, fmt.Errorf("--eval-every %d: want a number of steps, or 0 for the end of each epoch only", f.evalEvery)
	}
	if err := checkRankFlags(f, kind); err != nil {
		return nil, err
	}
	if f.token, err = readToken(f.tokenFile); err != nil {
		return nil, err
	}
	return f, nil
}

// readToken is the job's token: file's content (less a trailing newline),
// or $SWITCHML_TOKEN without one. Errors name the file, never its content.
func readToken(file string) (string, error) {
	if file == "" {
		return os.Getenv("SWITCHML_TOKEN"), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) == 0 {
		return "", fmt.Errorf("--token-file %s is empty: write the job's token into it (the same on every rank)", file)
	}
	return string(b), nil
}

// switchmlFlags names the flag that sets each switchml.Config field the
// switchml backend takes from the command line.
var switchmlFlags = map[string]string{
	"Controller": "controller", "Job": "job", "Rank": "rank", "Workers": "workers", "PacketElements": "packet-elements",
	"WireBits": "wire-bits",
}

func main() {
	f, err := parseFlags(os.Args[1:])
	if err != nil {
		cli.Exit("train", cli.Usage("train", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	switch {
	case f.describe:
		err = describe(f, os.Stdout)
	case f.profileOut != "":
		err = profileModel(ctx, f)
	case f.rank >= 0:
		err = runRank(ctx, f)
	case f.workerRank >= 0:
		err = runWorker(ctx, f)
	default:
		err = launch(ctx, f, os.Args[1:], os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
}

func loadData(f *flags) (tr, te *data.Set, err error) {
	if f.dataset == "synthetic" {
		all := data.Synthetic(12000, 28, 28, 10, uint64(f.seed))
		tr, te = all.Subset(10000), &data.Set{}
		*te = *all
		te.Images, te.Labels = all.Images[10000*784:], all.Labels[10000:]
	} else if tr, te, err = data.LoadFashionMNIST(f.dataDir); err != nil {
		return nil, nil, err
	}
	return tr.Subset(f.trainLimit), te.Subset(f.testLimit), nil
}

func runWorker(ctx context.Context, f *flags) error {
	runtime.GOMAXPROCS(max(1, runtime.NumCPU()/f.workers))
	var tr, te *data.Set
	if models.LookupBench(f.model) == nil {
		var err error
		if tr, te, err = loadData(f); err != nil {
			return err
		}
	}
	kind, _ := collective.ParseKind(f.backend)
	var ring []string
	if f.ringAddrs != "" {
		ring = strings.Split(f.ringAddrs, ",")
	}
	trace, closeTrace, err := rankTrace(f.trace, f.workerRank)
	if err != nil {
		return err
	}
	defer closeTrace()
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Minute)
	be, err := collective.Dial(dctx, collective.Config{
		Kind: kind, Rank: f.workerRank, Workers: f.workers,
		StarAddr: f.starAddr, RingAddrs: ring, Controller: f.controller, Job: f.job, Token: f.token,
		PacketElements: f.packetElements, WireBits: f.wireBits, Trace: trace,
	})
	dcancel()
	if err != nil {
		return switchml.InFlags(err, switchmlFlags)
	}
	defer be.Close()
	o := workerOptions(f, f.workerRank, f.workers)
	o.Train, o.Test = tr, te
	return trainWorker(ctx, f, o, be, f.workerRank == 0)
}

// workerOptions are the training options of rank, one of localWorkers
// worker processes sharing this host's cores.
func workerOptions(f *flags, rank, localWorkers int) train.Options {
	intra, inter := f.intra, f.inter
	if intra == 0 {
		intra = max(1, runtime.NumCPU()/localWorkers)
	}
	if inter == 0 {
		inter = 1
	}
	return train.Options{
		Model: f.model, Epochs: f.epochs, Batch: f.batch,
		Optimizer: f.optimizer, LR: float32(f.lr), Seed: f.seed,
		Rank: rank, Workers: f.workers, BucketElems: f.bucketElems,
		IntraOpThreads: intra, InterOpThreads: inter,
		CheckpointDir: f.checkpointDir, Backend: f.backend, EvalEvery: f.evalEvery,
	}
}

// trainWorker trains one worker over be; when report is set it prints the
// results on stdout. Rank 0 also shows progress and writes the ONNX file.
func trainWorker(ctx context.Context, f *flags, o train.Options, be collective.Backend, report bool) error {
	rank0 := o.Rank == 0
	if rank0 && !f.quiet && term.IsTerminal(int(os.Stderr.Fd())) {
		o.Progress = os.Stderr
	}
	if report {
		enc := json.NewEncoder(os.Stdout)
		o.OnEpoch = func(r train.EpochResult) {
			if f.jsonOut {
				enc.Encode(r)
			}
		}
		o.OnEval = func(r train.EvalResult) {
			if f.jsonOut {
				enc.Encode(r)
			}
		}
	}
	if bench := models.LookupBench(f.model); bench != nil {
		return runBenchWorker(ctx, f, bench, o, be, report)
	}
	res, p, err := train.Run(ctx, o, be)
	if err != nil {
		return err
	}
	defer p.Close()
	if report && !f.jsonOut && len(res) > 0 {
		last := res[len(res)-1]
		fmt.Printf("%s on %s, %d workers over %s: test accuracy %.2f%% after %d epochs, %.1f ms/step (comm %.1fs of %.1fs in the last epoch)\n",
			f.model, f.dataset, f.workers, f.backend, 100*last.TestAccuracy, last.Epoch, 1e3*last.StepS, last.CommS, last.EpochS)
	}
	if rank0 && f.onnxOut != "" {
		if err := onnx.ExportFile(f.onnxOut, p); err != nil {
			return err
		}
		if !f.quiet {
			fmt.Fprintf(os.Stderr, "wrote %s\n", f.onnxOut)
		}
	}
	return nil
}

// launch starts the backend's infrastructure and the worker processes, and
// waits for them.
func launch(ctx context.Context, f *flags, cmdArgs []string, stdout io.Writer) error {
	if err := prepareLaunch(f); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var cl cleanups
	defer cl.run()
	extra, err := startBackend(ctx, f, &cl)
	if err != nil {
		return err
	}
	args := append(append([]string(nil), cmdArgs...), extra...)
	cmds := make([]*exec.Cmd, f.workers)
	for r := range cmds {
		if cmds[r], err = startWorker(ctx, exe, args, r, stdout, &cl); err != nil {
			return err
		}
	}
	return waitWorkers(cmds)
}

// cleanups are undone in reverse order.
type cleanups []func()

func (cl *cleanups) add(f func()) { *cl = append(*cl, f) }

func (cl cleanups) run() {
	for i := len(cl) - 1; i >= 0; i-- {
		cl[i]()
	}
}

// prepareLaunch clears the checkpoints of a fresh run and checks the data
// before starting anything, so that a missing data set is one clear
// error, not N.
func prepareLaunch(f *flags) error {
	if f.checkpointDir != "" && !f.resume {
		if err := os.RemoveAll(f.checkpointDir); err != nil {
			return err
		}
	}
	if f.dataset == "fashion-mnist" && models.LookupBench(f.model) == nil {
		if _, err := os.Stat(f.dataDir); err != nil {
			return fmt.Errorf("--data-dir %s: %w: apt-get install dataset-fashion-mnist (or run trainers/setup.sh)", f.dataDir, data.ErrNotInstalled)
		}
	}
	return nil
}

// startBackend starts what the backend needs beside the workers (the star
// server, ring ports, a local switch and controller) and returns the flags
// that tell the workers where it is.
func startBackend(ctx context.Context, f *flags, cl *cleanups) ([]string, error) {
	extra := []string{}
	switch kind, _ := collective.ParseKind(f.backend); kind {
	case collective.Exact:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		star := collective.ServeStar(ctx, ln, f.workers)
		cl.add(func() { star.Close() })
		extra = append(extra, "--star-addr", star.Addr())
	case collective.Ring:
		addrs := make([]string, f.workers)
		for i := range addrs {
			// Reserve a free port; the worker listens on it right after.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			addrs[i] = ln.Addr().String()
			ln.Close()
		}
		extra = append(extra, "--ring-addrs", strings.Join(addrs, ","))
	case collective.SwitchML:
		if f.controller == "" {
			addr, stop, err := startLocalFabric(ctx)
			if err != nil {
				return nil, err
			}
			cl.add(stop)
			extra = append(extra, "--controller", addr)
		}
		if f.job == "" {
			extra = append(extra, "--job", "train-"+strconv.Itoa(os.Getpid()))
		}
	}
	return extra, nil
}

// startWorker starts the worker process of rank r. Rank 0 writes to
// stdout and stderr; the other ranks speak only when something goes
// wrong, through stderr with their rank in front.
func startWorker(ctx context.Context, exe string, args []string, r int, stdout io.Writer, cl *cleanups) (*exec.Cmd, error) {
	c := exec.CommandContext(ctx, exe, append(args, "--worker-rank", strconv.Itoa(r))...)
	c.Env = append(os.Environ(), "TF_CPP_MIN_LOG_LEVEL=2")
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	c.WaitDelay = 5 * time.Second
	if r == 0 {
		c.Stdout = stdout
		c.Stderr = os.Stderr
	} else {
		pr, pw := io.Pipe()
		c.Stdout = io.Discard
		c.Stderr = pw
		go relayStderr(r, pr)
		cl.add(func() { pw.Close() })
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %d: %w", r, err)
	}
	return c, nil
}

// relayStderr copies rank r's stderr to ours, each line prefixed with the
// rank, without TensorFlow's start-up chatter.
func relayStderr(r int, pr io.Reader) {
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		// TensorFlow's start-up chatter (absl info lines).
		if l := sc.Text(); strings.HasPrefix(l, "I0000") || strings.HasPrefix(l, "WARNING: All log messages") {
			continue
		}
		fmt.Fprintf(os.Stderr, "[rank %d] %s\n", r, sc.Text())
	}
}

// waitWorkers waits for every worker and returns the first failure. One
// worker failing leaves the others blocked in an allreduce: it stops the
// ones still running.
func waitWorkers(cmds []*exec.Cmd) error {
	errs := make(chan error, len(cmds))
	for r, c := range cmds {
		go func(r int, c *exec.Cmd) {
			if err := c.Wait(); err != nil {
				errs <- fmt.Errorf("worker %d: %w", r, err)
				return
			}
			errs <- nil
		}(r, c)
	}
	var first error
	for range cmds {
		if err := <-errs; err != nil && first == nil {
			first = err
			for _, c := range cmds {
				if c.ProcessState == nil && c.Process != nil {
					c.Process.Signal(syscall.SIGTERM)
				}
			}
		}
	}
	return first
}
