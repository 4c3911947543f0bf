package switchml

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/switchml/switchml-go/switchml/engine"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/wire"
)

// laneDriver runs one lane's protocol engine on its own socket. Only the
// goroutine running an op touches it; buffers live as long as the session.
type laneDriver struct {
	conn   transport.PacketConn
	faults *transport.Injector
	eng    *engine.Lane
	peer   netip.AddrPort
	epoch  time.Time

	out []transport.Message
	in  []transport.Message

	// inPlace, when the transport offers it and no faults are injected,
	// builds packets in the transport's memory. noRoom is set when the
	// last flush found no room there for packets that were due.
	inPlace transport.InPlaceWriter
	noRoom  bool

	// bytes counts what the lane sent, headers included.
	bytes uint64
	// pktLen is the length of the lane's packets (a short last block
	// makes a shorter one): what it asks of the transport's memory.
	pktLen int

	// trace, if set, receives the lane's spans on thread tid.
	trace *tracer
	tid   int
}

func (l *laneDriver) init(eng *engine.Lane, peer netip.AddrPort) {
	l.eng, l.peer, l.epoch = eng, peer, time.Now()
	cfg := eng.Config()
	h := wire.Header{Format: cfg.Format, Elements: cfg.Elements, Tagged: cfg.Key != nil}
	l.pktLen = h.PacketLen()
	batch := l.conn.Batch()
	l.out = make([]transport.Message, batch)
	l.in = make([]transport.Message, batch)
	for i := range l.out {
		l.out[i] = transport.Message{Buf: make([]byte, 0, wire.MaxPacket), Addr: peer}
		l.in[i].Buf = make([]byte, transport.MaxDatagram)
	}
	if w, ok := l.conn.(transport.InPlaceWriter); ok && !l.faults.Active() {
		l.inPlace = w
		// Reach the switch's memory now, before an op's timers run:
		// setting it up takes long enough to time a first window out.
		if b := w.Reserve(peer, 1, l.pktLen); len(b) > 0 {
			w.Commit(nil)
		}
	}
}

func (l *laneDriver) now() time.Duration { return time.Since(l.epoch) }

// maxLaneWait bounds a lane's wait for replies: a lane with nothing due
// (no timer runs, nothing can be sent) still notices a cancelled context
// or a closed or aborted session within it.
const maxLaneWait = time.Second

// errAborted stops a lane whose session the controller ended.
var errAborted = errors.New("switchml: session aborted")

// run drives op to completion: send what the engine has, wait for replies
// until the next timer, feed replies and timers back, repeat.
//
// An op abandoned by cancellation leaves the lane mid-op, out of step with
// the other workers; the session then refuses further calls.
func (l *laneDriver) run(ctx context.Context, quit, aborted <-chan struct{}, op engine.Op) error {
	if l.trace == nil {
		return l.drive(ctx, quit, aborted, op, nil)
	}
	m := l.beginMark()
	err := l.drive(ctx, quit, aborted, op, &m)
	l.endMark(&m, op.Len(), err)
	return err
}

