package bmv2

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"sync"
	"time"
)

// Thrift is a client of BMv2's Thrift runtime service, the interface
// simple_switch_CLI speaks (TCP port --thrift-port, 9090 by default). It
// covers register access, which BMv2's P4Runtime server does not implement
// (it answers register reads and writes with UNIMPLEMENTED).
//
// It speaks the Thrift binary protocol over an unframed (buffered)
// transport with the service multiplexed as "standard", as BMv2's own
// clients do. It is safe for concurrent use; calls are serialised.
type Thrift struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	seq  int32
}

// ThriftError is an error the switch answered a call with.
type ThriftError struct {
	Method string
	// Code is the InvalidRegisterOperation code (1 invalid register name,
	// 2 invalid index, 3 other), or 0 for a Thrift application exception.
	Code    int32
	Message string
}

func (e *ThriftError) Error() string {
	if e.Code != 0 {
		what := map[int32]string{1: "invalid register name", 2: "invalid index", 3: "error"}[e.Code]
		return fmt.Sprintf("bmv2: thrift %s: %s (code %d)", e.Method, what, e.Code)
	}
	return fmt.Sprintf("bmv2: thrift %s: %s", e.Method, e.Message)
}

// DialThrift connects to a BMv2 Thrift runtime server at addr (host:port).
func DialThrift(ctx context.Context, addr string) (*Thrift, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bmv2: thrift: %w", err)
	}
	return newThrift(conn), nil
}

func newThrift(conn net.Conn) *Thrift {
	return &Thrift{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}
}

// Thrift connects to the switch's Thrift runtime server (inside its
// network namespace when it has one).
func (s *Switch) Thrift(ctx context.Context) (*Thrift, error) {
	conn, err := dialIn(ctx, s.opts.NetNS, net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.ThriftPort)))
	if err != nil {
		return nil, fmt.Errorf("bmv2: thrift: %w", err)
	}
	return newThrift(conn), nil
}

// Close closes the connection.
func (c *Thrift) Close() error { return c.conn.Close() }

// RegisterRead returns cell index of a register array (full name, e.g.
// "SwitchMLIngress.pool_bitmap"), as BMv2 stores it: the unsigned bits.
func (c *Thrift) RegisterRead(ctx context.Context, name string, index int) (uint64, error) {
	if index < 0 || index > math.MaxInt32 {
		return 0, fmt.Errorf("bmv2: register %s index %d out of range", name, index)
	}
	var v int64
	err := c.call(ctx, "bm_register_read", func(a *argWriter) {
		a.i32(1, 0)
		a.str(2, name)
		a.i32(3, int32(index))
	}, func(id int16, typ byte, r *thriftReader) (bool, error) {
		if id == 0 && typ == tI64 {
			v = r.i64()
			return true, r.err
		}
		return false, nil
	})
	return uint64(v), err
}

// RegisterReadAll returns every cell of a register array.
func (c *Thrift) RegisterReadAll(ctx context.Context, name string) ([]uint64, error) {
	var out []uint64
	err := c.call(ctx, "bm_register_read_all", func(a *argWriter) {
		a.i32(1, 0)
		a.str(2, name)
	}, func(id int16, typ byte, r *thriftReader) (bool, error) {
		if id != 0 || typ != tList {
			return false, nil
		}
		et, n := r.byte(), r.i32()
		if et != tI64 || n < 0 {
			return true, fmt.Errorf("bmv2: thrift: unexpected list of type %d, length %d", et, n)
		}
		out = make([]uint64, 0, min(int(n), 1<<20))
		for i := int32(0); i < n && r.err == nil; i++ {
			out = append(out, uint64(r.i64()))
		}
		return true, r.err
	})
	return out, err
}

// RegisterWrite sets cell index of a register array.
func (c *Thrift) RegisterWrite(ctx context.Context, name string, index int, value uint64) error {
	if index < 0 || index > math.MaxInt32 {
		return fmt.Errorf("bmv2: register %s index %d out of range", name, index)
	}
	return c.call(ctx, "bm_register_write", func(a *argWriter) {
		a.i32(1, 0)
		a.str(2, name)
		a.i32(3, int32(index))
		a.i64(4, int64(value))
	}, nil)
}

// RegisterWriteRange sets cells [first, end) of a register array.
func (c *Thrift) RegisterWriteRange(ctx context.Context, name string, first, end int, value uint64) error {
	if first < 0 || end < first || end > math.MaxInt32 {
		return fmt.Errorf("bmv2: register %s range [%d, %d) invalid", name, first, end)
	}
	return c.call(ctx, "bm_register_write_range", func(a *argWriter) {
		a.i32(1, 0)
		a.str(2, name)
		a.i32(3, int32(first))
		a.i32(4, int32(end))
		a.i64(5, int64(value))
	}, nil)
}

// RegisterReset zeroes every cell of a register array.
func (c *Thrift) RegisterReset(ctx context.Context, name string) error {
	return c.call(ctx, "bm_register_reset", func(a *argWriter) {
		a.i32(1, 0)
		a.str(2, name)
	}, nil)
}

// Thrift binary protocol: field and message types.
const (
	tStop   = 0
	tBool   = 2
	tByte   = 3
	tDouble = 4
	tI16    = 6
	tI32    = 8
	tI64    = 10
	tString = 11
	tStruct = 12
	tMap    = 13
	tSet    = 14
	tList   = 15

	msgCall      = 1
	msgReply     = 2
	msgException = 3
	version1     = 0x80010000
)

// argWriter encodes the fields of a call's argument struct.
type argWriter struct{ b []byte }

func (a *argWriter) field(typ byte, id int16) {
	a.b = append(a.b, typ)
	a.b = binary.BigEndian.AppendUint16(a.b, uint16(id))
}

