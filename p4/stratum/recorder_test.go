package stratum_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/p4info/shape"
	"github.com/switchml/switchml-go/p4/stratum"
	_ "github.com/switchml/switchml-go/p4/tna" // the Tofino P4Info extension messages
)

// recorder is a P4Runtime server that serves the P4Info bf-p4c writes for
// the TNA program, records every message a controller sends, and refuses
// what stratum_bfrt refuses. Each rule names the function of Stratum's
// source (github.com/stratum/stratum, stratum/hal/lib/common/ and
// stratum/hal/lib/barefoot/) it follows; docs/tofino.md lists them.
//
// It is Stratum with one node, whose id (the chassis config's
// nodes { id }) is recorderNode: every request must name that device, the
// stream's arbitration must carry a non-zero election id, and only the
// primary's connection, with the primary's election id, may push a
// pipeline or write (P4Service in p4_service.cc). P4Info ids reach BF
// Runtime objects through the mapping BfrtIdMapper builds from the
// pushed bfrt.json (bfrtMapping).
type recorder struct {
	p4v1.UnimplementedP4RuntimeServer
	info  *p4configv1.P4Info
	model *shape.Model
	names map[uint32]string // id -> name of tables, actions, registers, counters

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every accepted write
	streams  map[int]*arbiter
	nextConn int
	pipeline *p4v1.ForwardingPipelineConfig
	// mapped takes a P4Info id to the BF Runtime object Stratum maps it
	// to, for the pushed pipeline (nil before a push).
	mapped  map[uint32]*bfrtTable
	pushes  []*p4v1.SetForwardingPipelineConfigRequest
	writes  []*p4v1.WriteRequest
	refused []refusal
	entries map[string]*p4v1.TableEntry // by table id and match
	groups  map[uint32][]*p4v1.Replica
}

// newRecorder serves the P4Info text (tna.P4InfoText or
// tna.P4InfoTofino2Text).
func newRecorder(t *testing.T, p4infoText []byte) *recorder {
	t.Helper()
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(p4infoText, info); err != nil {
		t.Fatal(err)
	}
	m, err := shape.FromP4Info(info)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{info: info, model: m, names: map[uint32]string{}, changed: make(chan struct{}), streams: map[int]*arbiter{},
		entries: map[string]*p4v1.TableEntry{}, groups: map[uint32][]*p4v1.Replica{}}
	for n, x := range m.Tables {
		r.names[x.ID] = n
	}
	for n, x := range m.Actions {
		r.names[x.ID] = n
	}
	for n, x := range m.Registers {
		r.names[x.ID] = n
	}
	for n, x := range m.Counters {
		r.names[x.ID] = n
	}
	return r
}

// serve starts r on a loopback TCP port and returns its address.
func (r *recorder) serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	p4v1.RegisterP4RuntimeServer(g, r)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// id is the id the compiler's P4Info gives the object named name.
func (r *recorder) id(t *testing.T, name string) uint32 {
	t.Helper()
	for id, n := range r.names {
		if n == name {
			return id
		}
	}
	t.Fatalf("the P4Info has no %s", name)
	return 0
}

// StreamChannel arbitrates as P4Service::StreamChannel does: the device id
// must be non-zero, stay the same on the stream and name the node
// (RegisterPacketReceiveWriter fails for another), and the election id
// must be non-zero. The highest election id is primary; the answer says
// whether the caller is.
func (r *recorder) StreamChannel(st p4v1.P4Runtime_StreamChannelServer) error {
	r.mu.Lock()
	conn := r.nextConn
	r.nextConn++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.streams, conn)
		r.mu.Unlock()
	}()
	var node uint64
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		a := m.GetArbitration()
		if a == nil {
			return status.Error(codes.InvalidArgument, "Need to specify either arbitration or packet.")
		}
		switch {
		case a.GetDeviceId() == 0:
			return status.Error(codes.InvalidArgument, "Invalid node (aka device) ID.")
		case node != 0 && a.GetDeviceId() != node:
			return status.Errorf(codes.InvalidArgument, "Node (aka device) ID for this stream has changed. Was %d, now is %d.", node, a.GetDeviceId())
		case a.GetDeviceId() != recorderNode:
			return status.Errorf(codes.InvalidArgument, "Node with ID %d is unknown.", a.GetDeviceId())
		case a.GetElectionId().GetHigh() == 0 && a.GetElectionId().GetLow() == 0:
			return status.Error(codes.InvalidArgument, "Invalid election ID.")
		}
		node = a.GetDeviceId()
		peer, _ := peer.FromContext(st.Context())
		r.mu.Lock()
		r.streams[conn] = &arbiter{election: a.GetElectionId(), peer: peer.Addr.String()}
		primary := r.primaryLocked()
		r.mu.Unlock()
		code, msg := codes.OK, "primary"
		if primary.election != a.GetElectionId() {
			code, msg = codes.AlreadyExists, "backup"
		}
		resp := &p4v1.MasterArbitrationUpdate{DeviceId: node, ElectionId: primary.election, Role: a.GetRole(), Status: status.New(code, msg).Proto()}
		if err := st.Send(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: resp}}); err != nil {
			return err
		}
	}
}

