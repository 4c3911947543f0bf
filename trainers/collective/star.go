package collective

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"
)

// The star protocol: a worker connects and sends a hello
// {magic "SMST", rank u32, workers u32}; then for each allreduce it sends
// {count u32} and count float32 values, and receives count float32 sums.
// All integers and floats are little-endian. The server adds the ranks'
// values in float64, in rank order, so the result does not depend on
// arrival order and carries no float32 rounding of partial sums.

var starMagic = [4]byte{'S', 'M', 'S', 'T'}

const maxStarElems = 1 << 28

// Star is the server side of the exact backend.
type Star struct {
	ln      net.Listener
	workers int
	done    chan struct{}
	errOnce sync.Once
	err     error
	wg      sync.WaitGroup
}

// ServeStar accepts `workers` connections on ln and serves allreduces until
// ctx ends, a worker disconnects, or Close is called.
func ServeStar(ctx context.Context, ln net.Listener, workers int) *Star {
	s := &Star{ln: ln, workers: workers, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.fail(s.serve(ctx))
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.fail(ctx.Err())
		case <-s.done:
		}
	}()
	return s
}

// Addr is the listen address.
func (s *Star) Addr() string { return s.ln.Addr().String() }

func (s *Star) fail(err error) {
	s.errOnce.Do(func() {
		s.err = err
		close(s.done)
		s.ln.Close()
	})
}

// Close stops the server.
func (s *Star) Close() error {
	s.fail(errors.New("star closed"))
	s.wg.Wait()
	return nil
}

// Err returns why the server stopped (nil while it runs... or after a clean end).
func (s *Star) Err() error {
	select {
	case <-s.done:
		if errors.Is(s.err, io.EOF) {
			return nil
		}
		return s.err
	default:
		return nil
	}
}

func (s *Star) serve(ctx context.Context) error {
	conns := &starConns{conns: make([]net.Conn, s.workers)}
	defer conns.closeAll()
	go func() {
		<-s.done
		conns.closeAll()
	}()
	if err := s.acceptAll(conns); err != nil {
		return err
	}
	red := newStarReducer(conns.conns)
	for {
		n, err := red.read()
		if err != nil {
			return err
		}
		red.sum(n)
		if err := red.reply(); err != nil {
			return err
		}
	}
}

// starConns are the workers' connections by rank; they fill up while a
// Close may already be closing them.
type starConns struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (cs *starConns) set(rank int, c net.Conn) {
	cs.mu.Lock()
	cs.conns[rank] = c
	cs.mu.Unlock()
}

func (cs *starConns) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.conns {
		if c != nil {
			c.Close()
		}
	}
}

// acceptAll accepts connections until every rank has said hello. A
// connection without the protocol's magic is dropped; a hello of a wrong
// world size or rank, or of a rank already there, ends the server.
func (s *Star) acceptAll(conns *starConns) error {
	for joined := 0; joined < s.workers; {
		c, err := s.ln.Accept()
		if err != nil {
			return err
		}
		var hello [12]byte
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, hello[:]); err != nil || [4]byte(hello[:4]) != starMagic {
			c.Close() // not one of ours
			continue
		}
		c.SetReadDeadline(time.Time{})
		rank := int(binary.LittleEndian.Uint32(hello[4:]))
		n := int(binary.LittleEndian.Uint32(hello[8:]))
		if n != s.workers || rank < 0 || rank >= n || conns.conns[rank] != nil {
			c.Close()
			return fmt.Errorf("star: bad hello rank %d of %d (server has %d workers)", rank, n, s.workers)
		}
		conns.set(rank, c)
		joined++
	}
	return nil
}

// starReducer runs the allreduces over the joined ranks' connections,
// reusing its buffers from one to the next.
type starReducer struct {
	readers []*bufio.Reader
	writers []*bufio.Writer
	raw     [][]byte // each rank's contribution
	counts  []int    // each rank's element count
	errs    []error  // each rank's read error
	total   []float64
	out     []byte
}

func newStarReducer(conns []net.Conn) *starReducer {
	red := &starReducer{
		readers: make([]*bufio.Reader, len(conns)),
		writers: make([]*bufio.Writer, len(conns)),
		raw:     make([][]byte, len(conns)),
		counts:  make([]int, len(conns)),
		errs:    make([]error, len(conns)),
		out:     []byte{},
	}
	for i, c := range conns {
		red.readers[i] = bufio.NewReaderSize(c, 1<<16)
		red.writers[i] = bufio.NewWriterSize(c, 1<<16)
	}
	return red
}

