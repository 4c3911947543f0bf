// Package bmv2 runs the BMv2 software switch (simple_switch_grpc) and
// compiles v1model programs for it with p4c-bm2-ss, for tests, examples and
// the command line. The toolchain comes from p4/p4tools.
//
// A switch starts without a program (--no-p4); a P4Runtime client (for
// example p4/controller) pushes the compiled JSON and the P4Info. BMv2's
// P4Runtime server has no register access; Thrift reaches the registers
// through BMv2's Thrift runtime server instead.
//
// The package's tests run the v1model SwitchML program on BMv2 (they need
// the toolchain, and root for the veth pairs that stand for worker links):
//
//	go test ./p4/bmv2
//
// $SWITCHML_BMV2_PROGRAM runs them on another copy of the program,
// $SWITCHML_BMV2_LOG_DIR keeps BMv2's logs there and
// $SWITCHML_BMV2_LOG_LEVEL=trace makes those logs show every table,
// register access and condition.
package bmv2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchml/switchml-go/p4/p4tools"
)

// Compile compiles the v1model program src (a .p4 path) with p4c-bm2-ss into
// outDir and returns the paths of the BMv2 JSON and the P4Info p4c wrote.
// Errors carry the compiler's message.
func Compile(ctx context.Context, tools *p4tools.Tools, src, outDir string) (jsonPath, p4infoPath string, err error) {
	if tools == nil {
		return "", "", errors.New("bmv2: compile: no toolchain")
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", "", fmt.Errorf("bmv2: compile %s: %w", src, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return "", "", fmt.Errorf("bmv2: compile: %w", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", "", fmt.Errorf("bmv2: compile: %w", err)
	}
	if outDir, err = filepath.Abs(outDir); err != nil {
		return "", "", fmt.Errorf("bmv2: compile: %w", err)
	}
	base := strings.TrimSuffix(filepath.Base(abs), filepath.Ext(abs))
	jsonPath = filepath.Join(outDir, base+".json")
	p4infoPath = filepath.Join(outDir, base+".p4info.txtpb")
	// A stale JSON from an earlier run must not pass for this one's output:
	// p4c writes the P4Info even when it fails, but the JSON only on success.
	for _, p := range []string{jsonPath, p4infoPath} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", "", fmt.Errorf("bmv2: compile: %w", err)
		}
	}
	out, err := tools.Run(ctx, outDir, "p4c-bm2-ss",
		"--arch", "v1model", "--std", "p4-16",
		"-o", jsonPath, "--p4runtime-files", p4infoPath, abs)
	if err != nil {
		return "", "", fmt.Errorf("bmv2: compile %s: %w", src, err)
	}
	for _, p := range []string{jsonPath, p4infoPath} {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("bmv2: compile %s: p4c-bm2-ss succeeded but wrote no %s:\n%s", src, filepath.Base(p), out)
		}
	}
	return jsonPath, p4infoPath, nil
}

// Options says how to start simple_switch_grpc.
type Options struct {
	Ports      map[uint32]string // BMv2 port number -> interface name (e.g. a veth end)
	GRPCAddr   string            // P4Runtime listen address, e.g. "127.0.0.1:9559" (required)
	ThriftPort int               // 0: pick a free one
	DeviceID   uint64            // 0: 1
	NetNS      string            // if set, run inside `ip netns exec NetNS`
	LogFile    string            // if set, BMv2's log (--log-file) goes there; stdout/stderr are kept in memory and returned by Output()
	// (BMv2 appends ".txt" to the --log-file name; Start arranges for the
	// log to be readable at LogFile all the same: see logFileArg.)

	// LogLevel is BMv2's --log-level (trace, debug, info, warn, error,
	// off); empty leaves BMv2's default (trace). It matters only with
	// LogFile.
	LogLevel string
	// Args are extra arguments for BMv2, placed before the target options
	// (for example "--dump-packet-data", "64").
	Args []string
}

// Switch is a running simple_switch_grpc.
type Switch struct {
	opts    Options
	cmd     *exec.Cmd
	out     *syncBuffer
	exited  chan struct{} // closed when the process has ended
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error
}

// syncBuffer collects a process's output; the process writes it from
// exec's copying goroutines while callers read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Errors a caller can tell apart.
var (
	// ErrAddrInUse is a GRPCAddr that something already listens on.
	ErrAddrInUse = errors.New("something already listens there")
	// ErrExited is a switch that exited before it served P4Runtime.
	ErrExited = errors.New("simple_switch_grpc exited")
	// ErrNotProgram is a device config that is no BMv2 JSON program.
	ErrNotProgram = errors.New("bmv2: device config: not a BMv2 JSON program")
	// ErrP4InfoMismatch is a P4Info that does not describe the program.
	ErrP4InfoMismatch = errors.New("bmv2: the P4Info does not match the program")
)

