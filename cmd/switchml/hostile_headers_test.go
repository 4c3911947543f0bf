package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/switchml/switchml-go/jobpb"
)

// amplifier is an HTTP/2 client whose calls' headers decode into far more
// than it sends: its connection's HPACK table holds one header of about 4
// KB, and each call's HEADERS frame names it refs times, at one byte each.
// The header's name ends in -bin, so that gRPC decodes every copy of its
// base64 value apart. Its calls send no request: they are held open
// until the server ends them.
type amplifier struct {
	conn  net.Conn
	fr    *http2.Framer
	mu    sync.Mutex // one frame written at a time
	enc   *hpack.Encoder
	block bytes.Buffer
	next  uint32 // the next stream id
	big   hpack.HeaderField

	syncID atomic.Uint32 // the stream of the call sync waits for
	synced chan struct{} // that call answered: the server read every frame before it
	closed chan struct{} // the server closed the connection
	resets atomic.Int64  // calls the server reset
}

// dialAmplifier opens an amplifier's connection to addr from the local
// address from (loopback).
func dialAmplifier(ctx context.Context, t *testing.T, addr, from string) *amplifier {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	value := make([]byte, 3000)
	rand.Read(value)
	a := &amplifier{conn: conn, fr: http2.NewFramer(conn, conn), next: 1, synced: make(chan struct{}, 1), closed: make(chan struct{}),
		big: hpack.HeaderField{Name: "x-amplify-bin", Value: base64.StdEncoding.EncodeToString(value)}}
	a.enc = hpack.NewEncoder(&a.block)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := a.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go a.read()
	return a
}

// read answers the server's settings and pings, and notes its answers to
// the amplifier's, until the connection closes.
func (a *amplifier) read() {
	defer close(a.closed)
	for {
		f, err := a.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				a.write(func() error { return a.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				a.write(func() error { return a.fr.WritePing(true, f.Data) })
			}
		case *http2.HeadersFrame:
			if f.StreamID == a.syncID.Load() {
				a.synced <- struct{}{}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == a.syncID.Load() {
				a.synced <- struct{}{}
			} else {
				a.resets.Add(1)
			}
		}
	}
}

func (a *amplifier) write(f func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return f()
}

// call opens a call of method whose headers name the big header refs
// times (the connection's first call puts it in the table, and so sends
// it once), and sends no request; it returns the call's stream.
func (a *amplifier) call(method string, refs int) (uint32, error) {
	a.block.Reset()
	// Never indexed, so that the table keeps only the big header.
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "controller"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		a.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
	}
	for range refs {
		a.enc.WriteField(a.big)
	}
	id := a.next
	a.next += 2
	return id, a.write(func() error {
		return a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: a.block.Bytes(), EndHeaders: true})
	})
}

// sync waits until the server has read every frame sent before: it
// answers a Describe call sent after them. (A PING would do, but gRPC
// takes a client that pings often on a connection it sends nothing on
// for a misbehaving one, and closes it.)
func (a *amplifier) sync(ctx context.Context) error {
	id, err := a.call(jobpb.JobService_Describe_FullMethodName, 0)
	if err != nil {
		return err
	}
	a.syncID.Store(id)
	// The empty DescribeRequest, behind gRPC's 5-byte prefix.
	if err := a.write(func() error { return a.fr.WriteData(id, true, make([]byte, 5)) }); err != nil {
		return err
	}
	select {
	case <-a.synced:
		return nil
	case <-a.closed:
		return errors.New("the server closed the connection")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestHostileHeaderAmplificationMemoryBound: one client opens 250
// Register calls and then 300 Watch calls, none with a request, whose
// headers each take 4 KB on the wire and name a 4 KB header of the
// connection's HPACK table 4,000 times (12 MB decoded a call). The
// controller's peak resident set stays under 600 MB, and a job of two
// ranks from another address runs through it afterwards, verified.
func TestHostileHeaderAmplificationMemoryBound(t *testing.T) {
	needProcesses(t)
	const (
		registers, watches = 250, 300
		refs               = 4000
		perConn            = 100 // within the 128 calls a connection may have open
		batch              = 10  // calls between two checks of the controller's memory
		bound              = 600 << 20
		giveUp             = 1 << 30 // a controller without bounds would take gigabytes
	)
	f := startFabric(t, nil, "")
	pid := f.ctl.Cmd().Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var conns []*amplifier
	storm := func(method string, n int) {
		t.Helper()
		onWire := 0 // bytes of headers a call takes on the wire, the table's header aside
		for sent := 0; sent < n; {
			a := dialAmplifier(ctx, t, f.controller, "127.0.0.2")
			conns = append(conns, a)
			for i := 0; i < perConn && sent < n; i++ {
				if _, err := a.call(method, refs); err != nil {
					t.Fatalf("call %d of %s: %v", sent, method, err)
				}
				onWire = len(a.block.Bytes())
				sent++
				if sent%batch != 0 && sent != n {
					continue
				}
				if err := a.sync(ctx); err != nil {
					t.Fatalf("after %d calls of %s: %v", sent, method, err)
				}
				if rss := procMemory(t, pid, "VmRSS"); rss > giveUp {
					t.Fatalf("the controller's resident set reached %d MB after %d calls of %s, each of %d bytes of headers on the wire: stopped the attack",
						rss>>20, sent, method, onWire)
				}
			}
		}
	}
	storm(jobpb.JobService_Register_FullMethodName, registers)
	storm(jobpb.JobService_Watch_FullMethodName, watches)
	var resets int64
	for _, a := range conns {
		resets += a.resets.Load()
	}
	t.Logf("%d calls over %d connections, %d of them reset by the controller", registers+watches, len(conns), resets)
	// The attack's connections stay open while the job runs.
	runJob(t, f, nil, jobSpec{name: "after-amplification", dtype: "int32", workers: 2, elements: 50_000, iters: 2, lanes: 1, window: 16})
	hwm := peakRSS(t, pid)
	switch {
	case raceEnabled:
		t.Logf("controller peak resident set %d MB under the race detector: not checked", hwm>>20)
	case hwm > bound:
		t.Errorf("controller peak resident set %d MB under the amplified calls, want under %d MB", hwm>>20, bound>>20)
	default:
		t.Logf("controller peak resident set %d MB under the amplified calls", hwm>>20)
	}
}
