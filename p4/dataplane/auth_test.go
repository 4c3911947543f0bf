package dataplane

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/wire"
)

// locked is a pipeline behind a mutex, as the software switch runs it.
type locked struct {
	mu sync.Mutex
	p  *pipeline.Pipeline
}

func (l *locked) Process(src netip.AddrPort, pkt []byte, out *pipeline.Output) {
	l.mu.Lock()
	l.p.Process(src, pkt, out)
	l.mu.Unlock()
}

// TestServeDropsBadTags runs a two-worker job with a key over real
// sockets: a packet from a worker's socket without the job's tag, sent in
// the same batch as the genuine ones, is dropped and counted, and both
// workers get the exact sum, tagged.
func TestServeDropsBadTags(t *testing.T) {
	sw, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := transport.Listen("127.0.0.1:0", transport.Options{})
	b, _ := transport.Listen("127.0.0.1:0", transport.Options{})
	defer a.Close()
	defer b.Close()
	p, err := pipeline.New(pipeline.Config{Slots: 8, MaxElements: 64, MaxWorkers: 4, Auth: true})
	if err != nil {
		t.Fatal(err)
	}
	var reps []switchjob.Replica
	for r, c := range []*transport.Conn{a, b} {
		w := switchjob.Worker{JobID: 1, Rank: uint16(r), NumWorkers: 2, MulticastGroup: 1, PoolSize: 8}
		if err := p.InsertWorker(pipeline.WorkerKey{Addr: c.LocalAddr()}, w); err != nil {
			t.Fatal(err)
		}
		if err := p.InsertReply(pipeline.ReplyKey{JobID: 1, Rank: uint16(r)}, pipeline.Reply{Addr: c.LocalAddr()}); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, switchjob.Replica{Instance: uint16(r)})
	}
	if err := p.InsertMulticastGroup(1, reps); err != nil {
		t.Fatal(err)
	}
	key := bytes.Repeat([]byte{0x42}, wire.KeyLen)
	if err := p.InsertKey(1, key); err != nil {
		t.Fatal(err)
	}
	tg, _ := wire.NewTagger(key)
	proc := &locked{p: p}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sw, proc, nil, nil) }()
	defer func() {
		cancel()
		<-done
	}()

	h := wire.Header{Format: wire.FormatExtended, Seq: 1, PacketID: 1, Slot: 2, Elements: 3}
	packet := func(rank uint16, vals []int32, seal bool) []byte {
		hh := h
		hh.Tagged = seal
		buf, _ := hh.Append(nil)
		buf = wire.AppendPayload(buf, vals)
		if seal {
			buf = tg.SealRequest(buf, rank, 0)
		}
		return buf
	}
	forged := packet(0, []int32{1000, 1000, 1000}, false)
	if _, err := a.WriteBatch([]transport.Message{
		{Buf: forged, Addr: sw.LocalAddr()},
		{Buf: packet(0, []int32{1, 2, 3}, true), Addr: sw.LocalAddr()},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteBatch([]transport.Message{{Buf: packet(1, []int32{10, 20, 30}, true), Addr: sw.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*transport.Conn{a, b} {
		ms := []transport.Message{{Buf: make([]byte, transport.MaxDatagram)}}
		n, err := c.ReadBatch(ms, time.Now().Add(30*time.Second))
		if err != nil || n != 1 {
			t.Fatalf("%v: no result (%v)", c.LocalAddr(), err)
		}
		rh, payload, err := wire.Parse(ms[0].Buf)
		if err != nil || !rh.Tagged || !tg.VerifyResult(ms[0].Buf, 0) {
			t.Fatalf("%v: result %+v (%v) without the job's tag", c.LocalAddr(), rh, err)
		}
		got := make([]int32, 3)
		wire.ReadPayload(got, payload)
		if got[0] != 11 || got[1] != 22 || got[2] != 33 {
			t.Fatalf("%v: sum %v, want [11 22 33]", c.LocalAddr(), got)
		}
	}
	proc.mu.Lock()
	bad := p.Counter(switchjob.StatDropBadTag)
	proc.mu.Unlock()
	if bad != 1 {
		t.Fatalf("drop_bad_tag = %d, want 1", bad)
	}
}
