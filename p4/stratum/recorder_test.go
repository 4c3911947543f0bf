package stratum_test

import (
	"context"
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
// source (github.com/stratum/stratum, stratum/hal/lib/barefoot/) it
// follows; docs/tofino.md lists them.
type recorder struct {
	p4v1.UnimplementedP4RuntimeServer
	info  *p4configv1.P4Info
	model *shape.Model
	names map[uint32]string // id -> name of tables, actions, registers, counters
	// mapped are the ids Stratum maps to BF Runtime objects: tables,
	// standard registers and counters, not Tofino externs
	// (BfrtIdMapper::BuildP4InfoAndBfrtInfoMapping, bfrt_id_mapper.cc).
	mapped map[uint32]bool

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every accepted write
	pipeline *p4v1.ForwardingPipelineConfig
	pushes   []*p4v1.SetForwardingPipelineConfigRequest
	writes   []*p4v1.WriteRequest
	refused  []refusal
	entries  map[string]*p4v1.TableEntry // by table id and match
	groups   map[uint32][]*p4v1.Replica
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
	r := &recorder{info: info, model: m, names: map[uint32]string{}, mapped: map[uint32]bool{}, changed: make(chan struct{}),
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
	for _, x := range info.GetTables() {
		r.mapped[x.GetPreamble().GetId()] = true
	}
	for _, x := range info.GetRegisters() {
		r.mapped[x.GetPreamble().GetId()] = true
	}
	for _, x := range info.GetCounters() {
		r.mapped[x.GetPreamble().GetId()] = true
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

func (r *recorder) StreamChannel(st p4v1.P4Runtime_StreamChannelServer) error {
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if a := m.GetArbitration(); a != nil {
			resp := &p4v1.MasterArbitrationUpdate{DeviceId: a.GetDeviceId(), ElectionId: a.GetElectionId(), Role: a.GetRole(),
				Status: status.New(codes.OK, "primary").Proto()}
			if err := st.Send(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: resp}}); err != nil {
				return err
			}
		}
	}
}

// SetForwardingPipelineConfig takes the config as stratum_bfrt does: the
// device config must parse as a BfPipelineConfig (ExtractBfPipelineConfig,
// bf_pipeline_utils.cc; PI's older packing is refused), each profile with
// its context, binary and pipes (the SDE loads a pipeline on the pipes of
// its scope, BfSdeWrapper::AddDevice); the P4Info must be the compiler's.
func (r *recorder) SetForwardingPipelineConfig(_ context.Context, req *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	cfg, err := stratum.Unpack(req.GetConfig().GetP4DeviceConfig())
	if err != nil || cfg.GetP4Name() == "" || len(cfg.GetBfruntimeInfo()) == 0 || len(cfg.GetProfiles()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "Unknown format for p4_device_config (%v)", err)
	}
	for _, p := range cfg.GetProfiles() {
		if p.GetProfileName() == "" || len(p.GetContext()) == 0 || len(p.GetBinary()) == 0 || len(p.GetPipeScope()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "profile %q lacks a name, context, binary or pipe scope", p.GetProfileName())
		}
	}
	if !proto.Equal(req.GetConfig().GetP4Info(), r.info) {
		return nil, status.Error(codes.InvalidArgument, "the P4Info is not the one bf-p4c wrote for this device config")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushes = append(r.pushes, req)
	r.pipeline = req.GetConfig()
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

func (r *recorder) GetForwardingPipelineConfig(context.Context, *p4v1.GetForwardingPipelineConfigRequest) (*p4v1.GetForwardingPipelineConfigResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pipeline == nil {
		return &p4v1.GetForwardingPipelineConfigResponse{Config: &p4v1.ForwardingPipelineConfig{}}, nil
	}
	return &p4v1.GetForwardingPipelineConfigResponse{Config: r.pipeline}, nil
}

// Write applies a batch as P4Runtime asks: each update on its own, the
// failures reported per update in the status details.
func (r *recorder) Write(_ context.Context, req *p4v1.WriteRequest) (*p4v1.WriteResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
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
// bitstring; BfSdeWrapper::WriteRegister (bf_sde_wrapper.cc) then writes it
// into the register's data field named "<register>.f1", padded to that
// field's width, and finds none in a register whose element has no f1.
// No index writes every index.
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
	if !r.mapped[re.GetRegisterId()] {
		return status.Errorf(codes.Internal, "Unable to find bfrt id from p4info id: %d", re.GetRegisterId())
	}
	name, ok := r.names[re.GetRegisterId()]
	reg := r.model.Registers[name]
	if !ok || reg == nil {
		return status.Errorf(codes.NotFound, "no register with id %#x in the P4Info", re.GetRegisterId())
	}
	width := -1
	for _, f := range reg.Elem {
		if f.Name == "" && reg.Struct == "" || f.Name == "f1" {
			width = f.Type.Width
		}
	}
	if width < 0 {
		return status.Errorf(codes.Internal, "Could not find register data field id. (%s has no .f1 field)", name)
	}
	if _, err := p4info.Uint(bs, width); err != nil || len(bs) > (width+7)/8 {
		return status.Errorf(codes.InvalidArgument, "register %s: data 0x%x is not a bit<%d> value", name, bs, width)
	}
	if re.GetIndex() != nil && (re.GetIndex().GetIndex() < 0 || re.GetIndex().GetIndex() >= reg.Size) {
		return status.Errorf(codes.OutOfRange, "register %s: index %d outside 0..%d", name, re.GetIndex().GetIndex(), reg.Size-1)
	}
	return nil
}

// checkCounter follows BfrtCounterManager::WriteIndirectCounterEntry
// (bfrt_counter_manager.cc): MODIFY only, with an index of zero or more.
func (r *recorder) checkCounter(typ p4v1.Update_Type, ce *p4v1.CounterEntry) error {
	if typ != p4v1.Update_MODIFY {
		return status.Errorf(codes.InvalidArgument, "Update type of CounterEntry must be MODIFY, not %v", typ)
	}
	if ce.GetIndex() == nil {
		return status.Error(codes.InvalidArgument, "Modifying an indirect counter without counter index is currently not supported.")
	}
	if !r.mapped[ce.GetCounterId()] {
		return status.Errorf(codes.Internal, "Unable to find bfrt id from p4info id: %d", ce.GetCounterId())
	}
	name := r.names[ce.GetCounterId()]
	c := r.model.Counters[name]
	if c == nil {
		return status.Errorf(codes.NotFound, "no counter with id %#x in the P4Info", ce.GetCounterId())
	}
	if i := ce.GetIndex().GetIndex(); i < 0 || i >= c.Size {
		return status.Errorf(codes.OutOfRange, "counter %s: index %d outside 0..%d", name, i, c.Size-1)
	}
	return nil
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
	if !r.mapped[te.GetTableId()] {
		return status.Errorf(codes.Internal, "Unable to find bfrt id from p4info id: %d", te.GetTableId())
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
