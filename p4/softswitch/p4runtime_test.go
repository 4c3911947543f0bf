package softswitch

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
)

const testDevice = 7

type harness struct {
	t      *testing.T
	target *fakeTarget
	srv    *P4Runtime
	conn   *grpc.ClientConn
	client p4v1.P4RuntimeClient
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	target := newFakeTarget(16, 4)
	h := harnessOn(t, target)
	h.target = target
	return h
}

// harnessOn serves a P4Runtime service for target over an in-memory
// connection until the test ends.
func harnessOn(t *testing.T, target Target) *harness {
	t.Helper()
	srv, err := NewP4Runtime(P4RuntimeConfig{DeviceID: testDevice, Target: target, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &harness{t: t, srv: srv, conn: conn, client: p4v1.NewP4RuntimeClient(conn)}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// arbitrate opens a stream, sends an arbitration update and returns the
// stream with the answer.
func (h *harness) arbitrate(ctx context.Context, device uint64, election uint64) (p4v1.P4Runtime_StreamChannelClient, *p4v1.MasterArbitrationUpdate, error) {
	st, err := h.client.StreamChannel(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
		DeviceId: device, ElectionId: &p4v1.Uint128{Low: election}}}}); err != nil {
		return nil, nil, err
	}
	m, err := st.Recv()
	if err != nil {
		return st, nil, err
	}
	return st, m.GetArbitration(), nil
}

// primary makes a primary controller with the given election id and pushes
// the embedded P4Info.
func (h *harness) primary(ctx context.Context, election uint64) p4v1.P4Runtime_StreamChannelClient {
	h.t.Helper()
	st, upd, err := h.arbitrate(ctx, testDevice, election)
	if err != nil {
		h.t.Fatal(err)
	}
	if upd.GetStatus().GetCode() != int32(codes.OK) {
		h.t.Fatalf("arbitration status %v, want OK", upd.GetStatus())
	}
	info, _ := p4info.Load()
	_, err = h.client.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
		DeviceId: testDevice, ElectionId: &p4v1.Uint128{Low: election},
		Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
		Config: &p4v1.ForwardingPipelineConfig{P4Info: info, Cookie: &p4v1.ForwardingPipelineConfig_Cookie{Cookie: 42}},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) write(ctx context.Context, election uint64, ups ...*p4v1.Update) error {
	_, err := h.client.Write(ctx, &p4v1.WriteRequest{DeviceId: testDevice, ElectionId: &p4v1.Uint128{Low: election}, Updates: ups})
	return err
}

func (h *harness) read(ctx context.Context, ents ...*p4v1.Entity) ([]*p4v1.Entity, error) {
	rc, err := h.client.Read(ctx, &p4v1.ReadRequest{DeviceId: testDevice, Entities: ents})
	if err != nil {
		return nil, err
	}
	var out []*p4v1.Entity
	for {
		r, err := rc.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r.GetEntities()...)
	}
}

func workerUpdate(typ p4v1.Update_Type, ip [4]byte, port uint16, rank uint64) *p4v1.Update {
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{
		TableId: p4info.TableWorkersID,
		Match:   p4info.WorkerKey(binary.BigEndian.Uint32(ip[:]), port),
		Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{
			ActionId: p4info.ActionSetWorkerID,
			Params: []*p4v1.Action_Param{
				p4info.Param(p4info.SetWorkerJobID, 5), p4info.Param(p4info.SetWorkerRank, rank), p4info.Param(p4info.SetWorkerNumWorkers, 2),
				p4info.Param(p4info.SetWorkerMgid, 9), p4info.Param(p4info.SetWorkerLane, 1), p4info.Param(p4info.SetWorkerPoolBase, 4), p4info.Param(p4info.SetWorkerPoolSize, 8),
			},
		}}},
	}}}}
}

// p4Errors extracts the per-update p4.v1.Error codes of a batch failure.
func p4Errors(t *testing.T, err error) []codes.Code {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unknown {
		t.Fatalf("batch error = %v, want UNKNOWN with details", err)
	}
	var out []codes.Code
	for _, d := range st.Details() {
		pe, ok := d.(*p4v1.Error)
		if !ok {
			t.Fatalf("detail %T is not p4.v1.Error", d)
		}
		out = append(out, codes.Code(pe.GetCanonicalCode()))
	}
	return out
}