// recorderNode is the node id of the recorder's one node.
const recorderNode = 1

// arbiter is one stream's arbitration: its election id and the
// connection it came from.
type arbiter struct {
	election *p4v1.Uint128
	peer     string
}

func less128(a, b *p4v1.Uint128) bool {
	return a.GetHigh() < b.GetHigh() || a.GetHigh() == b.GetHigh() && a.GetLow() < b.GetLow()
}

// primaryLocked is the stream with the highest election id (nil when no
// stream has arbitrated). r.mu is held.
func (r *recorder) primaryLocked() *arbiter {
	var best *arbiter
	for _, a := range r.streams {
		if best == nil || less128(best.election, a.election) {
			best = a
		}
	}
	return best
}

// permit refuses a request Stratum's P4Service refuses before it reaches
// the switch: device id zero or another node, election id zero (for
// writes), and a write that does not come from the primary's connection
// with its election id (IsWritePermitted). what names the RPC, for the
// messages.
func (r *recorder) permit(ctx context.Context, device uint64, election *p4v1.Uint128, write bool, what string) error {
	if device == 0 {
		return status.Error(codes.InvalidArgument, "Invalid device ID.")
	}
	if device != recorderNode {
		return status.Errorf(codes.InvalidArgument, "Node with ID %d is unknown.", device)
	}
	if !write {
		return nil
	}
	if election.GetHigh() == 0 && election.GetLow() == 0 {
		return status.Error(codes.InvalidArgument, "Invalid election ID.")
	}
	p, _ := peer.FromContext(ctx)
	r.mu.Lock()
	primary := r.primaryLocked()
	r.mu.Unlock()
	if primary == nil || !proto.Equal(primary.election, election) || p == nil || primary.peer != p.Addr.String() {
		return status.Errorf(codes.PermissionDenied, "%s from non-master is not permitted.", what)
	}
	return nil
}

// SetForwardingPipelineConfig takes the config as stratum_bfrt does: the
// device config must parse as a BfPipelineConfig (ExtractBfPipelineConfig,
// bf_pipeline_utils.cc; PI's older packing is refused), each profile with
// its context, binary and pipes (the SDE loads a pipeline on the pipes of
// its scope, BfSdeWrapper::AddDevice); the P4Info must be the compiler's.
func (r *recorder) SetForwardingPipelineConfig(ctx context.Context, req *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	if err := r.permit(ctx, req.GetDeviceId(), req.GetElectionId(), true, "SetForwardingPipelineConfig"); err != nil {
		return nil, err
	}
	cfg, err := stratum.Unpack(req.GetConfig().GetP4DeviceConfig())
	if err != nil || cfg.GetP4Name() == "" || len(cfg.GetBfruntimeInfo()) == 0 || len(cfg.GetProfiles()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "Unknown format for p4_device_config (%v)", err)
	}
	for _, p := range cfg.GetProfiles() {
		if p.GetProfileName() == "" || len(p.GetContext()) == 0 || len(p.GetBinary()) == 0 || len(p.GetPipeScope()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "profile %q lacks a name, context, binary or pipe scope", p.GetProfileName())
		}
		// BfrtIdMapper::BuildActionProfileMapping parses every context.json.
		if !json.Valid(p.GetContext()) {
			return nil, status.Errorf(codes.Internal, "Failed to parse context.json of profile %q", p.GetProfileName())
		}
	}
	if !proto.Equal(req.GetConfig().GetP4Info(), r.info) {
		return nil, status.Error(codes.InvalidArgument, "the P4Info is not the one bf-p4c wrote for this device config")
	}
	mapped, err := bfrtMapping(req.GetConfig().GetP4Info(), cfg.GetBfruntimeInfo())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushes = append(r.pushes, req)
	r.pipeline, r.mapped = req.GetConfig(), mapped
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