// drive is run; m, when tracing, follows the op's progress.
func (l *laneDriver) drive(ctx context.Context, quit, aborted <-chan struct{}, op engine.Op, m *laneMark) error {
	if err := l.eng.Start(op, l.now()); err != nil {
		return err
	}
	for !l.eng.Done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-quit:
			return ErrClosed
		case <-aborted:
			return errAborted
		default:
		}
		if err := l.flush(); err != nil {
			return err
		}
		if l.eng.Done() {
			break // building a packet failed the op (its input is bad)
		}
		// The context, quit and abort are looked at between reads, so no
		// read waits longer than maxLaneWait, whatever the timers say.
		deadline := time.Now().Add(maxLaneWait)
		if d, ok := l.eng.Deadline(); ok {
			if t := l.epoch.Add(d); t.Before(deadline) {
				deadline = t
			}
		}
		if l.faults.Pending() || l.noRoom {
			if soon := time.Now().Add(time.Millisecond); soon.Before(deadline) {
				deadline = soon
			}
		}
		n, err := l.conn.ReadBatch(l.in, deadline)
		if err != nil && !transport.IsTimeout(err) {
			return fmt.Errorf("switchml: lane receive: %w", err)
		}
		l.receive(n)
		// A full batch may have left more results in the socket: take
		// them all before the timers, or a process that was descheduled
		// for a while resends a window whose results are already here.
		for n == len(l.in) {
			if err := l.flush(); err != nil {
				return err
			}
			if n, err = l.conn.TryReadBatch(l.in); err != nil {
				return fmt.Errorf("switchml: lane receive: %w", err)
			}
			l.receive(n)
		}
		l.eng.Tick(l.now())
		if m != nil {
			l.noteMark(m)
		}
	}
	if err := l.eng.Err(); err != nil {
		if errors.Is(err, engine.ErrTimeoutBudget) {
			// A rank that died or failed would have been reported by the
			// controller (ErrAborted) long before this: what is left is a
			// switch that does not answer, or a peer that is alive but
			// stopped sending.
			return fmt.Errorf("switchml: no answer from the switch at %s within Config.GiveUp: %w: the switch is down, unreachable, or drops %d-value packets (more values than it takes), or a rank stopped calling allreduce",
				l.peer, err, l.eng.Config().Elements)
		}
		return err
	}
	return nil
}

// receive hands the first n datagrams of the batch to the engine.
func (l *laneDriver) receive(n int) {
	now := l.now()
	for i := 0; i < n; i++ {
		m := &l.in[i]
		if m.Addr == l.peer {
			l.eng.Receive(m.Buf, now)
		}
		m.Buf = m.Buf[:cap(m.Buf)]
	}
}

// flushInPlace is flush building packets in the transport's memory. It
// reports done unless the transport does not reach the switch that way,
// when flush's copying path takes over.
func (l *laneDriver) flushInPlace() (done bool, err error) {
	w := l.inPlace
	l.noRoom = false
	for {
		q := min(l.eng.Queued(), len(l.out))
		if q == 0 {
			return true, nil
		}
		bufs := w.Reserve(l.peer, q, l.pktLen)
		if bufs == nil {
			return false, nil
		}
		if len(bufs) == 0 {
			// The switch has not taken what was sent yet: the packets
			// wait for room, as sending would only lose them. The
			// switch frees it when it next reads, which it may do
			// without answering anything (it held the whole ring, and
			// all of it is answered): drive looks again soon.
			l.noRoom = true
			return true, nil
		}
		n := 0
		for n < len(bufs) {
			b, ok := l.eng.AppendPacket(bufs[n])
			if !ok {
				break
			}
			if cap(b) != cap(bufs[n]) {
				w.Commit(bufs[:n])
				return true, fmt.Errorf("switchml: lane send to %s: a %d-byte packet outgrew the transport's %d-byte buffer", l.peer, len(b), cap(bufs[n]))
			}
			bufs[n] = b
			l.bytes += uint64(len(b))
			n++
		}
		if _, err := w.Commit(bufs[:n]); err != nil {
			return true, fmt.Errorf("switchml: lane send to %s: %w", l.peer, err)
		}
		if n < q {
			return true, nil
		}
	}
}

// flush sends every packet the engine has ready, a batch at a time.
func (l *laneDriver) flush() error {
	if l.inPlace != nil {
		done, err := l.flushInPlace()
		if done || err != nil {
			return err
		}
	}
	for {
		n := 0
		for n < len(l.out) {
			b, ok := l.eng.AppendPacket(l.out[n].Buf[:0])
			if !ok {
				break
			}
			l.out[n].Buf = b
			l.bytes += uint64(len(b))
			n++
		}
		if n == 0 && !l.faults.Pending() {
			return nil
		}
		send := l.faults.Apply(l.out[:n])
		if len(send) > 0 {
			if _, err := l.conn.WriteBatch(send); err != nil {
				return fmt.Errorf("switchml: lane send to %s: %w", l.peer, err)
			}
		}
		if n < len(l.out) {
			return nil
		}
	}
}