func wantCode(t *testing.T, err error, code codes.Code, substr string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error = %v, want %v", err, code)
	}
	if substr != "" && !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %q does not mention %q", err, substr)
	}
}

func TestArbitrationPrimaryAndBackup(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	high := h.primary(ctx, 10)

	low, upd, err := h.arbitrate(ctx, testDevice, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := codes.Code(upd.GetStatus().GetCode()); got != codes.AlreadyExists {
		t.Errorf("backup status = %v, want ALREADY_EXISTS", got)
	}
	if upd.GetElectionId().GetLow() != 10 {
		t.Errorf("backup told election id %v, want the primary's 10", upd.GetElectionId())
	}
	err = h.write(ctx, 3, workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 1}, 5000, 0))
	wantCode(t, err, codes.PermissionDenied, "primary")
	if len(h.target.workers) != 0 {
		t.Fatal("backup's write reached the target")
	}
	if err := h.write(ctx, 10, workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 1}, 5000, 0)); err != nil {
		t.Fatalf("primary write: %v", err)
	}

	// The same election id twice in one role is refused.
	dup, _, err := h.arbitrate(ctx, testDevice, 10)
	if err == nil {
		_, err = dup.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, "already used")

	// An unknown device ends the stream with NOT_FOUND.
	_, _, err = h.arbitrate(ctx, testDevice+1, 50)
	wantCode(t, err, codes.NotFound, "device")

	// When the primary goes away the backup hears there is no primary, and
	// its lower id does not make it primary.
	if err := high.CloseSend(); err != nil {
		t.Fatal(err)
	}
	m, err := low.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := codes.Code(m.GetArbitration().GetStatus().GetCode()); got != codes.NotFound {
		t.Errorf("after primary left, backup status = %v, want NOT_FOUND", got)
	}
	wantCode(t, h.write(ctx, 3, workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 2}, 5000, 0)), codes.PermissionDenied, "")

	// A higher id takes over; the old backup is notified with ALREADY_EXISTS.
	_, upd, err = h.arbitrate(ctx, testDevice, 11)
	if err != nil || codes.Code(upd.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("new primary: %v %v", upd, err)
	}
	m, err = low.Recv()
	if err != nil || codes.Code(m.GetArbitration().GetStatus().GetCode()) != codes.AlreadyExists {
		t.Fatalf("backup notification = %v, %v; want ALREADY_EXISTS", m, err)
	}
	if err := h.write(ctx, 11, workerUpdate(p4v1.Update_INSERT, [4]byte{10, 0, 0, 2}, 5000, 1)); err != nil {
		t.Fatalf("new primary write: %v", err)
	}
}

func TestWriteBeforeConfigAndUnknownDevice(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	if _, upd, err := h.arbitrate(ctx, testDevice, 1); err != nil || upd.GetStatus().GetCode() != 0 {
		t.Fatal(upd, err)
	}
	wantCode(t, h.write(ctx, 1, workerUpdate(p4v1.Update_INSERT, [4]byte{1, 2, 3, 4}, 1, 0)), codes.FailedPrecondition, "SetForwardingPipelineConfig")
	_, err := h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}})
	wantCode(t, err, codes.FailedPrecondition, "")
	_, err = h.client.Write(ctx, &p4v1.WriteRequest{DeviceId: 99, ElectionId: &p4v1.Uint128{Low: 1}})
	wantCode(t, err, codes.NotFound, "device")
}