func (r *recorder) GetForwardingPipelineConfig(ctx context.Context, req *p4v1.GetForwardingPipelineConfigRequest) (*p4v1.GetForwardingPipelineConfigResponse, error) {
	if err := r.permit(ctx, req.GetDeviceId(), nil, false, "GetForwardingPipelineConfig"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pipeline == nil {
		return nil, status.Error(codes.FailedPrecondition, "No valid forwarding pipeline config has been pushed for any node so far.")
	}
	return &p4v1.GetForwardingPipelineConfigResponse{Config: r.pipeline}, nil
}

// Write applies a batch as P4Runtime asks: each update on its own, the
// failures reported per update in the status details.
func (r *recorder) Write(ctx context.Context, req *p4v1.WriteRequest) (*p4v1.WriteResponse, error) {
	if len(req.GetUpdates()) == 0 {
		return &p4v1.WriteResponse{}, nil
	}
	if err := r.permit(ctx, req.GetDeviceId(), req.GetElectionId(), true, "Write"); err != nil {
		r.mu.Lock()
		for _, u := range req.GetUpdates() {
			r.refused = append(r.refused, refusal{u, status.Code(err), err})
		}
		r.mu.Unlock()
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mapped == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "no pipeline has been pushed to node %d", recorderNode)
	}
	r.writes = append(r.writes, req)
	var details []*p4v1.Error
	failed := false
	for _, u := range req.GetUpdates() {
		err := r.apply(u)
		if err != nil {
			failed = true
			r.refused = append(r.refused, refusal{u, status.Code(err), err})
		}
		st := status.Convert(err)
		details = append(details, &p4v1.Error{CanonicalCode: int32(st.Code()), Message: st.Message()})
	}
	close(r.changed)
	r.changed = make(chan struct{})
	if !failed {
		return &p4v1.WriteResponse{}, nil
	}
	st := status.New(codes.Unknown, "some updates failed")
	for _, d := range details {
		if s, err := st.WithDetails(d); err == nil {
			st = s
		}
	}
	return nil, st.Err()
}

func (r *recorder) apply(u *p4v1.Update) error {
	e := u.GetEntity()
	switch {
	case e.GetTableEntry() != nil:
		return r.applyTable(u.GetType(), e.GetTableEntry())
	case e.GetRegisterEntry() != nil:
		return r.checkRegister(u.GetType(), e.GetRegisterEntry())
	case e.GetCounterEntry() != nil:
		return r.checkCounter(u.GetType(), e.GetCounterEntry())
	case e.GetPacketReplicationEngineEntry() != nil:
		return r.applyPRE(u.GetType(), e.GetPacketReplicationEngineEntry())
	}
	return status.Errorf(codes.Unimplemented, "unsupported entity %v", e)
}

// checkRegister follows BfrtTableManager::WriteRegisterEntry
// (bfrt_table_manager.cc): MODIFY only, with data, and the data a
// bitstring; the P4Info id must map to a BF Runtime register
// (BfrtIdMapper::GetBfRtId). BfSdeWrapper::WriteRegister (bf_sde_wrapper.cc)
// then writes it into the BF Runtime data field whose name ends in ".f1"
// (GetRegisterDataFieldId), padded to that field's width, and finds none
// in a register whose element has no f1. No index writes every index.
//
// Wider data than the field is refused here, where Stratum truncates it
// at the front (P4RuntimeByteStringToPaddedByteString): a controller that
// sends it has a bug the switch would hide by dropping the high bits.
func (r *recorder) checkRegister(typ p4v1.Update_Type, re *p4v1.RegisterEntry) error {
	if typ != p4v1.Update_MODIFY {
		return status.Errorf(codes.InvalidArgument, "Update type of RegisterEntry must be MODIFY, not %v", typ)
	}
	if re.GetData() == nil {
		return status.Error(codes.InvalidArgument, "RegisterEntry must have data.")
	}
	bs := re.GetData().GetBitstring()
	if bs == nil {
		return status.Error(codes.InvalidArgument, "Only bitstring registers data types are supported.")
	}
	reg, err := r.bfrtObject(re.GetRegisterId(), "Register")
	if err != nil {
		return err
	}
	f1 := reg.dataField(".f1")
	if f1 == nil {
		return status.Errorf(codes.Internal, "Could not find register data field id. (%s has no field ending in .f1)", reg.Name)
	}
	if _, err := p4info.Uint(bs, f1.width()); err != nil || len(bs) > (f1.width()+7)/8 {
		return status.Errorf(codes.InvalidArgument, "register %s: data 0x%x is not a bit<%d> value for %s", reg.Name, bs, f1.width(), f1.Singleton.Name)
	}
	if re.GetIndex() != nil && (re.GetIndex().GetIndex() < 0 || re.GetIndex().GetIndex() >= reg.Size) {
		return status.Errorf(codes.OutOfRange, "register %s: index %d outside 0..%d", reg.Name, re.GetIndex().GetIndex(), reg.Size-1)
	}
	return nil
}

