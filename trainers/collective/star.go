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
	conns := make([]net.Conn, s.workers)
	// conns fills up here while a Close may already be closing them.
	var connsMu sync.Mutex
	closeAll := func() {
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	defer closeAll()
	go func() {
		<-s.done
		closeAll()
	}()
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
		if n != s.workers || rank < 0 || rank >= n || conns[rank] != nil {
			c.Close()
			return fmt.Errorf("star: bad hello rank %d of %d (server has %d workers)", rank, n, s.workers)
		}
		connsMu.Lock()
		conns[rank] = c
		connsMu.Unlock()
		joined++
	}
	readers := make([]*bufio.Reader, s.workers)
	writers := make([]*bufio.Writer, s.workers)
	for i, c := range conns {
		readers[i] = bufio.NewReaderSize(c, 1<<16)
		writers[i] = bufio.NewWriterSize(c, 1<<16)
	}
	var sum []float64
	var raw [][]byte = make([][]byte, s.workers)
	out := []byte{}
	for {
		// Read every rank's contribution concurrently so no worker's send
		// buffer fills while the server waits on another.
		counts := make([]int, s.workers)
		errs := make([]error, s.workers)
		var wg sync.WaitGroup
		for r := range conns {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				var h [4]byte
				if _, err := io.ReadFull(readers[r], h[:]); err != nil {
					errs[r] = err
					return
				}
				n := int(binary.LittleEndian.Uint32(h[:]))
				if n > maxStarElems {
					errs[r] = fmt.Errorf("star: rank %d sent %d elements", r, n)
					return
				}
				counts[r] = n
				if cap(raw[r]) < 4*n {
					raw[r] = make([]byte, 4*n)
				}
				raw[r] = raw[r][:4*n]
				if _, err := io.ReadFull(readers[r], raw[r]); err != nil {
					errs[r] = err
				}
			}(r)
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				if errors.Is(err, io.EOF) && r == 0 {
					return io.EOF
				}
				return fmt.Errorf("star: rank %d: %w", r, err)
			}
		}
		n := counts[0]
		for r, c := range counts {
			if c != n {
				return fmt.Errorf("star: rank %d sent %d elements, rank 0 sent %d", r, c, n)
			}
		}
		if cap(sum) < n {
			sum = make([]float64, n)
		}
		sum = sum[:n]
		clear(sum)
		for r := range conns {
			b := raw[r]
			for i := range sum {
				sum[i] += float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
			}
		}
		if cap(out) < 4*n {
			out = make([]byte, 4*n)
		}
		out = out[:4*n]
		for i, v := range sum {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(v)))
		}
		for r := range conns {
			if _, err := writers[r].Write(out); err != nil {
				return fmt.Errorf("star: rank %d: %w", r, err)
			}
			if err := writers[r].Flush(); err != nil {
				return fmt.Errorf("star: rank %d: %w", r, err)
			}
		}
	}
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