func TestPipelineConfig(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	h.primary(ctx, 1)
	set := func(action p4v1.SetForwardingPipelineConfigRequest_Action, cfg *p4v1.ForwardingPipelineConfig) error {
		_, err := h.client.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
			DeviceId: testDevice, ElectionId: &p4v1.Uint128{Low: 1}, Action: action, Config: cfg})
		return err
	}
	info, _ := p4info.Load()

	renamed, _ := p4info.Load()
	renamed.Tables[0].Preamble.Name = "SwitchMLIngress.peers"
	wantCode(t, set(p4v1.SetForwardingPipelineConfigRequest_VERIFY, &p4v1.ForwardingPipelineConfig{P4Info: renamed}),
		codes.InvalidArgument, "SwitchMLIngress.workers")
	narrow, _ := p4info.Load()
	narrow.Actions[1].Params[1].Bitwidth = 8
	wantCode(t, set(p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT, &p4v1.ForwardingPipelineConfig{P4Info: narrow}),
		codes.InvalidArgument, "rank")
	// The switch sizes its registers from its own configuration, and runs
	// the pipeline whatever architecture a compiler named.
	resized, _ := p4info.Load()
	resized.Registers[0].Size = 16
	resized.PkgInfo.Arch = "psa"
	if err := set(p4v1.SetForwardingPipelineConfigRequest_VERIFY, &p4v1.ForwardingPipelineConfig{P4Info: resized}); err != nil {
		t.Errorf("P4Info with other register sizes and architecture refused: %v", err)
	}
	metered, _ := p4info.Load()
	metered.Meters = append(metered.Meters, &p4configv1.Meter{Preamble: &p4configv1.Preamble{Id: 0x15000001, Name: "m"}})
	wantCode(t, set(p4v1.SetForwardingPipelineConfigRequest_VERIFY, &p4v1.ForwardingPipelineConfig{P4Info: metered}),
		codes.InvalidArgument, "meters")
	wantCode(t, set(p4v1.SetForwardingPipelineConfigRequest_VERIFY, nil), codes.InvalidArgument, "")
	wantCode(t, set(p4v1.SetForwardingPipelineConfigRequest_COMMIT, nil), codes.NotFound, "VERIFY_AND_SAVE")

	// Entries survive RECONCILE_AND_COMMIT and COMMIT, not VERIFY_AND_COMMIT.
	if err := h.write(ctx, 1, workerUpdate(p4v1.Update_INSERT, [4]byte{1, 2, 3, 4}, 1, 0)); err != nil {
		t.Fatal(err)
	}
	cfg := &p4v1.ForwardingPipelineConfig{P4Info: info, P4DeviceConfig: []byte("blob"), Cookie: &p4v1.ForwardingPipelineConfig_Cookie{Cookie: 77}}
	if err := set(p4v1.SetForwardingPipelineConfigRequest_RECONCILE_AND_COMMIT, cfg); err != nil {
		t.Fatal(err)
	}
	if err := set(p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_SAVE, cfg); err != nil {
		t.Fatal(err)
	}
	if err := set(p4v1.SetForwardingPipelineConfigRequest_COMMIT, nil); err != nil {
		t.Fatal(err)
	}
	if len(h.target.workers) != 1 {
		t.Fatalf("workers after reconcile/commit = %d, want 1", len(h.target.workers))
	}
	got, err := h.client.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: testDevice})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetConfig().GetCookie().GetCookie() != 77 || string(got.GetConfig().GetP4DeviceConfig()) != "blob" ||
		!proto.Equal(got.GetConfig().GetP4Info(), info) {
		t.Errorf("GetForwardingPipelineConfig = cookie %v, device config %q", got.GetConfig().GetCookie(), got.GetConfig().GetP4DeviceConfig())
	}
	h.target.regs[p4info.RegisterPoolCount][3] = 9
	if err := set(p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT, cfg); err != nil {
		t.Fatal(err)
	}
	if len(h.target.workers) != 0 || h.target.regs[p4info.RegisterPoolCount][3] != 0 {
		t.Fatal("VERIFY_AND_COMMIT kept the forwarding state")
	}
}