// checkCounter follows BfrtCounterManager::WriteIndirectCounterEntry
// (bfrt_counter_manager.cc): MODIFY only, with an index of zero or more,
// of a P4Info counter mapped to a BF Runtime counter.
func (r *recorder) checkCounter(typ p4v1.Update_Type, ce *p4v1.CounterEntry) error {
	if typ != p4v1.Update_MODIFY {
		return status.Errorf(codes.InvalidArgument, "Update type of CounterEntry must be MODIFY, not %v", typ)
	}
	if ce.GetIndex() == nil {
		return status.Error(codes.InvalidArgument, "Modifying an indirect counter without counter index is currently not supported.")
	}
	c, err := r.bfrtObject(ce.GetCounterId(), "Counter")
	if err != nil {
		return err
	}
	if i := ce.GetIndex().GetIndex(); i < 0 || i >= c.Size {
		return status.Errorf(codes.OutOfRange, "counter %s: index %d outside 0..%d", c.Name, i, c.Size-1)
	}
	return nil
}

// bfrtObject is the BF Runtime object the P4Info id maps to, which must
// be of the given table_type.
func (r *recorder) bfrtObject(p4infoID uint32, kind string) (*bfrtTable, error) {
	t := r.mapped[p4infoID]
	if t == nil {
		return nil, status.Errorf(codes.Internal, "Unable to find bfrt id from p4info id: %d", p4infoID)
	}
	if t.Type != kind {
		return nil, status.Errorf(codes.InvalidArgument, "P4Info id %#x maps to BF Runtime %s %s (id %#x), not a %s", p4infoID, t.Type, t.Name, t.ID, kind)
	}
	return t, nil
}

// bfrtTable is what the recorder reads of one object of bfrt.json.
type bfrtTable struct {
	Name string      `json:"name"`
	ID   uint32      `json:"id"`
	Type string      `json:"table_type"`
	Size int64       `json:"size"`
	Data []bfrtField `json:"data"`
}

// bfrtField is one data field of a bfrt.json object.
type bfrtField struct {
	Singleton struct {
		Name string `json:"name"`
		Type struct {
			Width int `json:"width"`
		} `json:"type"`
	} `json:"singleton"`
}

func (f *bfrtField) width() int { return f.Singleton.Type.Width }

// dataField is the first data field whose name ends in suffix.
func (t *bfrtTable) dataField(suffix string) *bfrtField {
	for i := range t.Data {
		if strings.HasSuffix(t.Data[i].Singleton.Name, suffix) {
			return &t.Data[i]
		}
	}
	return nil
}

// bfrtMapping maps the P4Info's tables, action profiles, counters,
// registers, meters and digests to bfrt.json's objects as
// BfrtIdMapper::PushForwardingPipelineConfig does (bfrt_id_mapper.cc,
// BuildMapping): by the same id, else by the same name, else to the first
// object whose name contains the P4Info name (bfrt.json prefixes the
// pipeline's name, "pipe."). An entity found none of these ways fails the
// push, as it does there.
func bfrtMapping(info *p4configv1.P4Info, bfrtJSON []byte) (map[uint32]*bfrtTable, error) {
	var schema struct {
		Tables []*bfrtTable `json:"tables"`
	}
	if err := json.Unmarshal(bfrtJSON, &schema); err != nil {
		return nil, status.Errorf(codes.Internal, "bfrt.json does not parse: %v", err)
	}
	byID, byName := map[uint32]*bfrtTable{}, map[string]*bfrtTable{}
	for _, t := range schema.Tables {
		byID[t.ID], byName[t.Name] = t, t
	}
	var preambles []*p4configv1.Preamble
	for _, x := range info.GetTables() {
		preambles = append(preambles, x.GetPreamble())
	}
	for _, x := range info.GetActionProfiles() {
		preambles = append(preambles, x.GetPreamble())
	}
	for _, x := range info.GetCounters() {
		preambles = append(preambles, x.GetPreamble())
	}
	for _, x := range info.GetRegisters() {
		preambles = append(preambles, x.GetPreamble())
	}
	for _, x := range info.GetMeters() {
		preambles = append(preambles, x.GetPreamble())
	}
	for _, x := range info.GetDigests() {
		preambles = append(preambles, x.GetPreamble())
	}
	mapped := map[uint32]*bfrtTable{}
	for _, p := range preambles {
		t := byID[p.GetId()]
		if t == nil {
			t = byName[p.GetName()]
		}
		for _, c := range schema.Tables {
			if t != nil {
				break
			}
			if strings.Contains(c.Name, p.GetName()) {
				t = c
			}
		}
		if t == nil {
			return nil, status.Errorf(codes.Internal, "Unable to find bfrt ID for P4Info entity %s with ID %d.", p.GetName(), p.GetId())
		}
		mapped[p.GetId()] = t
	}
	return mapped, nil
}

