package collective

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchml/switchml-go/internal/backoff"
)

// Rendezvous exchanges small messages among the ranks of a job while they
// set up: their settings, to check they agree, and the addresses the
// backend needs. It is not for tensors.
type Rendezvous interface {
	// AllGather sends data to every rank and returns every rank's data,
	// indexed by rank. Every rank must call it the same number of times.
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
	Close() error
}

// The peer rendezvous protocol, over TCP to rank 0 (all integers
// little-endian): a rank r > 0 connects and sends a hello {magic "SMRV",
// rank u32, workers u32}; rank 0 answers with a frame that is empty when it
// takes the rank, else the reason it refuses it. A frame is {length u32,
// bytes}. For each AllGather every rank r > 0 sends one frame, and rank 0,
// once it holds every rank's, sends back {count u32} and count frames in
// rank order.

var rendezvousMagic = [4]byte{'S', 'M', 'R', 'V'}

const (
	maxRendezvousFrame = 1 << 20
	// rendezvousHelloWait bounds how long an accepted connection may take to
	// say hello, so a silent stray client cannot hold up the real ranks.
	rendezvousHelloWait = 5 * time.Second
)

// PeerRendezvous is the rendezvous of a job whose ranks know each other's
// addresses: rank 0 gathers and answers; the others connect to it.
type PeerRendezvous struct {
	rank, workers int
	addr          string     // rank 0's address
	conns         []net.Conn // rank 0: one per other rank, by rank; others: conns[0]
	readers       []*bufio.Reader
}