func TestTableEntriesRoundTripAndErrors(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	h.primary(ctx, 1)
	ins := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 1, 2, 3}, 40000, 1)
	//lint:ignore SA1019 the old field must still round-trip
	ins.GetEntity().GetTableEntry().ControllerMetadata = 1234
	reply := &p4v1.Update{Type: p4v1.Update_INSERT, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{
		TableId: p4info.TableReplyAddressID,
		Match:   []*p4v1.FieldMatch{p4info.Exact(p4info.ReplyJobID, 5), p4info.Exact(p4info.ReplyRankID, 1), p4info.Exact(p4info.ReplyLaneID, 1)},
		Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: p4info.ActionSetReplyID, Params: []*p4v1.Action_Param{
			// MAC with leading zero bytes: accepted in any length, read back canonical.
			{ParamId: p4info.SetReplyDstMAC, Value: []byte{0, 0, 0, 0, 0xbe, 0xef}},
			p4info.Param(p4info.SetReplyDstIPv4, 0x0a010203), p4info.Param(p4info.SetReplyDstPort, 40000),
		}}}},
	}}}}
	if err := h.write(ctx, 1, ins, reply); err != nil {
		t.Fatal(err)
	}
	k := netip.MustParseAddrPort("10.1.2.3:40000")
	if w := h.target.workers[k]; w != (Worker{JobID: 5, Rank: 1, NumWorkers: 2, MulticastGroup: 9, Lane: 1, PoolBase: 4, PoolSize: 8}) {
		t.Fatalf("target worker = %+v", w)
	}
	if r := h.target.replies[ReplyKey{JobID: 5, Rank: 1, Lane: 1}]; r.Addr != k || r.MAC != [6]byte{0, 0, 0, 0, 0xbe, 0xef} {
		t.Fatalf("target reply = %+v", r)
	}
	ents, err := h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Fatalf("read %d entries, want 2", len(ents))
	}
	if !proto.Equal(ents[0].GetTableEntry(), ins.GetEntity().GetTableEntry()) {
		t.Errorf("worker entry read back as %v, wrote %v", ents[0], ins.GetEntity())
	}
	if got := ents[1].GetTableEntry().GetAction().GetAction().GetParams()[0].GetValue(); string(got) != "\xbe\xef" {
		t.Errorf("MAC read back as %x, want canonical beef", got)
	}

	// Duplicates, missing entries, malformed entries in one batch: each
	// update has its own p4.v1.Error, in order.
	missingField := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 1, 0)
	missingField.GetEntity().GetTableEntry().Match = missingField.GetEntity().GetTableEntry().Match[:1]
	wide := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 2, 0)
	wide.GetEntity().GetTableEntry().Match[1] = &p4v1.FieldMatch{FieldId: p4info.WorkersSrcPortID,
		FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: []byte{1, 0, 0}}}}
	badParam := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 3, 0)
	badParam.GetEntity().GetTableEntry().GetAction().GetAction().Params[0].ParamId = 99
	lessParams := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 4, 0)
	lessParams.GetEntity().GetTableEntry().GetAction().GetAction().Params = lessParams.GetEntity().GetTableEntry().GetAction().GetAction().Params[1:]
	wrongAction := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 5, 0)
	wrongAction.GetEntity().GetTableEntry().GetAction().GetAction().ActionId = p4info.ActionSetReplyID
	dropAsEntry := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 6, 0)
	dropAsEntry.GetEntity().GetTableEntry().GetAction().GetAction().ActionId = p4info.ActionDropID
	dropAsEntry.GetEntity().GetTableEntry().GetAction().GetAction().Params = nil
	unknownTable := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 7, 0)
	unknownTable.GetEntity().GetTableEntry().TableId = 0x02000099
	good := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 9, 9, 9}, 8, 0)
	err = h.write(ctx, 1,
		workerUpdate(p4v1.Update_INSERT, [4]byte{10, 1, 2, 3}, 40000, 1), // duplicate
		workerUpdate(p4v1.Update_DELETE, [4]byte{10, 1, 2, 4}, 40000, 1), // missing
		workerUpdate(p4v1.Update_MODIFY, [4]byte{10, 1, 2, 4}, 40000, 1), // missing
		missingField, wide, badParam, lessParams, wrongAction, dropAsEntry, unknownTable, good,
		&p4v1.Update{Type: p4v1.Update_INSERT, Entity: &p4v1.Entity{Entity: &p4v1.Entity_MeterEntry{MeterEntry: &p4v1.MeterEntry{}}}},
		&p4v1.Update{Type: p4v1.Update_INSERT},
	)
	got := p4Errors(t, err)
	want := []codes.Code{codes.AlreadyExists, codes.NotFound, codes.NotFound, codes.InvalidArgument, codes.OutOfRange,
		codes.InvalidArgument, codes.InvalidArgument, codes.InvalidArgument, codes.PermissionDenied, codes.NotFound, codes.OK,
		codes.Unimplemented, codes.InvalidArgument}
	if !slicesEqual(got, want) {
		t.Fatalf("batch codes = %v\nwant          %v", got, want)
	}
	if _, ok := h.target.workers[netip.MustParseAddrPort("10.9.9.9:8")]; !ok {
		t.Error("the valid update of a failing batch was not applied")
	}

	// Default entry is const.
	def := &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{
		TableId: p4info.TableWorkersID, IsDefaultAction: true}}}}
	if got := p4Errors(t, h.write(ctx, 1, def)); got[0] != codes.PermissionDenied {
		t.Errorf("modify const default = %v, want PERMISSION_DENIED", got)
	}

	// Read one entry by key; delete; read again.
	q := workerUpdate(p4v1.Update_INSERT, [4]byte{10, 1, 2, 3}, 40000, 0).GetEntity().GetTableEntry()
	q.Action = nil
	ents, err = h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: q}})
	if err != nil || len(ents) != 1 {
		t.Fatalf("read by key: %d entries, %v", len(ents), err)
	}
	if err := h.write(ctx, 1, workerUpdate(p4v1.Update_DELETE, [4]byte{10, 1, 2, 3}, 40000, 0)); err != nil {
		t.Fatal(err)
	}
	ents, err = h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: q}})
	if err != nil || len(ents) != 0 {
		t.Fatalf("read deleted entry: %d entries, %v", len(ents), err)
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func groupUpdate(typ p4v1.Update_Type, id uint32, ranks ...uint32) *p4v1.Update {
	mg := &p4v1.MulticastGroupEntry{MulticastGroupId: id}
	for _, r := range ranks {
		//lint:ignore SA1019 the field the controller writes
		mg.Replicas = append(mg.Replicas, &p4v1.Replica{PortKind: &p4v1.Replica_EgressPort{EgressPort: 1}, Instance: r})
	}
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{
		PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: mg}}}}}
}