// applyPRE follows BfrtPreManager::WriteMulticastGroupEntry
// (bfrt_pre_manager.cc): group ids up to kMaxMulticastGroupId (65535),
// replica instances (the replication id the egress sees) up to 65535, the
// port taken from Replica.egress_port. Without @p4runtime_translation in
// the P4Info the port is the SDK's device port (a 9-bit PortId_t). Group 0
// is refused here too: TNA's mcast_grp_a 0 means "no multicast".
func (r *recorder) applyPRE(typ p4v1.Update_Type, pre *p4v1.PacketReplicationEngineEntry) error {
	mg := pre.GetMulticastGroupEntry()
	if mg == nil {
		return status.Error(codes.Unimplemented, "only multicast group entries")
	}
	id := mg.GetMulticastGroupId()
	if id == 0 || id > 65535 {
		return status.Errorf(codes.InvalidArgument, "multicast group id %d outside 1..65535", id)
	}
	_, exists := r.groups[id]
	switch typ {
	case p4v1.Update_INSERT:
		if exists {
			return status.Errorf(codes.AlreadyExists, "multicast group %d exists", id)
		}
	case p4v1.Update_MODIFY, p4v1.Update_DELETE:
		if !exists {
			return status.Errorf(codes.NotFound, "multicast group %d does not exist", id)
		}
		if typ == p4v1.Update_DELETE {
			delete(r.groups, id)
			return nil
		}
	default:
		return status.Errorf(codes.InvalidArgument, "update type %v", typ)
	}
	for _, rep := range mg.GetReplicas() {
		if len(rep.GetPort()) > 0 {
			return status.Error(codes.InvalidArgument, "Stratum reads Replica.egress_port, not port")
		}
		if rep.GetInstance() > 65535 {
			return status.Errorf(codes.InvalidArgument, "replica instance %d above 65535", rep.GetInstance())
		}
		//lint:ignore SA1019 the field Stratum reads
		if port := rep.GetEgressPort(); port >= 512 {
			return status.Errorf(codes.InvalidArgument, "egress port %d is not a Tofino device port", port)
		}
	}
	r.groups[id] = mg.GetReplicas()
	return nil
}

