package rack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// UDPProbe is the result of MeasureUDP.
type UDPProbe struct {
	Payload int `json:"payload_bytes"`
	// Packets and Seconds are what the receiver counted in the measured
	// window (after a warm-up that lets the bucket drain its burst).
	Packets int     `json:"packets"`
	Seconds float64 `json:"seconds"`
	// FrameMbit is the received rate of Ethernet frames (payload + 42 bytes
	// of UDP, IPv4 and Ethernet headers), the unit tbf shapes.
	FrameMbit float64 `json:"frame_mbit"`
	// PayloadMbit is the received rate of UDP payload.
	PayloadMbit float64 `json:"payload_mbit"`
	// SentPackets counts what the sender handed to the kernel overall.
	SentPackets int `json:"sent_packets"`
}

// udpOverhead is the UDP, IPv4 and Ethernet header bytes of a frame.
const udpOverhead = 8 + 20 + 14

// MeasureUDP sends UDP datagrams of payload bytes as fast as the sender's
// socket accepts them, from worker from to the switch's address, for d, and
// reports the rate the switch namespace received. It measures one worker's
// shaped upload port.
func (r *Rack) MeasureUDP(ctx context.Context, from int, payload int, d time.Duration) (UDPProbe, error) {
	if from < 0 || from >= r.Workers() {
		return UDPProbe{}, fmt.Errorf("rack: no worker %d", from)
	}
	if payload < 1 || payload > r.cfg.MTU-28 {
		return UDPProbe{}, fmt.Errorf("rack: payload %d must fit the MTU (1..%d)", payload, r.cfg.MTU-28)
	}
	var rx *net.UDPConn
	if err := r.Do(r.SwitchNS(), func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(r.SwitchIP())})
		rx = c
		return err
	}); err != nil {
		return UDPProbe{}, err
	}
	defer rx.Close()
	rx.SetReadBuffer(8 << 20)
	var tx *net.UDPConn
	if err := r.Do(r.WorkerNS(from), func() error {
		c, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
		tx = c
		return err
	}); err != nil {
		return UDPProbe{}, err
	}
	defer tx.Close()

	warm := d / 5
	var sent atomic.Int64
	stop := make(chan struct{})
	sendDone := make(chan error, 1)
	go func() {
		buf := make([]byte, payload)
		for {
			select {
			case <-stop:
				sendDone <- nil
				return
			default:
			}
			if _, err := tx.Write(buf); err != nil {
				// A full queue may refuse a datagram (ENOBUFS); keep going.
				var ne net.Error
				if errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
					sendDone <- err
					return
				}
				continue
			}
			sent.Add(1)
		}
	}()
	defer func() {
		close(stop)
		<-sendDone
	}()

	buf := make([]byte, 65536)
	var (
		first, last time.Time
		packets     int
	)
	deadline := time.Now().Add(d)
	for {
		if err := ctx.Err(); err != nil {
			return UDPProbe{}, err
		}
		rx.SetReadDeadline(deadline)
		n, err := rx.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			return UDPProbe{}, err
		}
		now := time.Now()
		if n != payload {
			continue
		}
		switch {
		case now.Before(deadline.Add(-d + warm)):
			// Warm-up: the bucket starts full and lets a burst through.
		case first.IsZero():
			first = now
		default:
			packets++
			last = now
		}
	}
	p := UDPProbe{Payload: payload, Packets: packets, SentPackets: int(sent.Load())}
	if packets == 0 || !last.After(first) {
		return p, fmt.Errorf("rack: UDP probe from worker %d received nothing", from)
	}
	p.Seconds = last.Sub(first).Seconds()
	p.FrameMbit = float64(packets*(payload+udpOverhead)*8) / p.Seconds / 1e6
	p.PayloadMbit = float64(packets*payload*8) / p.Seconds / 1e6
	return p, nil
}