func TestMulticastGroups(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	h.primary(ctx, 1)
	if err := h.write(ctx, 1, groupUpdate(p4v1.Update_INSERT, 3, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	got := p4Errors(t, h.write(ctx, 1,
		groupUpdate(p4v1.Update_INSERT, 3, 0),
		groupUpdate(p4v1.Update_INSERT, 0, 0),
		groupUpdate(p4v1.Update_INSERT, 4, 1, 1),
		groupUpdate(p4v1.Update_DELETE, 5),
		groupUpdate(p4v1.Update_MODIFY, 3, 0, 1),
	))
	want := []codes.Code{codes.AlreadyExists, codes.InvalidArgument, codes.InvalidArgument, codes.NotFound, codes.OK}
	if !slicesEqual(got, want) {
		t.Fatalf("codes = %v, want %v", got, want)
	}
	ents, err := h.read(ctx, groupUpdate(0, 0).GetEntity())
	if err != nil || len(ents) != 1 {
		t.Fatalf("wildcard group read: %v, %v", ents, err)
	}
	if !proto.Equal(ents[0], groupUpdate(0, 3, 0, 1).GetEntity()) {
		t.Errorf("group read back as %v", ents[0])
	}
}

func registerUpdate(id uint32, index *p4v1.Index, value []byte) *p4v1.Update {
	return &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
		RegisterId: id, Index: index, Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: value}}}}}}
}

