// Package ring is a pipelined ring allreduce over TCP: a reduce-scatter followed by an
// all-gather, 2(n-1) steps in all, each moving one n-th of the tensor to the next rank.
//
// It is the software baseline that in-network aggregation is measured against, and a
// training backend that needs nothing but TCP. Every rank sends and receives
// 2(n-1)/n of the tensor per allreduce; the time therefore grows with n at a fixed
// link rate, which is the cost in-network aggregation removes.
//
// Pipelining: each step streams its segment in chunks of Config.ChunkBytes, and a
// dedicated sender goroutine runs alongside the receiving caller. A chunk received
// (and reduced) in step t is forwarded in step t+1 as soon as it is ready, so the
// steps overlap instead of waiting for whole segments, and sending and receiving use
// both directions of the ring at once.
//
// Wire format (all integers little-endian). Rank r holds one TCP connection to rank
// r+1 (dialled) and one from rank r-1 (accepted); data flows only in the dialling
// direction. A connection starts with a 16-byte hello each way (magic "SMRG",
// version, rank, world size). Each allreduce starts with a 24-byte op header (magic
// "SMRO", dtype, sequence number, element count) checked by the receiver, followed by
// the raw little-endian elements of the 2(n-1) steps back to back.
//
// A Ring is broken by any failure (a peer gone, a mismatched call, a canceled
// context): its connections are closed so every blocked peer returns, and later calls
// return the error. Close it and Dial again to recover.
package ring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchml/switchml-go/internal/backoff"
)

// DefaultChunkBytes is the pipelining granularity when Config.ChunkBytes is zero:
// large enough that per-chunk overhead (a syscall, a wake-up) is negligible, small
// enough that a step's first chunk is forwarded long before its last one arrives.
const DefaultChunkBytes = 256 << 10

// DefaultDialTimeout bounds Dial when Config.DialTimeout is zero, so a rank whose
// neighbour never starts fails with a clear error instead of hanging.
const DefaultDialTimeout = 30 * time.Second

// Errors a caller can tell apart.
var (
	// ErrClosed is returned by operations on a Ring after Close.
	ErrClosed = errors.New("ring: closed")
	// ErrBroken is returned by operations on a Ring that an earlier
	// failure broke, wrapped with that failure.
	ErrBroken = errors.New("ring: broken by an earlier failure: Close and Dial again")
	// ErrMismatch is ranks that disagree: on the ring's size or order at
	// Dial, or on an allreduce's sequence, type or size.
	ErrMismatch = errors.New("ranks disagree")
	// ErrStalled is a neighbour that moved no data for StallTimeout.
	ErrStalled = errors.New("nothing moved")
)

// Config describes this rank's place in the ring.
type Config struct {
	Rank, Workers int
	// Addrs holds the listen address (host:port) of every rank: rank r listens on
	// Addrs[r] and dials Addrs[(r+1)%Workers]. It may be empty when Workers is 1.
	Addrs []string
	// ChunkBytes is the pipelining granularity (rounded down to whole elements);
	// zero means DefaultChunkBytes. Ranks may differ: it does not change the wire.
	ChunkBytes int
	// DialTimeout bounds the whole of Dial (listen, connect with retries, accept,
	// handshakes); zero means DefaultDialTimeout. A ctx deadline may cut it shorter.
	DialTimeout time.Duration
	// StallTimeout, if positive, fails an allreduce when no byte moves to or
	// from a neighbour for that long: a rank that stopped (or one before
	// it in the ring) then breaks the ring with an error naming the
	// neighbour, instead of leaving its peers blocked. A rank that starts a
	// call later than the others by more than this fails them too, so keep
	// it above the ranks' differences in time between calls. Zero: wait
	// for as long as ctx allows.
	StallTimeout time.Duration
	// Listener, if set, is used instead of listening on Addrs[Rank]; Dial takes
	// ownership of it. It lets callers (and tests) reserve ports race-free: open it
	// on port 0 and publish its address as Addrs[Rank] to the other ranks.
	Listener net.Listener
}

