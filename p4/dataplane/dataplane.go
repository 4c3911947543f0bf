// Package dataplane runs the software switch's packet pipeline on a batched
// UDP socket: it reads a batch of datagrams, hands each to the pipeline and
// sends what the pipeline emits, sharing one buffer among the copies of a
// multicast.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/transport"
)

// Processor is the packet pipeline: one datagram in, replies out. The
// software switch's server implements it with the pipeline behind a lock
// shared with its P4Runtime service, and so do its shards (softswitch.Shard),
// one per Serve loop, which are Batchers.
type Processor interface {
	Process(src netip.AddrPort, pkt []byte, out *pipeline.Output)
}

// Batcher is a Processor that wants each batch of Process calls bracketed,
// to take its lock once per batch rather than once per packet.
type Batcher interface {
	BeginBatch()
	EndBatch()
}

// Stats counts datagrams moved by Serve.
type Stats struct {
	Received, Sent atomic.Uint64
	// ReceivedBytes and SentBytes are the UDP payload bytes of those
	// datagrams.
	ReceivedBytes, SentBytes atomic.Uint64
	// SendErrors counts datagrams the kernel refused (the switch goes on
	// with the rest of the batch); LastSendError is the latest refusal.
	SendErrors    atomic.Uint64
	LastSendError atomic.Value // error
	// SelfDrops counts datagrams not sent because their destination is
	// the switch's own data-plane address (a lane registered with it;
	// the controller refuses such registrations): the switch never sends
	// to itself.
	SelfDrops atomic.Uint64
}

// self is where a datagram would reach the switch itself: the sockets'
// addresses (conn's and its sibling shards'), and for a socket bound to
// every address, each local address and loopback address with its port.
type self struct {
	addrs []netip.AddrPort
	// loopbackPorts are the ports of sockets bound to every address,
	// which any loopback address reaches.
	loopbackPorts []uint16
}

// selfOf is where datagrams would reach conn or one of siblings.
func selfOf(conn transport.PacketConn, siblings []netip.AddrPort) self {
	var me self
	var locals []netip.Addr
	for _, a := range append([]netip.AddrPort{conn.LocalAddr()}, siblings...) {
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if !a.Addr().IsUnspecified() {
			me.addrs = append(me.addrs, a)
			continue
		}
		me.loopbackPorts = append(me.loopbackPorts, a.Port())
		if locals == nil {
			addrs, _ := net.InterfaceAddrs() // none known: loopback only
			for _, ia := range addrs {
				if p, err := netip.ParsePrefix(ia.String()); err == nil {
					locals = append(locals, p.Addr().Unmap())
				}
			}
		}
		for _, ip := range locals {
			me.addrs = append(me.addrs, netip.AddrPortFrom(ip, a.Port()))
		}
	}
	return me
}

// has reports whether a datagram to d would reach the switch itself.
func (me *self) has(d netip.AddrPort) bool {
	return slices.Contains(me.addrs, d) || (d.Addr().IsLoopback() && slices.Contains(me.loopbackPorts, d.Port()))
}