func TestRegistersAndCounters(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	h.primary(ctx, 1)
	for i := range h.target.regs[p4info.RegisterPoolBitmap] {
		h.target.regs[p4info.RegisterPoolBitmap][i] = 3
	}
	err := h.write(ctx, 1,
		registerUpdate(p4info.RegisterPoolBitmapID, nil, []byte{0}),                         // wildcard: all cells
		registerUpdate(p4info.RegisterPoolBitmapID, &p4v1.Index{Index: 5}, []byte{0x80, 0}), // one cell
		registerUpdate(p4info.RegisterPoolExponentID, &p4v1.Index{Index: 2}, []byte{0xf6}),  // int8 -10
	)
	if err != nil {
		t.Fatal(err)
	}
	bm := h.target.regs[p4info.RegisterPoolBitmap]
	if bm[0] != 0 || bm[len(bm)-1] != 0 || bm[5] != 0x8000 {
		t.Fatalf("bitmap after writes = %v", bm)
	}
	if h.target.regs[p4info.RegisterPoolExponent][2] != -10 {
		t.Fatalf("exponent = %d, want -10", h.target.regs[p4info.RegisterPoolExponent][2])
	}
	got := p4Errors(t, h.write(ctx, 1,
		registerUpdate(p4info.RegisterPoolCountID, &p4v1.Index{Index: 32}, []byte{1}), // 2*16 slots: out of range
		registerUpdate(p4info.RegisterPoolCountID, &p4v1.Index{Index: 0}, []byte{1, 0, 0}),
		registerUpdate(p4info.RegisterPoolExponentID, &p4v1.Index{Index: 0}, []byte{0, 0x80}), // 128 > int8
		registerUpdate(0x16000099, &p4v1.Index{Index: 0}, []byte{1}),
		&p4v1.Update{Type: p4v1.Update_INSERT, Entity: registerUpdate(p4info.RegisterPoolCountID, nil, []byte{1}).GetEntity()},
	))
	want := []codes.Code{codes.OutOfRange, codes.OutOfRange, codes.OutOfRange, codes.NotFound, codes.InvalidArgument}
	if !slicesEqual(got, want) {
		t.Fatalf("codes = %v, want %v", got, want)
	}
	ents, err := h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
		RegisterId: p4info.RegisterPoolExponentID, Index: &p4v1.Index{Index: 2}}}})
	if err != nil || len(ents) != 1 || string(ents[0].GetRegisterEntry().GetData().GetBitstring()) != "\xf6" {
		t.Fatalf("exponent read = %v, %v", ents, err)
	}
	ents, err = h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{}}})
	if err != nil || len(ents) != 3*32+32*4 {
		t.Fatalf("wildcard register read: %d entities, %v", len(ents), err)
	}

	// Counters: read, reset one, reset all.
	h.target.counters[0], h.target.counters[4] = 100, 7
	readStats := func() []int64 {
		ents, err := h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: p4info.CounterStatsID}}})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int64, len(ents))
		for i, e := range ents {
			out[e.GetCounterEntry().GetIndex().GetIndex()] = e.GetCounterEntry().GetData().GetPacketCount()
			_ = i
		}
		return out
	}
	if s := readStats(); len(s) != p4info.StatsSize || s[0] != 100 || s[4] != 7 {
		t.Fatalf("stats = %v", s)
	}
	reset := func(idx *p4v1.Index) error {
		return h.write(ctx, 1, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
			CounterId: p4info.CounterStatsID, Index: idx, Data: &p4v1.CounterData{}}}}})
	}
	if err := reset(&p4v1.Index{Index: 4}); err != nil {
		t.Fatal(err)
	}
	h.target.counters[4] += 2
	if s := readStats(); s[0] != 100 || s[4] != 2 {
		t.Fatalf("after reset of index 4: stats = %v", s[:9])
	}
	if err := reset(nil); err != nil {
		t.Fatal(err)
	}
	if s := readStats(); s[0] != 0 || s[4] != 0 {
		t.Fatalf("after reset of all: stats = %v", s[:9])
	}
}

func TestUnsupportedAndCapabilities(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	st := h.primary(ctx, 1)
	_, err := h.read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_DigestEntry{DigestEntry: &p4v1.DigestEntry{}}})
	if got := p4Errors(t, err); len(got) != 1 || got[0] != codes.Unimplemented {
		t.Fatalf("digest read = %v", got)
	}
	_, err = h.client.Write(ctx, &p4v1.WriteRequest{DeviceId: testDevice, ElectionId: &p4v1.Uint128{Low: 1}, Atomicity: p4v1.WriteRequest_DATAPLANE_ATOMIC})
	wantCode(t, err, codes.Unimplemented, "atomicity")
	caps, err := h.client.Capabilities(ctx, &p4v1.CapabilitiesRequest{})
	if err != nil || caps.GetP4RuntimeApiVersion() != APIVersion {
		t.Fatalf("capabilities = %v, %v", caps, err)
	}
	if err := st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Packet{Packet: &p4v1.PacketOut{Payload: []byte{1}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || codes.Code(m.GetError().GetCanonicalCode()) != codes.Unimplemented || m.GetError().GetPacketOut() == nil {
		t.Fatalf("packet-out answer = %v, %v", m, err)
	}
}