// Ring is one rank's endpoint of an established ring. AllReduce calls on one Ring
// are serialised; every rank must make the same calls in the same order.
type Ring struct {
	rank, n    int
	chunkElems int
	stall      time.Duration
	prev, next net.Conn // nil when n == 1
	prevAddr   string   // for error messages
	nextAddr   string

	// viewIO sends and receives tensors straight from their memory when the host is
	// little-endian (the wire order), saving a copy per byte each way. Tests clear it
	// to exercise the portable encode/decode path.
	viewIO bool

	opMu sync.Mutex // serialises AllReduce calls
	seq  uint64     // allreduce calls made so far, guarded by opMu

	// Buffers live as long as the Ring so that calls after the first allocate
	// nothing. recvWords backs the chunk being received for a reduce step; sendBuf
	// holds encoded chunks on the portable path.
	recvWords []uint32
	sendBuf   []byte
	hdrIn     [opHeaderLen]byte
	hdrOut    [opHeaderLen]byte

	// The sender goroutine lives as long as the Ring; each call hands it one job.
	jobs         chan sendJob
	sendDone     chan error
	senderExited chan struct{}
	// progress counts elements received so far in the current call (across steps);
	// the sender waits on it before forwarding a chunk. notify wakes the sender.
	progress atomic.Int64
	notify   chan struct{}
	onCancel func()

	mu   sync.Mutex
	err  error         // first failure; sticky
	dead chan struct{} // closed on the first failure or Close
}

// errOpCanceled marks a Ring broken by a canceled context; the caller's error wraps
// the context's own error instead.
var errOpCanceled = errors.New("ring: an allreduce was canceled midway: dial again")

// Rank returns this endpoint's rank.
func (r *Ring) Rank() int { return r.rank }

// Workers returns the number of ranks in the ring.
func (r *Ring) Workers() int { return r.n }

func (c *Config) validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("ring: Workers = %d, need at least 1", c.Workers)
	}
	if c.Rank < 0 || c.Rank >= c.Workers {
		return fmt.Errorf("ring: Rank = %d out of range [0, %d)", c.Rank, c.Workers)
	}
	if c.Workers > 1 && len(c.Addrs) != c.Workers {
		return fmt.Errorf("ring: %d Addrs for %d workers: want one listen address per rank", len(c.Addrs), c.Workers)
	}
	if c.ChunkBytes < 0 {
		return fmt.Errorf("ring: ChunkBytes = %d must not be negative", c.ChunkBytes)
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("ring: DialTimeout = %v must not be negative", c.DialTimeout)
	}
	if c.Workers > 1<<20 {
		return fmt.Errorf("ring: Workers = %d is implausibly large", c.Workers)
	}
	return nil
}

// Dial joins the ring: it listens on Addrs[Rank], connects to the next rank
// (retrying until it is up, the ctx deadline or DialTimeout) and accepts the previous
// rank, checking both peers' rank and world size. Connections that do not speak the
// ring's hello (port scanners, stray clients) are dropped and accepting continues.
// With Workers == 1 it opens no sockets.
func Dial(ctx context.Context, cfg Config) (*Ring, error) {
	if err := cfg.validate(); err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, err
	}
	chunk := cfg.ChunkBytes
	if chunk == 0 {
		chunk = DefaultChunkBytes
	}
	r := &Ring{
		rank:       cfg.Rank,
		n:          cfg.Workers,
		chunkElems: max(1, chunk/4),
		stall:      max(cfg.StallTimeout, 0),
		viewIO:     nativeLittleEndian && !raceEnabled,
		dead:       make(chan struct{}),
	}
	if r.n == 1 {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return r, nil
	}
	r.prevAddr = cfg.Addrs[(r.rank-1+r.n)%r.n]
	r.nextAddr = cfg.Addrs[(r.rank+1)%r.n]

	timeout := cfg.DialTimeout
	if timeout == 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	defer cancelTimeout()
	// When one half of the setup fails the other is canceled with this cause, so that
	// Dial reports the failure that explains it rather than the cancellation.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	ln := cfg.Listener
	if ln == nil {
		var lc net.ListenConfig
		var err error
		ln, err = lc.Listen(ctx, "tcp", cfg.Addrs[r.rank])
		if err != nil {
			return nil, fmt.Errorf("ring: rank %d: listen on %s: %w", r.rank, cfg.Addrs[r.rank], err)
		}
	}
	// Closing the listener is what unblocks Accept on cancellation or failure.
	stopClose := context.AfterFunc(ctx, func() { ln.Close() })
	defer stopClose()
	defer ln.Close()

	type result struct {
		conn net.Conn
		err  error
	}
	accepted := make(chan result, 1)
	dialled := make(chan result, 1)
	go func() {
		c, err := r.acceptPrev(ctx, ln)
		if err != nil {
			cancel(errCanceledBySibling) // fail fast: no point connecting onward
		}
		accepted <- result{c, err}
	}()
	go func() {
		c, err := r.dialNext(ctx)
		if err != nil {
			cancel(errCanceledBySibling)
		}
		dialled <- result{c, err}
	}()
	a, d := <-accepted, <-dialled
	if a.err != nil || d.err != nil {
		for _, c := range []net.Conn{a.conn, d.conn} {
			if c != nil {
				c.Close()
			}
		}
		return nil, primaryError(a.err, d.err)
	}
	r.start(a.conn, d.conn)
	return r, nil
}

