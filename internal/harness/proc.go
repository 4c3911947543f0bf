package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Proc is a subprocess whose standard output and standard error are kept,
// the latter optionally echoed to this process's stderr line by line behind
// the subprocess's name.
type Proc struct {
	name string
	cmd  *exec.Cmd
	out  syncBuffer
	log  prefixWriter
	done chan struct{}
	err  error
}

// StartProc starts cmd, which must not have been started and whose Stdout
// and Stderr must be unset: Proc keeps both.
func StartProc(name string, echo bool, cmd *exec.Cmd) (*Proc, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, fmt.Errorf("harness: start %s: Stdout and Stderr must be unset (Proc keeps them)", name)
	}
	p := &Proc{name: name, cmd: cmd, done: make(chan struct{})}
	p.log.name, p.log.echo = name, echo
	cmd.Stdout, cmd.Stderr = &p.out, &p.log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// SelfCommand returns what runs this program again with other arguments
// (the switch, the controller and the workers of the demo and the chaos
// run), stopped when ctx ends: interrupted first, as a Ctrl-C would, so
// that it winds down and says why; killed if it has not exited
// SelfStopGrace later.
func SelfCommand(ctx context.Context) (func(args ...string) *exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start its processes: %w", err)
	}
	return func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = SelfStopGrace
		return cmd
	}, nil
}

// SelfStopGrace is how long a process SelfCommand started has to exit
// after it was interrupted.
const SelfStopGrace = 10 * time.Second

// Name is the name given to StartProc.
func (p *Proc) Name() string { return p.name }

// Cmd is the running command (for its Process, to signal it or read its pid).
func (p *Proc) Cmd() *exec.Cmd { return p.cmd }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited says whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns how it ended, as
// exec.Cmd.Wait does.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Stdout is everything the process wrote to its standard output so far.
func (p *Proc) Stdout() []byte { return p.out.Bytes() }

// Logs is everything the process wrote to its standard error so far.
func (p *Proc) Logs() string {
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	return p.log.all.String()
}

// Stop interrupts the process (SIGINT, which the switchml commands take as
// "finish and report"), kills it if it has not exited after grace, and
// waits for it.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

// prefixWriter keeps everything written to it and, when echo is set,
// copies complete lines to stderr behind a name.
type prefixWriter struct {
	mu      sync.Mutex
	name    string
	echo    bool
	all     bytes.Buffer
	partial []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	if w.echo {
		w.partial = append(w.partial, p...)
		for {
			i := bytes.IndexByte(w.partial, '\n')
			if i < 0 {
				break
			}
			fmt.Fprintf(os.Stderr, "[%s] %s\n", w.name, w.partial[:i])
			w.partial = w.partial[i+1:]
		}
	}
	return len(p), nil
}

// FreePort asks the kernel for a port on loopback that is free now, for
// "tcp" or "udp". Another process may take it before the caller binds it;
// where the caller can bind port 0 itself, it should.
func FreePort(network string) (int, error) {
	switch network {
	case "tcp":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	case "udp":
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	default:
		return 0, fmt.Errorf("harness: FreePort(%q): want \"tcp\" or \"udp\"", network)
	}
}