// Start starts simple_switch_grpc without a program (--no-p4) and returns
// once its P4Runtime port accepts TCP connections (or ctx ends / the process
// exits, with its output in the error).
//
// The process is bound to ctx only while Start waits; afterwards it runs
// until Stop. It is killed if the calling process dies.
func Start(ctx context.Context, tools *p4tools.Tools, opts Options) (*Switch, error) {
	if tools == nil {
		return nil, errors.New("bmv2: start: no toolchain")
	}
	if opts.GRPCAddr == "" {
		return nil, errors.New("bmv2: start: Options.GRPCAddr is required")
	}
	if _, _, err := net.SplitHostPort(opts.GRPCAddr); err != nil {
		return nil, fmt.Errorf("bmv2: start: GRPCAddr %q: %w", opts.GRPCAddr, err)
	}
	// Readiness is "the port accepts connections": a port someone else
	// serves already would pass for this switch's.
	if c, err := dialIn(ctx, opts.NetNS, opts.GRPCAddr); err == nil {
		c.Close()
		return nil, fmt.Errorf("bmv2: start: GRPCAddr %s: %w", opts.GRPCAddr, ErrAddrInUse)
	}
	if opts.DeviceID == 0 {
		opts.DeviceID = 1
	}
	if opts.ThriftPort == 0 {
		p, err := freePort(opts.NetNS)
		if err != nil {
			return nil, fmt.Errorf("bmv2: start: pick a Thrift port: %w", err)
		}
		opts.ThriftPort = p
	}
	args := []string{"--device-id", strconv.FormatUint(opts.DeviceID, 10), "--no-p4",
		"--thrift-port", strconv.Itoa(opts.ThriftPort)}
	ports := make([]uint32, 0, len(opts.Ports))
	for p := range opts.Ports {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	for _, p := range ports {
		args = append(args, "-i", fmt.Sprintf("%d@%s", p, opts.Ports[p]))
	}
	if opts.LogFile != "" {
		logArg, err := logFileArg(opts.LogFile)
		if err != nil {
			return nil, err
		}
		args = append(args, "--log-file", logArg, "--log-flush")
		if opts.LogLevel != "" {
			args = append(args, "--log-level", opts.LogLevel)
		}
	}
	args = append(args, opts.Args...)
	args = append(args, "--", "--grpc-server-addr", opts.GRPCAddr)

	var cmd *exec.Cmd
	if opts.NetNS != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", opts.NetNS, tools.Bin("simple_switch_grpc")}, args...)...)
	} else {
		cmd = exec.Command(tools.Bin("simple_switch_grpc"), args...)
	}
	cmd.Env = tools.Env()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bmv2: start %s: %w", cmd.Path, err)
	}
	s := &Switch{opts: opts, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()

	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls the P4Runtime port until it accepts a connection.
func (s *Switch) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := dialIn(ctx, s.opts.NetNS, s.opts.GRPCAddr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("bmv2: %w before serving P4Runtime on %s: %v; output:\n%s",
				ErrExited, s.opts.GRPCAddr, s.waitErr, s.out.String())
		case <-ctx.Done():
			return fmt.Errorf("bmv2: simple_switch_grpc not serving P4Runtime on %s: %w (last dial: %v); output:\n%s",
				s.opts.GRPCAddr, ctx.Err(), err, s.out.String())
		case <-tick.C:
		}
	}
}

// Addr returns the P4Runtime address.
func (s *Switch) Addr() string { return s.opts.GRPCAddr }

// ThriftPort returns the port of BMv2's Thrift runtime server
// (simple_switch_CLI --thrift-port).
func (s *Switch) ThriftPort() int { return s.opts.ThriftPort }

// DeviceID returns the device id of the switch (also its P4Runtime device id).
func (s *Switch) DeviceID() uint64 { return s.opts.DeviceID }

// Pid returns the process id of the switch (of `ip netns exec`, which
// becomes the switch, when NetNS is set).
func (s *Switch) Pid() int { return s.cmd.Process.Pid }

// Output returns what the process printed so far.
func (s *Switch) Output() string { return s.out.String() }

// Exited returns a channel closed once the process has ended.
func (s *Switch) Exited() <-chan struct{} { return s.exited }

// Stop sends SIGTERM, then SIGKILL after 5s, and waits for the process to
// end. It reports an exit that was not caused by Stop's signals (a crash
// before Stop); calling it again returns the same result.
func (s *Switch) Stop() error {
	s.stopOnce.Do(func() {
		select {
		case <-s.exited:
			// Ended on its own: that is worth reporting.
			if s.waitErr != nil {
				s.stopErr = fmt.Errorf("bmv2: simple_switch_grpc had exited: %v; its output:\n%s", s.waitErr, tail(s.out.String(), 4000))
			}
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(5 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.exited
			}
		}
	})
	return s.stopErr
}

// logFileArg returns the --log-file argument that makes BMv2's log readable
// at path. BMv2 writes its log to the argument plus ".txt" (rotated files
// get ".1.txt" and so on): a path ending in ".txt" is passed without it;
// any other path becomes a symbolic link to the file BMv2 writes.
func logFileArg(path string) (string, error) {
	if strings.HasSuffix(path, ".txt") {
		return strings.TrimSuffix(path, ".txt"), nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("bmv2: log file: %w", err)
	}
	if err := os.Symlink(filepath.Base(path)+".txt", path); err != nil {
		return "", fmt.Errorf("bmv2: log file: %w", err)
	}
	return path, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// freePort returns a TCP port nothing listens on right now (in netns when
// set). Another process may take it before BMv2 binds it; callers that run
// many switches at once may prefer to pass ThriftPort.
func freePort(netns string) (int, error) {
	var port int
	err := inNetNS(netns, func() error {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
	return port, err
}

// dialIn opens a TCP connection to addr from inside netns ("" for the
// current namespace).
func dialIn(ctx context.Context, netns, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetNS(netns, func() error {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var d net.Dialer
		var err error
		c, err = d.DialContext(dctx, "tcp", addr)
		return err
	})
	return c, err
}