// start makes r carry calls over its connections to the previous and the
// next rank, once they are set up.
func (r *Ring) start(prev, next net.Conn) {
	r.prev, r.next = prev, next
	r.recvWords = make([]uint32, r.chunkElems)
	r.jobs = make(chan sendJob)
	r.sendDone = make(chan error, 1)
	r.senderExited = make(chan struct{})
	r.notify = make(chan struct{}, 1)
	r.onCancel = func() { r.fail(errOpCanceled) }
	go r.sendLoop()
}

// primaryError picks the error that explains a failed Dial: the other side usually
// only reports that it was canceled because of the first.
func primaryError(errs ...error) error {
	var fallback error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, errCanceledBySibling) {
			return err
		}
		fallback = err
	}
	return fallback
}

var errCanceledBySibling = errors.New("ring: setup abandoned")

// dialNext connects to the next rank, retrying while it is not yet listening, and
// exchanges hellos.
func (r *Ring) dialNext(ctx context.Context) (net.Conn, error) {
	nextRank := (r.rank + 1) % r.n
	wait := backoff.New(10*time.Millisecond, 500*time.Millisecond)
	var d net.Dialer
	var conn net.Conn
	for {
		c, err := d.DialContext(ctx, "tcp", r.nextAddr)
		if err == nil {
			conn = c
			break
		}
		if wait.Wait(ctx) != nil {
			return nil, r.setupCtxError(ctx, fmt.Errorf("ring: rank %d: connecting to rank %d at %s: %v (is it running and listening?)",
				r.rank, nextRank, r.nextAddr, err))
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := conn.Write(appendHello(nil, r.rank, r.n)); err != nil {
		conn.Close()
		return nil, r.setupCtxError(ctx, fmt.Errorf("ring: rank %d: hello to rank %d at %s: %w", r.rank, nextRank, r.nextAddr, err))
	}
	var buf [helloLen]byte
	if _, err := readFull(conn, buf[:]); err != nil {
		conn.Close()
		return nil, r.setupCtxError(ctx, fmt.Errorf("ring: rank %d: Addrs[%d] %s: no hello back (is a ring rank listening?): %w",
			r.rank, nextRank, r.nextAddr, err))
	}
	h, err := parseHello(buf[:])
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ring: rank %d: %s (Addrs[%d]) is not a ring rank: %w", r.rank, r.nextAddr, nextRank, err)
	}
	if err := r.checkPeer(h, nextRank, "next"); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// helloWait bounds how long one accepted connection may take to say hello, so that
// a silent stray client cannot hold up the real previous rank until the deadline.
const helloWait = 5 * time.Second

// acceptPrev accepts connections until one says hello as a ring rank, answers it with
// this rank's hello (so the dialler can check it too) and checks it is the previous
// rank of the same world.
func (r *Ring) acceptPrev(ctx context.Context, ln net.Listener) (net.Conn, error) {
	prevRank := (r.rank - 1 + r.n) % r.n
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, r.setupCtxError(ctx, fmt.Errorf("ring: rank %d: rank %d (Addrs[%d] %s) did not connect in time: is it running, with these Addrs?",
					r.rank, prevRank, prevRank, r.prevAddr))
			}
			return nil, fmt.Errorf("ring: rank %d: accept on %s: %w", r.rank, ln.Addr(), err)
		}
		wait := time.Now().Add(helloWait)
		if dl, ok := ctx.Deadline(); ok && dl.Before(wait) {
			wait = dl
		}
		conn.SetDeadline(wait)
		var buf [helloLen]byte
		if _, err := readFull(conn, buf[:]); err != nil {
			conn.Close()
			continue
		}
		h, err := parseHello(buf[:])
		if err != nil {
			conn.Close()
			continue
		}
		if _, err := conn.Write(appendHello(nil, r.rank, r.n)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("ring: rank %d: hello back to rank %d: %w", r.rank, h.rank, err)
		}
		if err := r.checkPeer(h, prevRank, "previous"); err != nil {
			conn.Close()
			return nil, err
		}
		conn.SetDeadline(time.Time{})
		return conn, nil
	}
}