// JoinPeers meets the other ranks at rank 0's address addr0. Rank 0 accepts
// them on ln, which must listen on addr0 and which it leaves open: the
// backend can take it over, so that rank 0 needs one port only. The other
// ranks pass a nil ln and dial addr0, retrying while rank 0 is not up yet.
// ctx bounds the whole wait; the error then names the missing ranks or the
// address that did not answer.
func JoinPeers(ctx context.Context, rank, workers int, addr0 string, ln net.Listener) (*PeerRendezvous, error) {
	if workers <= 0 || rank < 0 || rank >= workers {
		return nil, fmt.Errorf("collective: rank %d of %d workers is out of range", rank, workers)
	}
	p := &PeerRendezvous{rank: rank, workers: workers, addr: addr0}
	if rank == 0 {
		if ln == nil {
			return nil, errors.New("collective: rank 0 of a peer rendezvous needs its listener")
		}
		if err := p.accept(ctx, ln); err != nil {
			p.Close()
			return nil, err
		}
		return p, nil
	}
	if err := p.dial(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// deadlineListener is what net.TCPListener offers to unblock Accept without
// closing the listener.
type deadlineListener interface {
	SetDeadline(time.Time) error
}

func (p *PeerRendezvous) accept(ctx context.Context, ln net.Listener) error {
	p.conns = make([]net.Conn, p.workers)
	p.readers = make([]*bufio.Reader, p.workers)
	dl, ok := ln.(deadlineListener)
	if !ok {
		return fmt.Errorf("collective: the rendezvous needs a TCP listener, got %T", ln)
	}
	type arrival struct {
		c             net.Conn
		rank, workers int
	}
	arrivals := make(chan arrival)
	acceptErr := make(chan error, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	// The listener outlives the rendezvous (the backend takes it over), so
	// a deadline rather than Close is what stops Accept.
	stopAccepting := func() { dl.SetDeadline(time.Unix(1, 0)) }
	stop := context.AfterFunc(ctx, stopAccepting)
	helloCtx, stopHellos := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			// Hellos are read apart from accepting, so a silent stray
			// client does not hold the ranks up.
			wg.Add(1)
			go func() {
				defer wg.Done()
				rank, workers, ok := readRendezvousHello(helloCtx, c)
				if !ok {
					c.Close() // not one of ours
					return
				}
				select {
				case arrivals <- arrival{c, rank, workers}:
				case <-done:
					c.Close()
				}
			}()
		}
	}()
	defer func() {
		stop()
		stopAccepting()
		stopHellos()
		close(done)
		wg.Wait()
		dl.SetDeadline(time.Time{})
	}()
	for joined := 1; joined < p.workers; {
		var a arrival
		select {
		case a = <-arrivals:
		case err := <-acceptErr:
			if ctx.Err() != nil {
				return fmt.Errorf("collective: rank 0: %s did not join at %s: %w", p.missing(), ln.Addr(), ctx.Err())
			}
			return fmt.Errorf("collective: rank 0: accept on %s: %w", ln.Addr(), err)
		}
		c := a.c
		var refusal string
		switch {
		case a.workers != p.workers:
			refusal = fmt.Sprintf("rank %d says the job has %d workers, rank 0 says %d", a.rank, a.workers, p.workers)
		case a.rank <= 0 || a.rank >= p.workers:
			refusal = fmt.Sprintf("a process from %s joined as rank %d, outside 1..%d", c.RemoteAddr(), a.rank, p.workers-1)
		case p.conns[a.rank] != nil:
			refusal = fmt.Sprintf("two processes joined as rank %d (from %s and %s): give every process its own rank", a.rank, p.conns[a.rank].RemoteAddr(), c.RemoteAddr())
		}
		if refusal != "" {
			c.SetWriteDeadline(time.Now().Add(rendezvousHelloWait))
			writeFrame(c, []byte(refusal))
			c.Close()
			return fmt.Errorf("collective: rank 0: %w: %s", ErrDisagree, refusal)
		}
		if err := writeFrame(c, nil); err != nil {
			c.Close()
			return fmt.Errorf("collective: rank 0: answering rank %d at %s: %w", a.rank, c.RemoteAddr(), err)
		}
		p.conns[a.rank] = c
		p.readers[a.rank] = bufio.NewReader(c)
		joined++
	}
	return nil
}

// missing names the ranks that have not joined rank 0.
func (p *PeerRendezvous) missing() string {
	var out []string
	for r := 1; r < p.workers; r++ {
		if p.conns[r] == nil {
			out = append(out, fmt.Sprint(r))
		}
	}
	if len(out) == 1 {
		return "rank " + out[0]
	}
	return "ranks " + strings.Join(out, ", ")
}

func readRendezvousHello(ctx context.Context, c net.Conn) (rank, workers int, ok bool) {
	wait := time.Now().Add(rendezvousHelloWait)
	if dl, has := ctx.Deadline(); has && dl.Before(wait) {
		wait = dl
	}
	c.SetReadDeadline(wait)
	stop := closeOnDone(ctx, c)
	defer func() {
		stop()
		c.SetReadDeadline(time.Time{})
	}()
	var hello [12]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil || [4]byte(hello[:4]) != rendezvousMagic {
		return 0, 0, false
	}
	return int(int32(binary.LittleEndian.Uint32(hello[4:]))), int(int32(binary.LittleEndian.Uint32(hello[8:]))), true
}

func (p *PeerRendezvous) dial(ctx context.Context) error {
	var d net.Dialer
	wait := backoff.New(20*time.Millisecond, time.Second)
	var c net.Conn
	for {
		var err error
		if c, err = d.DialContext(ctx, "tcp", p.addr); err == nil {
			break
		}
		if wait.Wait(ctx) != nil {
			return fmt.Errorf("collective: rank %d: could not reach rank 0 at %s: %w (%v)", p.rank, p.addr, ctx.Err(), err)
		}
	}
	stop := closeOnDone(ctx, c)
	defer stop()
	var hello [12]byte
	copy(hello[:], rendezvousMagic[:])
	binary.LittleEndian.PutUint32(hello[4:], uint32(p.rank))
	binary.LittleEndian.PutUint32(hello[8:], uint32(p.workers))
	r := bufio.NewReader(c)
	reason, err := func() ([]byte, error) {
		if _, err := c.Write(hello[:]); err != nil {
			return nil, err
		}
		return readFrame(r)
	}()
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("collective: rank %d: rank 0 at %s did not take this rank: %w (are all ranks running?)", p.rank, p.addr, ctx.Err())
		}
		return fmt.Errorf("collective: rank %d: joining rank 0 at %s: %w", p.rank, p.addr, err)
	}
	if len(reason) > 0 {
		c.Close()
		return fmt.Errorf("collective: rank %d: rank 0 at %s refused this rank: %w: %s", p.rank, p.addr, ErrDisagree, reason)
	}
	p.conns, p.readers = []net.Conn{c}, []*bufio.Reader{r}
	return nil
}

// closeOnDone makes blocked reads and writes on c return when ctx ends;
// the returned func undoes it.
func closeOnDone(ctx context.Context, c net.Conn) func() bool {
	return context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
}