func (a *argWriter) i32(id int16, v int32) {
	a.field(tI32, id)
	a.b = binary.BigEndian.AppendUint32(a.b, uint32(v))
}

func (a *argWriter) i64(id int16, v int64) {
	a.field(tI64, id)
	a.b = binary.BigEndian.AppendUint64(a.b, uint64(v))
}

func (a *argWriter) str(id int16, s string) {
	a.field(tString, id)
	a.b = binary.BigEndian.AppendUint32(a.b, uint32(len(s)))
	a.b = append(a.b, s...)
}

// thriftReader decodes; the first error sticks and later reads return zero.
type thriftReader struct {
	r   *bufio.Reader
	err error
}

func (t *thriftReader) read(n int) []byte {
	if t.err != nil {
		return make([]byte, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(t.r, b); err != nil {
		t.err = err
	}
	return b
}

func (t *thriftReader) byte() byte { return t.read(1)[0] }
func (t *thriftReader) i16() int16 { return int16(binary.BigEndian.Uint16(t.read(2))) }
func (t *thriftReader) i32() int32 { return int32(binary.BigEndian.Uint32(t.read(4))) }
func (t *thriftReader) i64() int64 { return int64(binary.BigEndian.Uint64(t.read(8))) }
func (t *thriftReader) str() string {
	n := t.i32()
	if n < 0 || n > 1<<24 {
		if t.err == nil {
			t.err = fmt.Errorf("bmv2: thrift: string of length %d", n)
		}
		return ""
	}
	return string(t.read(int(n)))
}

// skip reads past a value of type typ.
func (t *thriftReader) skip(typ byte, depth int) {
	if depth > 32 && t.err == nil {
		t.err = errors.New("bmv2: thrift: values nested too deeply")
	}
	if t.err != nil {
		return
	}
	switch typ {
	case tBool, tByte:
		t.read(1)
	case tI16:
		t.read(2)
	case tI32:
		t.read(4)
	case tI64, tDouble:
		t.read(8)
	case tString:
		t.str()
	case tStruct:
		for t.err == nil {
			ft := t.byte()
			if ft == tStop {
				return
			}
			t.i16()
			t.skip(ft, depth+1)
		}
	case tMap:
		kt, vt, n := t.byte(), t.byte(), t.i32()
		for i := int32(0); i < n && t.err == nil; i++ {
			t.skip(kt, depth+1)
			t.skip(vt, depth+1)
		}
	case tSet, tList:
		et, n := t.byte(), t.i32()
		for i := int32(0); i < n && t.err == nil; i++ {
			t.skip(et, depth+1)
		}
	default:
		t.err = fmt.Errorf("bmv2: thrift: unknown value type %d", typ)
	}
}

// call sends one call and reads its reply. onField sees each field of the
// result struct and reports whether it consumed it; field 1 (the
// InvalidRegisterOperation of the register calls) becomes a *ThriftError.
func (c *Thrift) call(ctx context.Context, method string, args func(*argWriter), onField func(id int16, typ byte, r *thriftReader) (bool, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("bmv2: thrift %s: %w", method, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	c.seq++
	a := &argWriter{}
	a.b = binary.BigEndian.AppendUint32(a.b, version1|msgCall)
	name := "standard:" + method
	a.b = binary.BigEndian.AppendUint32(a.b, uint32(len(name)))
	a.b = append(a.b, name...)
	a.b = binary.BigEndian.AppendUint32(a.b, uint32(c.seq))
	args(a)
	a.b = append(a.b, tStop)
	if _, err := c.w.Write(a.b); err != nil {
		return c.fail(ctx, method, err)
	}
	if err := c.w.Flush(); err != nil {
		return c.fail(ctx, method, err)
	}

	r := &thriftReader{r: c.r}
	head := uint32(r.i32())
	if r.err == nil && head&0xffff0000 != version1 {
		return c.fail(ctx, method, fmt.Errorf("reply without a protocol version (%#x)", head))
	}
	r.str() // method name
	seq := r.i32()
	if r.err == nil && seq != c.seq {
		return c.fail(ctx, method, fmt.Errorf("reply to call %d, want %d", seq, c.seq))
	}
	var result error
	switch byte(head) {
	case msgReply:
	case msgException:
		te := &ThriftError{Method: method}
		for r.err == nil {
			ft := r.byte()
			if ft == tStop {
				break
			}
			id := r.i16()
			if id == 1 && ft == tString {
				te.Message = r.str()
			} else {
				r.skip(ft, 0)
			}
		}
		if r.err != nil {
			return c.fail(ctx, method, r.err)
		}
		return te
	default:
		return c.fail(ctx, method, fmt.Errorf("message type %d, want a reply", byte(head)))
	}
	for r.err == nil {
		ft := r.byte()
		if ft == tStop {
			break
		}
		id := r.i16()
		if onField != nil {
			done, err := onField(id, ft, r)
			if err != nil && result == nil {
				result = err
			}
			if done {
				continue
			}
		}
		if id == 1 && ft == tStruct {
			te := &ThriftError{Method: method}
			for r.err == nil {
				et := r.byte()
				if et == tStop {
					break
				}
				if eid := r.i16(); eid == 1 && et == tI32 {
					te.Code = r.i32()
				} else {
					r.skip(et, 0)
				}
			}
			if result == nil {
				result = te
			}
			continue
		}
		r.skip(ft, 0)
	}
	if r.err != nil {
		return c.fail(ctx, method, r.err)
	}
	return result
}

// fail reports a transport failure; the connection is no longer in step
// with the server, so it is closed.
func (c *Thrift) fail(ctx context.Context, method string, err error) error {
	c.conn.Close()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return fmt.Errorf("bmv2: thrift %s: %w", method, err)
}
