package softswitch

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/dataplane"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServerEndToEnd programs a real pipeline over P4Runtime on a TCP
// listener and aggregates one slot from two UDP "workers" through the
// data plane loop the switch command runs (p4/dataplane).
func TestServerEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := NewServer(ServerConfig{DeviceID: testDevice, Pipeline: pipeline.Config{Slots: 64, MaxElements: 64, MaxWorkers: 32},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p4done := make(chan error, 1)
	go func() { p4done <- srv.ServeP4Runtime(ctx, lis) }()
	dp, err := transport.Listen("127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	dpdone := make(chan error, 1)
	go func() { dpdone <- dataplane.Serve(ctx, dp, srv, nil, nil) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := &harness{t: t, conn: conn, client: p4v1.NewP4RuntimeClient(conn)}
	h.primary(ctx, 1)

	var workers [2]*net.UDPConn
	var ups []*p4v1.Update
	for r := range workers {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		workers[r] = c
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		wu := workerUpdate(p4v1.Update_INSERT, [4]byte{127, 0, 0, 1}, port, uint64(r))
		// workerUpdate's entry: job 5, n=2, mgid 9, lane 1, pool [4, 12).
		ups = append(ups, wu, &p4v1.Update{Type: p4v1.Update_INSERT, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{
			TableId: p4info.TableReplyAddressID,
			Match:   []*p4v1.FieldMatch{p4info.Exact(p4info.ReplyJobID, 5), p4info.Exact(p4info.ReplyRankID, uint64(r)), p4info.Exact(p4info.ReplyLaneID, 1)},
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: p4info.ActionSetReplyID, Params: []*p4v1.Action_Param{
				p4info.Param(p4info.SetReplyDstMAC, 0), p4info.Param(p4info.SetReplyDstIPv4, 0x7f000001), p4info.Param(p4info.SetReplyDstPort, uint64(port)),
			}}}},
		}}}})
	}
	ups = append(ups, groupUpdate(p4v1.Update_INSERT, 9, 0, 1))
	if err := h.write(ctx, 1, ups...); err != nil {
		t.Fatal(err)
	}

	send := func(r int, v int32) {
		hd := wire.Header{Format: wire.FormatCompat, Seq: 1, PacketID: 77, Set: 0, Slot: 6, Exp0: 3, Elements: 64}
		pkt, err := hd.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 64; i++ {
			pkt = binary.BigEndian.AppendUint32(pkt, uint32(v+int32(i)))
		}
		if _, err := workers[r].WriteToUDPAddrPort(pkt, dp.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 10)
	send(1, -3)
	for r, c := range workers {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("worker %d got no result: %v", r, err)
		}
		hd, payload, err := wire.Parse(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if hd.Slot != 6 || hd.PacketID != 77 || hd.Elements != 64 {
			t.Fatalf("worker %d reply header %+v", r, hd)
		}
		for i := 0; i < 64; i++ {
			if got := int32(binary.BigEndian.Uint32(payload[4*i:])); got != 7+2*int32(i) {
				t.Fatalf("worker %d element %d = %d, want %d", r, i, got, 7+2*i)
			}
		}
	}

	// The controller's view of the registers and counters agrees.
	ents, err := h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
		RegisterId: p4info.RegisterPoolBitmapID, Index: &p4v1.Index{Index: 6}}}})
	if err != nil || len(ents) != 1 || string(ents[0].GetRegisterEntry().GetData().GetBitstring()) != "\x03" {
		t.Fatalf("bitmap of slot 6 set 0 = %v, %v; want ranks 0 and 1", ents, err)
	}
	ents, err = h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
		CounterId: p4info.CounterStatsID, Index: &p4v1.Index{Index: int64(switchjob.StatMulticast)}}}})
	if err != nil || len(ents) != 1 || ents[0].GetCounterEntry().GetData().GetPacketCount() != 1 {
		t.Fatalf("multicast counter = %v, %v; want 1", ents, err)
	}
	// Reset through P4Runtime, as the controller does for a new job.
	if err := h.write(ctx, 1, registerUpdate(p4info.RegisterPoolBitmapID, &p4v1.Index{Index: 6}, []byte{0})); err != nil {
		t.Fatal(err)
	}
	if c := srv.Counters(); c[switchjob.StatReceived] != 2 {
		t.Errorf("received counter = %d, want 2", c[switchjob.StatReceived])
	}

	cancel()
	if err := <-dpdone; err != nil {
		t.Errorf("data plane: %v", err)
	}
	if err := <-p4done; err != nil {
		t.Errorf("ServeP4Runtime: %v", err)
	}
}