// AllGather implements Rendezvous.
func (p *PeerRendezvous) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if len(data) > maxRendezvousFrame {
		return nil, fmt.Errorf("collective: rendezvous message of %d bytes exceeds %d", len(data), maxRendezvousFrame)
	}
	if p.conns == nil {
		return nil, errors.New("collective: rendezvous closed")
	}
	if p.rank != 0 {
		return p.gatherFromRoot(ctx, data)
	}
	out := make([][]byte, p.workers)
	out[0] = slices.Clone(data)
	// Each rank's message is read before the next one's: a rank's write
	// waits for rank 0 to read it, so no ordering can deadlock.
	for r := 1; r < p.workers; r++ {
		stop := closeOnDone(ctx, p.conns[r])
		b, err := readFrame(p.readers[r])
		stop()
		if err != nil {
			return nil, p.peerError(ctx, r, "receiving from", err)
		}
		out[r] = b
	}
	var msg []byte
	msg = binary.LittleEndian.AppendUint32(msg, uint32(p.workers))
	for _, b := range out {
		msg = binary.LittleEndian.AppendUint32(msg, uint32(len(b)))
		msg = append(msg, b...)
	}
	for r := 1; r < p.workers; r++ {
		stop := closeOnDone(ctx, p.conns[r])
		_, err := p.conns[r].Write(msg)
		stop()
		if err != nil {
			return nil, p.peerError(ctx, r, "sending to", err)
		}
	}
	return out, nil
}

func (p *PeerRendezvous) gatherFromRoot(ctx context.Context, data []byte) ([][]byte, error) {
	c, r := p.conns[0], p.readers[0]
	stop := closeOnDone(ctx, c)
	defer stop()
	if err := writeFrame(c, data); err != nil {
		return nil, p.peerError(ctx, 0, "sending to", err)
	}
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, p.peerError(ctx, 0, "receiving from", err)
	}
	if n := int(binary.LittleEndian.Uint32(h[:])); n != p.workers {
		return nil, fmt.Errorf("collective: rank %d: rank 0 sent %d ranks' messages for a job of %d", p.rank, n, p.workers)
	}
	out := make([][]byte, p.workers)
	for i := range out {
		b, err := readFrame(r)
		if err != nil {
			return nil, p.peerError(ctx, 0, "receiving from", err)
		}
		out[i] = b
	}
	return out, nil
}

func (p *PeerRendezvous) peerError(ctx context.Context, peer int, what string, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return fmt.Errorf("collective: rank %d: %s rank %d during the rendezvous: %w (did it stop?)", p.rank, what, peer, err)
}

// Close ends the rendezvous. Rank 0's listener stays open.
func (p *PeerRendezvous) Close() error {
	for _, c := range p.conns {
		if c != nil {
			c.Close()
		}
	}
	p.conns = nil
	return nil
}

func writeFrame(w io.Writer, b []byte) error {
	msg := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err := w.Write(append(msg, b...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[:])
	if n > maxRendezvousFrame {
		return nil, fmt.Errorf("rendezvous frame of %d bytes exceeds %d", n, maxRendezvousFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Broadcaster is the part of a switchml.Session a rendezvous needs: the
// controller's job service relays root's data to every rank.
type Broadcaster interface {
	Broadcast(ctx context.Context, name string, root int, data []byte) ([]byte, error)
	Rank() int
	Workers() int
}

// SessionRendezvous gathers through the controller of a SwitchML job:
// each rank in turn broadcasts its data. It needs the controller only, not
// the switch's data plane, so the ring and exact backends can meet there
// too. Closing it leaves the session open.
func SessionRendezvous(s Broadcaster) Rendezvous { return sessionRendezvous{s} }

type sessionRendezvous struct{ s Broadcaster }

// allGatherName is the one broadcast name every gather uses: the
// controller numbers a name's calls per rank, so the k-th call of every
// rank meets in the same round and the job never runs out of names.
const allGatherName = "trainers/allgather"

func (r sessionRendezvous) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	n, rank := r.s.Workers(), r.s.Rank()
	out := make([][]byte, n)
	for root := range n {
		var mine []byte
		if root == rank {
			mine = data
		}
		b, err := r.s.Broadcast(ctx, allGatherName, root, mine)
		if err != nil {
			return nil, fmt.Errorf("collective: rank %d: gathering rank %d's message through the controller: %w", rank, root, err)
		}
		out[root] = b
	}
	return out, nil
}

func (sessionRendezvous) Close() error { return nil }
