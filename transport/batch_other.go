//go:build !linux

package transport

import (
	"net"
)

// batchIO falls back to one datagram per system call.
type batchIO struct{ udp *net.UDPConn }

func (b *batchIO) init(udp *net.UDPConn, size int, gso, gro bool) error { b.udp = udp; return nil }

func (b *batchIO) read(ms []Message, nonblocking bool) (int, error) {
	if nonblocking {
		// No way to peek portably without a deadline in the past, which
		// the poller refuses outright: report nothing pending.
		return 0, nil
	}
	buf := ms[0].Buf[:cap(ms[0].Buf)]
	n, addr, err := b.udp.ReadFromUDPAddrPort(buf)
	if err != nil {
		return 0, err
	}
	ms[0].N, ms[0].Buf, ms[0].Addr = n, buf[:n], addr
	return 1, nil
}

func (b *batchIO) write(ms []Message) (int, error) {
	if _, err := b.udp.WriteToUDPAddrPort(ms[0].Buf, ms[0].Addr); err != nil {
		return 0, err
	}
	return 1, nil
}

func setSocketBuffers(udp *net.UDPConn, size int) {
	_ = udp.SetReadBuffer(size)
	_ = udp.SetWriteBuffer(size)
}

func (b *batchIO) coalesced() uint64 { return 0 }
