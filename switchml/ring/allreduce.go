package ring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"os"
	"time"
	"unsafe"
)

type dtype uint8

const (
	dtypeFloat32 dtype = 1
	dtypeInt32   dtype = 2
)

func (d dtype) String() string {
	switch d {
	case dtypeFloat32:
		return "AllReduceFloat32"
	case dtypeInt32:
		return "AllReduceInt32"
	}
	return fmt.Sprintf("unknown operation %d", uint8(d))
}

const (
	opHeaderLen = 24
	opMagic     = 0x4f524d53 // "SMRO" read as little-endian
)

// nativeLittleEndian says whether tensors in memory already have the wire's byte
// order, so they can go to and from the socket without conversion.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// sendJob is one allreduce as the sender goroutine sees it.
type sendJob struct {
	seq   uint64
	dt    dtype
	f32   []float32
	i32   []int32
	count int
}

// AllReduceFloat32 replaces x on every rank with the element-wise sum of x over all
// ranks. Every rank gets bit-identical results (each sum is computed once and then
// copied around the ring). All ranks must call it with the same length in the same
// order relative to their other AllReduce calls; a mismatch is reported as an error.
// Canceling ctx breaks the ring (see the package comment).
func (r *Ring) AllReduceFloat32(ctx context.Context, x []float32) error {
	return r.allReduce(ctx, sendJob{dt: dtypeFloat32, f32: x, count: len(x)})
}

// AllReduceInt32 is AllReduceFloat32 for int32; sums wrap around on overflow, as
// int32 addition does in Go.
func (r *Ring) AllReduceInt32(ctx context.Context, x []int32) error {
	return r.allReduce(ctx, sendJob{dt: dtypeInt32, i32: x, count: len(x)})
}

func (r *Ring) allReduce(ctx context.Context, job sendJob) error {
	if err := ctx.Err(); err != nil {
		// Nothing has been sent: the ring stays usable.
		return fmt.Errorf("ring: %v not started: %w", job.dt, err)
	}
	r.opMu.Lock()
	defer r.opMu.Unlock()
	if err := r.failure(); err != nil {
		return brokenError(err)
	}
	r.seq++
	job.seq = r.seq
	if r.n == 1 {
		return nil
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, r.onCancel)
		defer stop()
	}

	if !r.viewIO && len(r.sendBuf) < 4*r.chunkElems {
		r.sendBuf = make([]byte, 4*r.chunkElems)
	}
	r.progress.Store(0)
	select {
	case <-r.notify: // drop a wake-up left over from the previous call
	default:
	}
	select {
	case r.jobs <- job:
	case <-r.dead:
		return r.opError(ctx, job)
	}
	recvErr := r.receive(job)
	if recvErr != nil {
		r.fail(recvErr)
	}
	sendErr := <-r.sendDone
	if recvErr == nil && sendErr == nil {
		// Even if ctx was canceled just now (and the ring closed with it), both
		// directions completed: x holds the sum and every peer got our data.
		return nil
	}
	return r.opError(ctx, job)
}

// opError is the error of a call that did not complete: the ring's first failure,
// or the context's error if that is what broke it.
func (r *Ring) opError(ctx context.Context, job sendJob) error {
	err := r.failure()
	switch {
	case errors.Is(err, errOpCanceled) && ctx.Err() != nil:
		return fmt.Errorf("ring: rank %d: %v #%d canceled, ring closed: %w", r.rank, job.dt, job.seq, ctx.Err())
	case err == ErrClosed:
		return ErrClosed
	}
	return err
}

func brokenError(err error) error {
	if err == ErrClosed {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrBroken, err)
}

// segment returns the element range of segment i when count elements are split into
// n nearly equal parts (the first count%n parts one element longer).
func segment(i, n, count int) (off, length int) {
	q, rem := count/n, count%n
	off = i*q + min(i, rem)
	length = q
	if i < rem {
		length++
	}
	return off, length
}

func mod(a, n int) int { return ((a % n) + n) % n }

// Steps are numbered t = 0 .. 2(n-1)-1: reduce-scatter for t < n-1, all-gather after.
// In step t rank r sends segment r-t and receives segment r-t-1 (mod n), so what it
// sends in step t is exactly what it received in step t-1.
func (r *Ring) sendSegment(t int) int { return mod(r.rank-t, r.n) }
func (r *Ring) recvSegment(t int) int { return mod(r.rank-t-1, r.n) }