func (r *Ring) checkPeer(h hello, want int, which string) error {
	if int(h.world) != r.n {
		return fmt.Errorf("ring: rank %d: %w: the %s rank (%d) has Workers = %d, this rank %d",
			r.rank, ErrMismatch, which, h.rank, h.world, r.n)
	}
	if int(h.rank) != want {
		return fmt.Errorf("ring: rank %d: %w: the %s rank should be %d, rank %d answered (give every rank the same Addrs)",
			r.rank, ErrMismatch, which, want, h.rank)
	}
	return nil
}

// setupCtxError reports a setup step cut short: by the deadline (err explains which
// peer was missing), by the caller's cancellation, or by the other half of Dial
// failing first.
func (r *Ring) setupCtxError(ctx context.Context, err error) error {
	switch cause := context.Cause(ctx); {
	case cause == nil, errors.Is(cause, context.DeadlineExceeded):
		return err
	case errors.Is(cause, errCanceledBySibling):
		return errCanceledBySibling
	default:
		return fmt.Errorf("ring: rank %d: Dial canceled: %w", r.rank, cause)
	}
}

// fail breaks the ring with err unless it is already broken: it closes both
// connections so that every blocked read and write, here and at the neighbours,
// returns, and the failure travels around the ring.
func (r *Ring) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	r.err = err
	close(r.dead)
	if r.prev != nil {
		r.prev.Close()
	}
	if r.next != nil {
		r.next.Close()
	}
}

func (r *Ring) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close closes the ring's connections and stops its sender; a call in progress
// returns an error. Peers see their connections drop. Close is idempotent.
func (r *Ring) Close() error {
	r.fail(ErrClosed)
	if r.senderExited != nil {
		<-r.senderExited
	}
	return nil
}

const (
	helloLen     = 16
	helloMagic   = 0x47524d53 // "SMRG" read as little-endian
	helloVersion = 1
)

type hello struct {
	rank, world uint32
}

func appendHello(b []byte, rank, world int) []byte {
	b = binary.LittleEndian.AppendUint32(b, helloMagic)
	b = binary.LittleEndian.AppendUint16(b, helloVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(world))
	return b
}

func parseHello(b []byte) (hello, error) {
	if len(b) < helloLen {
		return hello{}, fmt.Errorf("hello of %d bytes, want %d", len(b), helloLen)
	}
	if m := binary.LittleEndian.Uint32(b); m != helloMagic {
		return hello{}, fmt.Errorf("bad hello magic %#08x", m)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != helloVersion {
		return hello{}, fmt.Errorf("ring protocol version %d, this build speaks %d", v, helloVersion)
	}
	return hello{
		rank:  binary.LittleEndian.Uint32(b[8:]),
		world: binary.LittleEndian.Uint32(b[12:]),
	}, nil
}
