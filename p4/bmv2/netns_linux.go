//go:build linux

package bmv2

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// inNetNS runs fn on an OS thread that has joined the named network
// namespace (as `ip netns add` creates it under /run/netns), so that the
// sockets fn opens live there. An empty name runs fn as it is.
func inNetNS(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	target, err := os.Open(filepath.Join("/run/netns", name))
	if err != nil {
		return fmt.Errorf("bmv2: network namespace %q: %w", name, err)
	}
	defer target.Close()

	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("bmv2: current network namespace: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("bmv2: join network namespace %q: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked, so it ends with this goroutine
			// instead of serving others from the wrong namespace.
			done <- fmt.Errorf("bmv2: leave network namespace %q: %w", name, err)
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// sysProcAttr puts the switch in its own process group (a terminal's
// signals go to the caller, which stops the switch itself) and has the
// kernel kill it if the calling process dies (a test that times out leaves
// no switch behind).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