func (r *Ring) sendLoop() {
	defer close(r.senderExited)
	for {
		select {
		case job := <-r.jobs:
			err := r.send(job)
			if err != nil {
				r.fail(err)
			}
			r.sendDone <- err
		case <-r.dead:
			return
		}
	}
}

// send streams the op header and then every step's segment to the next rank. A
// chunk of step t > 0 is forwarded once the receiver has finished the same chunk in
// step t-1.
func (r *Ring) send(job sendJob) error {
	putOpHeader(r.hdrOut[:], job)
	if err := r.write(job, r.hdrOut[:]); err != nil {
		return err
	}
	steps := 2 * (r.n - 1)
	recvStart := int64(0) // elements received before step t
	for t := 0; t < steps; t++ {
		off, length := segment(r.sendSegment(t), r.n, job.count)
		depStart := recvStart - int64(length) // step t-1 received this same segment
		for lo := 0; lo < length; lo += r.chunkElems {
			hi := min(lo+r.chunkElems, length)
			if t > 0 {
				if err := r.waitProgress(depStart + int64(hi)); err != nil {
					return err
				}
			}
			if err := r.writeElems(job, off+lo, off+hi); err != nil {
				return err
			}
		}
		_, rl := segment(r.recvSegment(t), r.n, job.count)
		recvStart += int64(rl)
	}
	return nil
}

func (r *Ring) waitProgress(need int64) error {
	for r.progress.Load() < need {
		select {
		case <-r.notify:
		case <-r.dead:
			return r.failure()
		}
	}
	return nil
}

func (r *Ring) writeElems(job sendJob, lo, hi int) error {
	if r.viewIO {
		return r.write(job, elemBytes(job, lo, hi))
	}
	b := r.sendBuf[:4*(hi-lo)]
	switch job.dt {
	case dtypeFloat32:
		for i, v := range job.f32[lo:hi] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case dtypeInt32:
		for i, v := range job.i32[lo:hi] {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		}
	}
	return r.write(job, b)
}

func (r *Ring) write(job sendJob, b []byte) error {
	if r.stall > 0 {
		r.next.SetWriteDeadline(time.Now().Add(r.stall))
	}
	if _, err := r.next.Write(b); err != nil {
		return r.ioError(job, "sending to", (r.rank+1)%r.n, r.nextAddr, err)
	}
	return nil
}

// receive reads the previous rank's op header and every step's segment, adding in the
// reduce-scatter steps and copying in the all-gather steps. It runs in the caller's
// goroutine while the sender streams concurrently.
func (r *Ring) receive(job sendJob) error {
	if err := r.read(job, r.hdrIn[:]); err != nil {
		return err
	}
	if err := r.checkOpHeader(job, r.hdrIn[:]); err != nil {
		return err
	}
	steps := 2 * (r.n - 1)
	recvStart := int64(0)
	for t := 0; t < steps; t++ {
		off, length := segment(r.recvSegment(t), r.n, job.count)
		reduce := t < r.n-1
		for lo := 0; lo < length; lo += r.chunkElems {
			hi := min(lo+r.chunkElems, length)
			var err error
			switch {
			case reduce:
				err = r.recvAdd(job, off+lo, off+hi)
			case r.viewIO:
				err = r.read(job, elemBytes(job, off+lo, off+hi))
			default:
				err = r.recvCopy(job, off+lo, off+hi)
			}
			if err != nil {
				return err
			}
			r.progress.Store(recvStart + int64(hi))
			select {
			case r.notify <- struct{}{}:
			default: // a wake-up is already pending; the sender rereads progress
			}
		}
		recvStart += int64(length)
	}
	return nil
}

// recvWords reads k elements into the receive buffer and returns them as wire
// values in native order.
func (r *Ring) recvWireWords(job sendJob, k int) ([]uint32, error) {
	words := r.recvWords[:k]
	if err := r.read(job, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), 4*k)); err != nil {
		return nil, err
	}
	if !nativeLittleEndian {
		for i, w := range words {
			words[i] = bits.ReverseBytes32(w)
		}
	}
	return words, nil
}