// applyTable checks a table entry against the compiler's P4Info (ids,
// widths, actions of the table, priority only with ternary keys, at most
// 2^24-1 as kMaxPriority in bfrt_constants.h) and keeps the table's state
// for INSERT/MODIFY/DELETE answers.
func (r *recorder) applyTable(typ p4v1.Update_Type, te *p4v1.TableEntry) error {
	if _, err := r.bfrtObject(te.GetTableId(), "MatchAction_Direct"); err != nil {
		return err
	}
	name := r.names[te.GetTableId()]
	tab := r.model.Tables[name]
	if tab == nil {
		return status.Errorf(codes.NotFound, "no table with id %#x in the P4Info", te.GetTableId())
	}
	ternary := false
	keys := map[uint32]shape.Key{}
	for _, k := range tab.Keys {
		keys[k.ID] = k
		ternary = ternary || k.Match == "TERNARY"
	}
	for _, f := range te.GetMatch() {
		k, ok := keys[f.GetFieldId()]
		if !ok {
			return status.Errorf(codes.InvalidArgument, "table %s: no match field %d", name, f.GetFieldId())
		}
		v := f.GetExact().GetValue()
		if k.Match == "TERNARY" {
			v = f.GetTernary().GetValue()
		}
		if _, err := p4info.Uint(v, k.Width); err != nil {
			return status.Errorf(codes.OutOfRange, "table %s: match field %s: %v", name, k.Name, err)
		}
	}
	if ternary != (te.GetPriority() > 0) || te.GetPriority() > 1<<24-1 {
		return status.Errorf(codes.InvalidArgument, "table %s: priority %d", name, te.GetPriority())
	}
	key := fmt.Sprintf("%d/%s", te.GetTableId(), prototext.Format(&p4v1.TableEntry{Match: te.GetMatch()}))
	_, exists := r.entries[key]
	switch typ {
	case p4v1.Update_INSERT:
		if exists {
			return status.Errorf(codes.AlreadyExists, "table %s: entry exists", name)
		}
	case p4v1.Update_MODIFY, p4v1.Update_DELETE:
		if !exists {
			return status.Errorf(codes.NotFound, "table %s: no such entry", name)
		}
		if typ == p4v1.Update_DELETE {
			delete(r.entries, key)
			return nil
		}
	default:
		return status.Errorf(codes.InvalidArgument, "update type %v", typ)
	}
	a := te.GetAction().GetAction()
	aname := r.names[a.GetActionId()]
	act := r.model.Actions[aname]
	if _, ok := tab.Actions[aname]; !ok || act == nil {
		return status.Errorf(codes.InvalidArgument, "table %s: action %#x is not one of its actions", name, a.GetActionId())
	}
	if len(a.GetParams()) != len(act.Params) {
		return status.Errorf(codes.InvalidArgument, "action %s: %d params, want %d", aname, len(a.GetParams()), len(act.Params))
	}
	for _, p := range a.GetParams() {
		found := false
		for _, want := range act.Params {
			if want.ID == p.GetParamId() {
				found = true
				if _, err := p4info.Uint(p.GetValue(), want.Width); err != nil {
					return status.Errorf(codes.OutOfRange, "action %s: param %s: %v", aname, want.Name, err)
				}
			}
		}
		if !found {
			return status.Errorf(codes.InvalidArgument, "action %s: no param %d", aname, p.GetParamId())
		}
	}
	r.entries[key] = te
	return nil
}

// Read answers what the controller reads back: table entries, multicast
// groups and counters (zero).
func (r *recorder) Read(req *p4v1.ReadRequest, st p4v1.P4Runtime_ReadServer) error {
	if len(req.GetEntities()) == 0 {
		return nil
	}
	if err := r.permit(st.Context(), req.GetDeviceId(), nil, false, "Read"); err != nil {
		return err
	}
	r.mu.Lock()
	var out []*p4v1.Entity
	for _, q := range req.GetEntities() {
		switch {
		case q.GetTableEntry() != nil:
			for _, te := range r.entries {
				if te.GetTableId() == q.GetTableEntry().GetTableId() {
					out = append(out, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: te}})
				}
			}
		case q.GetPacketReplicationEngineEntry() != nil:
			for id, reps := range r.groups {
				out = append(out, &p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
					Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: &p4v1.MulticastGroupEntry{MulticastGroupId: id, Replicas: reps}}}}})
			}
		case q.GetCounterEntry() != nil:
			c := r.model.Counters[r.names[q.GetCounterEntry().GetCounterId()]]
			if c == nil {
				r.mu.Unlock()
				return status.Error(codes.NotFound, "no such counter")
			}
			for i := int64(0); i < c.Size; i++ {
				out = append(out, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
					CounterId: q.GetCounterEntry().GetCounterId(), Index: &p4v1.Index{Index: i}, Data: &p4v1.CounterData{}}}})
			}
		default:
			r.mu.Unlock()
			return status.Errorf(codes.Unimplemented, "read of %v", q)
		}
	}
	r.mu.Unlock()
	return st.Send(&p4v1.ReadResponse{Entities: out})
}

// refusal is an update the server refused, and why.
type refusal struct {
	u    *p4v1.Update
	code codes.Code
	err  error
}

func (f refusal) String() string { return fmt.Sprintf("%v: %v", prototext.Format(f.u), f.err) }

// snapshot returns what was recorded so far.
func (r *recorder) snapshot() (pushes []*p4v1.SetForwardingPipelineConfigRequest, writes []*p4v1.WriteRequest, refused []refusal, groups int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(pushes, r.pushes...), append(writes, r.writes...), append(refused, r.refused...), len(r.groups)
}

// await waits until cond holds on the recorder's state, checking after
// every write, until ctx ends.
func (r *recorder) await(ctx context.Context, cond func() bool) error {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// errContains reports whether err's text has want.
func errContains(err error, want string) bool {
	return err != nil && strings.Contains(err.Error(), want)
}