// read reads every rank's contribution concurrently, so no worker's send
// buffer fills while the server waits on another, and returns its length:
// io.EOF when rank 0 has left, an error when a rank failed or sent another
// length than rank 0.
func (red *starReducer) read() (int, error) {
	clear(red.errs)
	var wg sync.WaitGroup
	for r := range red.readers {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			red.errs[r] = red.readRank(r)
		}(r)
	}
	wg.Wait()
	for r, err := range red.errs {
		if err != nil {
			if errors.Is(err, io.EOF) && r == 0 {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("star: rank %d: %w", r, err)
		}
	}
	n := red.counts[0]
	for r, c := range red.counts {
		if c != n {
			return 0, fmt.Errorf("star: rank %d sent %d elements, rank 0 sent %d", r, c, n)
		}
	}
	return n, nil
}

// readRank reads rank r's count and values into counts[r] and raw[r].
func (red *starReducer) readRank(r int) error {
	var h [4]byte
	if _, err := io.ReadFull(red.readers[r], h[:]); err != nil {
		return err
	}
	n := int(binary.LittleEndian.Uint32(h[:]))
	if n > maxStarElems {
		return fmt.Errorf("star: rank %d sent %d elements", r, n)
	}
	red.counts[r] = n
	if cap(red.raw[r]) < 4*n {
		red.raw[r] = make([]byte, 4*n)
	}
	red.raw[r] = red.raw[r][:4*n]
	_, err := io.ReadFull(red.readers[r], red.raw[r])
	return err
}

// sum adds the ranks' n values in float64, in rank order, and encodes the
// float32 sums into out.
func (red *starReducer) sum(n int) {
	if cap(red.total) < n {
		red.total = make([]float64, n)
	}
	total := red.total[:n]
	clear(total)
	for _, b := range red.raw {
		for i := range total {
			total[i] += float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	}
	red.total = total
	if cap(red.out) < 4*n {
		red.out = make([]byte, 4*n)
	}
	red.out = red.out[:4*n]
	for i, v := range total {
		binary.LittleEndian.PutUint32(red.out[4*i:], math.Float32bits(float32(v)))
	}
}

// reply sends the sums to every rank.
func (red *starReducer) reply() error {
	for r, w := range red.writers {
		if _, err := w.Write(red.out); err != nil {
			return fmt.Errorf("star: rank %d: %w", r, err)
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("star: rank %d: %w", r, err)
		}
	}
	return nil
}

// StarClient is a worker's end of the exact backend.
type StarClient struct {
	mu  sync.Mutex
	c   net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	buf []byte
	err error
}

// DialStar connects to the star server, retrying until ctx ends (the server
// may start a moment after the workers).
func DialStar(ctx context.Context, addr string, rank, workers int) (*StarClient, error) {
	var d net.Dialer
	var c net.Conn
	var err error
	for {
		c, err = d.DialContext(ctx, "tcp", addr)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("star: dial %s: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	var hello [12]byte
	copy(hello[:], starMagic[:])
	binary.LittleEndian.PutUint32(hello[4:], uint32(rank))
	binary.LittleEndian.PutUint32(hello[8:], uint32(workers))
	if _, err := c.Write(hello[:]); err != nil {
		c.Close()
		return nil, err
	}
	return &StarClient{c: c, r: bufio.NewReaderSize(c, 1<<16), w: bufio.NewWriterSize(c, 1<<16)}, nil
}

// AllReduceFloat32 implements Backend.
func (s *StarClient) AllReduceFloat32(ctx context.Context, x []float32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if len(x) > maxStarElems {
		return fmt.Errorf("star: %d elements exceed the limit %d", len(x), maxStarElems)
	}
	if dl, ok := ctx.Deadline(); ok {
		s.c.SetDeadline(dl)
	} else {
		s.c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { s.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if cap(s.buf) < 4*len(x) {
		s.buf = make([]byte, 4*len(x))
	}
	b := s.buf[:4*len(x)]
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	var h [4]byte
	binary.LittleEndian.PutUint32(h[:], uint32(len(x)))
	s.w.Write(h[:])
	s.w.Write(b)
	if err := s.w.Flush(); err != nil {
		s.err = fmt.Errorf("star: send: %w", err)
		return s.err
	}
	if _, err := io.ReadFull(s.r, b); err != nil {
		s.err = fmt.Errorf("star: receive: %w", err)
		return s.err
	}
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

// Close implements Backend.
func (s *StarClient) Close() error { return s.c.Close() }