func (r *Ring) recvAdd(job sendJob, lo, hi int) error {
	words, err := r.recvWireWords(job, hi-lo)
	if err != nil {
		return err
	}
	switch job.dt {
	case dtypeFloat32:
		addInto(job.f32[lo:hi], unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(words))), len(words)))
	case dtypeInt32:
		addInto(job.i32[lo:hi], unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(words))), len(words)))
	}
	return nil
}

// recvCopy is the all-gather receive when the tensor cannot be read into directly.
func (r *Ring) recvCopy(job sendJob, lo, hi int) error {
	words, err := r.recvWireWords(job, hi-lo)
	if err != nil {
		return err
	}
	switch job.dt {
	case dtypeFloat32:
		dst := job.f32[lo:hi]
		for i, w := range words {
			dst[i] = math.Float32frombits(w)
		}
	case dtypeInt32:
		dst := job.i32[lo:hi]
		for i, w := range words {
			dst[i] = int32(w)
		}
	}
	return nil
}

func addInto[T float32 | int32](dst, src []T) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// elemBytes views elements [lo, hi) of the job's tensor as bytes.
func elemBytes(job sendJob, lo, hi int) []byte {
	if hi == lo {
		return nil
	}
	switch job.dt {
	case dtypeFloat32:
		return unsafe.Slice((*byte)(unsafe.Pointer(&job.f32[lo])), 4*(hi-lo))
	case dtypeInt32:
		return unsafe.Slice((*byte)(unsafe.Pointer(&job.i32[lo])), 4*(hi-lo))
	}
	return nil
}

func (r *Ring) read(job sendJob, b []byte) error {
	if r.stall > 0 {
		r.prev.SetReadDeadline(time.Now().Add(r.stall))
	}
	if _, err := readFull(r.prev, b); err != nil {
		return r.ioError(job, "receiving from", (r.rank-1+r.n)%r.n, r.prevAddr, err)
	}
	return nil
}

func readFull(c net.Conn, b []byte) (int, error) { return io.ReadFull(c, b) }

// ioError explains a failed read or write. If the ring is already broken (this rank
// was canceled or closed, or the other direction failed first) that cause wins.
func (r *Ring) ioError(job sendJob, what string, peer int, addr string, err error) error {
	if prior := r.failure(); prior != nil {
		return prior
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("ring: rank %d: %s rank %d (%s), %v #%d: %w for %v (StallTimeout): a rank stopped or has not made the call",
			r.rank, what, peer, addr, job.dt, job.seq, ErrStalled, r.stall)
	}
	return fmt.Errorf("ring: rank %d: %s rank %d (%s), %v #%d: %v (it failed, was closed, or called differently)",
		r.rank, what, peer, addr, job.dt, job.seq, err)
}

func putOpHeader(b []byte, job sendJob) {
	binary.LittleEndian.PutUint32(b[0:], opMagic)
	b[4] = byte(job.dt)
	b[5], b[6], b[7] = 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:], job.seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(job.count))
}

func (r *Ring) checkOpHeader(job sendJob, b []byte) error {
	prev := (r.rank - 1 + r.n) % r.n
	if m := binary.LittleEndian.Uint32(b); m != opMagic {
		return fmt.Errorf("ring: rank %d: %v #%d: garbage from rank %d (magic %#08x): the stream is out of step",
			r.rank, job.dt, job.seq, prev, m)
	}
	dt := dtype(b[4])
	seq := binary.LittleEndian.Uint64(b[8:])
	count := binary.LittleEndian.Uint64(b[16:])
	switch {
	case seq != job.seq:
		return fmt.Errorf("ring: rank %d: allreduce #%d: %w: rank %d is at #%d (every rank makes the same calls in order)",
			r.rank, job.seq, ErrMismatch, prev, seq)
	case dt != job.dt:
		return fmt.Errorf("ring: rank %d: allreduce #%d: %w: rank %d called %v, this rank %v",
			r.rank, job.seq, ErrMismatch, prev, dt, job.dt)
	case count != uint64(job.count):
		return fmt.Errorf("ring: rank %d: allreduce #%d (%v): %w: rank %d passed %d elements, this rank %d",
			r.rank, job.seq, job.dt, ErrMismatch, prev, count, job.count)
	}
	return nil
}