// Serve processes datagrams from conn until ctx is done or conn fails.
// faults, if non-nil, is applied to every outgoing batch (the software
// switch's drop/duplicate/reorder simulator). It never sends to conn's own
// address nor to siblings (the switch's other shards), counting such
// copies in stats.SelfDrops. It returns nil when ctx ends.
func Serve(ctx context.Context, conn transport.PacketConn, proc Processor, faults *transport.Injector, stats *Stats, siblings ...netip.AddrPort) error {
	batch := conn.Batch()
	in := make([]transport.Message, batch)
	for i := range in {
		in[i].Buf = make([]byte, transport.MaxDatagram)
	}
	// One reply buffer per input datagram; a multicast's copies all point
	// at the same buffer.
	replies := make([][]byte, batch)
	for i := range replies {
		replies[i] = make([]byte, 0, transport.MaxDatagram)
	}
	out := make([]transport.Message, 0, 4*batch)
	var res pipeline.Output
	var grouped grouper
	batcher, _ := proc.(Batcher)
	me := selfOf(conn, siblings)

	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	if stats == nil {
		stats = new(Stats)
	}
	for {
		// A deadline on every read: held (reordered) datagrams drain, and
		// the context is noticed even if its wake-up deadline landed just
		// before this read replaced it.
		deadline := time.Now().Add(100 * time.Millisecond)
		if faults.Pending() {
			deadline = time.Now().Add(time.Millisecond)
		}
		n, err := conn.ReadBatch(in, deadline)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !transport.IsTimeout(err) {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("dataplane: receive: %w", err)
		}
		out = out[:0]
		var inBytes uint64
		for i := 0; i < n; i++ {
			inBytes += uint64(len(in[i].Buf))
		}
		stats.Received.Add(uint64(n))
		stats.ReceivedBytes.Add(inBytes)
		if batcher != nil && n > 0 {
			batcher.BeginBatch()
		}
		// Each datagram is asked into the cache two ahead of its turn:
		// adding one waits on memory otherwise (transport.Prefetch).
		for i := 0; i < min(n, 2); i++ {
			transport.Prefetch(in[i].Buf)
		}
		for i := 0; i < n; i++ {
			// The pipeline writes its reply straight into this
			// datagram's reply buffer.
			res.Packet = replies[i][:0]
			if i+2 < n {
				transport.Prefetch(in[i+2].Buf)
			}
			proc.Process(in[i].Addr, in[i].Buf, &res)
			if len(res.Dests) > 0 {
				if sameStart(res.Packet, replies[i]) {
					replies[i] = res.Packet
				} else {
					// A processor with buffers of its own: copy.
					replies[i] = append(replies[i][:0], res.Packet...)
				}
				for _, d := range res.Dests {
					if me.has(d) {
						stats.SelfDrops.Add(1)
						continue
					}
					out = append(out, transport.Message{Buf: replies[i], Addr: d})
				}
			}
			in[i].Buf = in[i].Buf[:cap(in[i].Buf)]
		}
		if batcher != nil && n > 0 {
			batcher.EndBatch()
		}
		// Grouped by destination, the copies of consecutive multicasts
		// form runs that the transport sends as one segmented datagram
		// per worker; order per destination is kept.
		out, grouped = grouped.group(out)
		send := faults.Apply(out)
		for len(send) > 0 {
			sent, err := conn.WriteBatch(send)
			stats.Sent.Add(uint64(sent))
			var outBytes uint64
			for _, m := range send[:sent] {
				outBytes += uint64(len(m.Buf))
			}
			stats.SentBytes.Add(outBytes)
			if err == nil {
				break
			}
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			// One destination the kernel refuses (unreachable, a full
			// buffer) must not stop the switch for every other job: drop
			// that datagram, as a switch port would, and send the rest.
			stats.SendErrors.Add(1)
			stats.LastSendError.Store(fmt.Errorf("dataplane: send to %v: %w", send[min(sent, len(send)-1)].Addr, err))
			if sent >= len(send) {
				break
			}
			send = send[sent+1:]
		}
	}
}

// sameStart reports whether a and b start at the same byte of memory.
func sameStart(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0]
}

// grouper puts the messages of a batch to one destination next to each
// other, destinations in the order they first appear and each one's
// messages in their order, in time linear in the batch. Its buffers are
// reused from batch to batch.
type grouper struct {
	dests []netip.AddrPort
	count []int
	of    []uint8 // each message's index in dests
	buf   []transport.Message
}

// maxGroups bounds the destinations grouped by counting; a batch to more
// (a job wider than that) is sorted instead.
const maxGroups = 64

// group returns ms grouped, and the grouper to use next, which holds ms's
// backing array as its spare buffer.
func (g grouper) group(ms []transport.Message) ([]transport.Message, grouper) {
	if len(ms) < 2 {
		return ms, g
	}
	g.dests, g.count, g.of = g.dests[:0], g.count[:0], g.of[:0]
	last := -1
	for i := range ms {
		a := ms[i].Addr
		if last < 0 || g.dests[last] != a {
			last = slices.Index(g.dests, a)
			if last < 0 {
				if len(g.dests) == maxGroups {
					slices.SortStableFunc(ms, func(a, b transport.Message) int { return a.Addr.Compare(b.Addr) })
					return ms, g
				}
				last = len(g.dests)
				g.dests = append(g.dests, a)
				g.count = append(g.count, 0)
			}
		}
		g.of = append(g.of, uint8(last))
		g.count[last]++
	}
	if len(g.dests) == 1 {
		return ms, g
	}
	// count becomes each destination's next position.
	pos := 0
	for k, c := range g.count {
		g.count[k] = pos
		pos += c
	}
	g.buf = slices.Grow(g.buf[:0], len(ms))[:len(ms)]
	for i := range ms {
		k := g.of[i]
		g.buf[g.count[k]] = ms[i]
		g.count[k]++
	}
	out := g.buf
	g.buf = ms[:0]
	return out, g
}
