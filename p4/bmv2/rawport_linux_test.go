//go:build linux

package bmv2

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// rawPort sends and receives whole Ethernet frames on one interface through
// an AF_PACKET socket: it stands for a worker's NIC, on the far end of a
// veth pair whose other end is a BMv2 port.
type rawPort struct {
	name    string
	ifindex int
	fd      int
	frames  chan []byte
	stop    atomic.Bool
	done    chan struct{}
	closeMu sync.Once
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openRawPort(name string) (*rawPort, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	// Protocol 0 receives nothing until bind names the interface, so no
	// frame of another interface slips in before.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	p := &rawPort{name: name, ifindex: ifi.Index, fd: fd, frames: make(chan []byte, 4096), done: make(chan struct{})}
	fail := func(err error) (*rawPort, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("packet socket on %s: %w", name, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		return fail(err)
	}
	// Our own transmissions are not frames from the switch (older kernels
	// lack the option; the reader also filters on the packet type).
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	tv := unix.NsecToTimeval((20 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail(err)
	}
	go p.read()
	return p, nil
}

func (p *rawPort) read() {
	defer close(p.done)
	buf := make([]byte, 65536)
	for !p.stop.Load() {
		n, from, err := unix.Recvfrom(p.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		select {
		case p.frames <- append([]byte(nil), buf[:n]...):
		default: // the test has stopped reading: nothing to keep
		}
	}
}

// send transmits one frame out of the interface.
func (p *rawPort) send(b []byte) error {
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: p.ifindex, Halen: 6}
	copy(to.Addr[:], b[:6])
	if err := unix.Sendto(p.fd, b, 0, to); err != nil {
		return fmt.Errorf("send on %s: %w", p.name, err)
	}
	return nil
}

// drain returns the frames received so far.
func (p *rawPort) drain() [][]byte {
	var out [][]byte
	for {
		select {
		case b := <-p.frames:
			out = append(out, b)
		default:
			return out
		}
	}
}

func (p *rawPort) close() {
	p.closeMu.Do(func() {
		p.stop.Store(true)
		<-p.done
		unix.Close(p.fd)
	})
}
