package softswitch

import (
	"context"
	"net/netip"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Write implements p4.v1.P4Runtime. Batches run CONTINUE_ON_ERROR: every
// update is attempted; if any fails the status is UNKNOWN with one p4.v1.Error
// per update in the details. Callers: the primary of the request's role,
// among the identities P4RuntimeConfig.Allow permits.
func (s *P4Runtime) Write(ctx context.Context, req *p4v1.WriteRequest) (*p4v1.WriteResponse, error) {
	if err := s.authorize(ctx, "Write"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkPrimary(req.GetDeviceId(), req.GetRole(), req.GetElectionId()); err != nil {
		return nil, err
	}
	if s.running == nil {
		return nil, status.Error(codes.FailedPrecondition, "no forwarding pipeline config: call SetForwardingPipelineConfig first")
	}
	if req.GetAtomicity() != p4v1.WriteRequest_CONTINUE_ON_ERROR {
		return nil, status.Errorf(codes.Unimplemented, "atomicity %v is not supported; use CONTINUE_ON_ERROR", req.GetAtomicity())
	}
	ups := req.GetUpdates()
	errs := make([]error, len(ups))
	failed := false
	s.dp.Lock()
	for i, u := range ups {
		errs[i] = s.apply(u)
		failed = failed || errs[i] != nil
	}
	s.dp.Unlock()
	if failed {
		return nil, batchStatus("write", errs)
	}
	return &p4v1.WriteResponse{}, nil
}

// apply performs one update. Callers hold s.mu and s.dp.
func (s *P4Runtime) apply(u *p4v1.Update) error {
	typ := u.GetType()
	if typ != p4v1.Update_INSERT && typ != p4v1.Update_MODIFY && typ != p4v1.Update_DELETE {
		return errorf(codes.InvalidArgument, "update type %v is not INSERT, MODIFY or DELETE", typ)
	}
	switch e := u.GetEntity().GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return s.writeTable(typ, e.TableEntry)
	case *p4v1.Entity_PacketReplicationEngineEntry:
		mg := e.PacketReplicationEngineEntry.GetMulticastGroupEntry()
		if mg == nil {
			return errorf(codes.Unimplemented, "clone sessions are not supported by this pipeline")
		}
		return s.writeGroup(typ, mg)
	case *p4v1.Entity_RegisterEntry:
		return s.writeRegister(typ, e.RegisterEntry)
	case *p4v1.Entity_CounterEntry:
		return s.writeCounter(typ, e.CounterEntry)
	case *p4v1.Entity_ExternEntry:
		return s.writeExtern(typ, e.ExternEntry)
	case nil:
		return errorf(codes.InvalidArgument, "update has no entity")
	default:
		return errorf(codes.Unimplemented, "%s entities are not supported by this pipeline", entityKind(u.GetEntity()))
	}
}

func entityKind(e *p4v1.Entity) string {
	if e == nil || e.GetEntity() == nil {
		return "empty"
	}
	return string(e.ProtoReflect().WhichOneof(e.ProtoReflect().Descriptor().Oneofs().ByName("entity")).Name())
}

// tableKey is a decoded match key of one of the two tables.
type tableKey struct {
	worker WorkerKey
	reply  ReplyKey
}

// decodeMatch validates a table entry's match fields against the P4Info: each
// exact field exactly once, known ids, values within their widths.
func decodeMatch(ts *tableSchema, te *p4v1.TableEntry) (map[uint32]uint64, error) {
	name := ts.t.GetPreamble().GetName()
	if te.GetPriority() != 0 {
		return nil, errorf(codes.InvalidArgument, "table %s has only exact matches: priority must be 0, got %d", name, te.GetPriority())
	}
	vals := map[uint32]uint64{}
	for _, fm := range te.GetMatch() {
		mf := ts.fields[fm.GetFieldId()]
		if mf == nil {
			return nil, errorf(codes.InvalidArgument, "table %s has no match field id %d", name, fm.GetFieldId())
		}
		if _, dup := vals[fm.GetFieldId()]; dup {
			return nil, errorf(codes.InvalidArgument, "table %s: match field %s given twice", name, mf.GetName())
		}
		ex := fm.GetExact()
		if ex == nil {
			return nil, errorf(codes.InvalidArgument, "table %s: match field %s is exact, got another match kind", name, mf.GetName())
		}
		v, err := p4info.Uint(ex.GetValue(), int(mf.GetBitwidth()))
		if err != nil {
			return nil, errorf(codeOf(err), "table %s: match field %s: %v", name, mf.GetName(), err)
		}
		vals[fm.GetFieldId()] = v
	}
	for id, mf := range ts.fields {
		if _, ok := vals[id]; !ok && mf.GetMatchType() == p4configv1.MatchField_EXACT {
			return nil, errorf(codes.InvalidArgument, "table %s: exact match field %s (id %d) is missing", name, mf.GetName(), id)
		}
	}
	return vals, nil
}

func keyOf(tableID uint32, vals map[uint32]uint64) tableKey {
	if tableID == p4info.TableWorkersID {
		addr := p4info.AddrFromIPv4(uint32(vals[p4info.WorkersSrcAddrID]))
		return tableKey{worker: netip.AddrPortFrom(addr, uint16(vals[p4info.WorkersSrcPortID]))}
	}
	return tableKey{reply: ReplyKey{
		JobID: uint32(vals[p4info.ReplyJobID]),
		Rank:  uint16(vals[p4info.ReplyRankID]),
		Lane:  uint8(vals[p4info.ReplyLaneID]),
	}}
}

// decodeAction validates the action of a table entry and returns its
// parameter values by id.
func (s *P4Runtime) decodeAction(ts *tableSchema, act *p4v1.TableAction, isDefault bool) (uint32, map[uint32]uint64, error) {
	name := ts.t.GetPreamble().GetName()
	a := act.GetAction()
	if a == nil {
		if act.GetType() != nil {
			return 0, nil, errorf(codes.InvalidArgument, "table %s is direct: action profile members and groups cannot be used", name)
		}
		return 0, nil, errorf(codes.InvalidArgument, "table %s: entry has no action", name)
	}
	scope, ok := ts.refs[a.GetActionId()]
	if !ok {
		return 0, nil, errorf(codes.InvalidArgument, "action id %#x is not an action of table %s", a.GetActionId(), name)
	}
	if !isDefault && scope == p4configv1.ActionRef_DEFAULT_ONLY {
		return 0, nil, errorf(codes.PermissionDenied, "action id %#x may only be the default action of table %s", a.GetActionId(), name)
	}
	if isDefault && scope == p4configv1.ActionRef_TABLE_ONLY {
		return 0, nil, errorf(codes.PermissionDenied, "action id %#x cannot be the default action of table %s", a.GetActionId(), name)
	}
	spec := s.schema.actions[a.GetActionId()]
	params := map[uint32]uint64{}
	for _, p := range a.GetParams() {
		var ps *p4configv1.Action_Param
		for _, cand := range spec.GetParams() {
			if cand.GetId() == p.GetParamId() {
				ps = cand
			}
		}
		if ps == nil {
			return 0, nil, errorf(codes.InvalidArgument, "action %s has no parameter id %d", spec.GetPreamble().GetName(), p.GetParamId())
		}
		if _, dup := params[p.GetParamId()]; dup {
			return 0, nil, errorf(codes.InvalidArgument, "action %s: parameter %s given twice", spec.GetPreamble().GetName(), ps.GetName())
		}
		v, err := p4info.Uint(p.GetValue(), int(ps.GetBitwidth()))
		if err != nil {
			return 0, nil, errorf(codeOf(err), "action %s: parameter %s: %v", spec.GetPreamble().GetName(), ps.GetName(), err)
		}
		params[p.GetParamId()] = v
	}
	for _, ps := range spec.GetParams() {
		if _, ok := params[ps.GetId()]; !ok {
			return 0, nil, errorf(codes.InvalidArgument, "action %s: parameter %s (id %d) is missing", spec.GetPreamble().GetName(), ps.GetName(), ps.GetId())
		}
	}
	return a.GetActionId(), params, nil
}

func (s *P4Runtime) writeTable(typ p4v1.Update_Type, te *p4v1.TableEntry) error {
	ts := s.schema.tables[te.GetTableId()]
	if ts == nil {
		return errorf(codes.NotFound, "unknown table id %#x", te.GetTableId())
	}
	name := ts.t.GetPreamble().GetName()
	if te.GetIsDefaultAction() {
		if len(te.GetMatch()) != 0 || te.GetPriority() != 0 {
			return errorf(codes.InvalidArgument, "table %s: the default entry has no match and priority 0", name)
		}
		if typ != p4v1.Update_MODIFY {
			return errorf(codes.InvalidArgument, "table %s: the default entry can only be modified, not inserted or deleted", name)
		}
		return errorf(codes.PermissionDenied, "table %s: the default action is const", name)
	}
	if te.GetMeterConfig() != nil || te.GetCounterData() != nil || te.GetMeterCounterData() != nil {
		return errorf(codes.InvalidArgument, "table %s has no direct meters or counters", name)
	}
	if te.GetIdleTimeoutNs() != 0 {
		return errorf(codes.InvalidArgument, "table %s does not support idle timeouts", name)
	}
	if te.GetIsConst() {
		return errorf(codes.InvalidArgument, "is_const is set by the server only")
	}
	vals, err := decodeMatch(ts, te)
	if err != nil {
		return err
	}
	key := keyOf(te.GetTableId(), vals)
	//lint:ignore SA1019 clients that still write controller_metadata read it back
	meta := entryMeta{controllerMetadata: te.GetControllerMetadata(), metadata: append([]byte(nil), te.GetMetadata()...)}
	if typ == p4v1.Update_DELETE {
		if te.GetTableId() == p4info.TableWorkersID {
			if err := s.target.DeleteWorker(key.worker); err != nil {
				return errorf(codeOf(err), "table %s: delete %v: %v", name, key.worker, err)
			}
			delete(s.workerMeta, key.worker)
			return nil
		}
		if err := s.target.DeleteReply(key.reply); err != nil {
			return errorf(codeOf(err), "table %s: delete %+v: %v", name, key.reply, err)
		}
		delete(s.replyMeta, key.reply)
		return nil
	}
	_, params, err := s.decodeAction(ts, te.GetAction(), false)
	if err != nil {
		return err
	}
	if te.GetTableId() == p4info.TableWorkersID {
		if !key.worker.Addr().Is4() {
			return errorf(codes.InvalidArgument, "table %s: key is not an IPv4 address", name)
		}
		w := p4info.WorkerFromParams(params)
		if typ == p4v1.Update_INSERT {
			err = s.target.InsertWorker(key.worker, w)
		} else {
			err = s.target.ModifyWorker(key.worker, w)
		}
		if err != nil {
			return errorf(codeOf(err), "table %s: %v %v: %v", name, typ, key.worker, err)
		}
		s.workerMeta[key.worker] = meta
		return nil
	}
	r := Reply{
		MAC:  p4info.MACFrom(params[p4info.SetReplyDstMAC]),
		Addr: netip.AddrPortFrom(p4info.AddrFromIPv4(uint32(params[p4info.SetReplyDstIPv4])), uint16(params[p4info.SetReplyDstPort])),
	}
	if typ == p4v1.Update_INSERT {
		err = s.target.InsertReply(key.reply, r)
	} else {
		err = s.target.ModifyReply(key.reply, r)
	}
	if err != nil {
		return errorf(codeOf(err), "table %s: %v %+v: %v", name, typ, key.reply, err)
	}
	s.replyMeta[key.reply] = meta
	return nil
}

func (s *P4Runtime) writeGroup(typ p4v1.Update_Type, mg *p4v1.MulticastGroupEntry) error {
	id := mg.GetMulticastGroupId()
	if id == 0 {
		return errorf(codes.InvalidArgument, "multicast group id 0 is reserved for wildcard reads")
	}
	if id > 0xffff {
		return errorf(codes.InvalidArgument, "multicast group id %d exceeds the 16-bit mgid of this pipeline", id)
	}
	if typ == p4v1.Update_DELETE {
		if err := s.target.DeleteMulticastGroup(uint16(id)); err != nil {
			return errorf(codeOf(err), "multicast group %d: delete: %v", id, err)
		}
		delete(s.groupMeta, uint16(id))
		return nil
	}
	reps := make([]Replica, 0, len(mg.GetReplicas()))
	seen := map[Replica]bool{}
	portBytes := false
	for _, r := range mg.GetReplicas() {
		if len(r.GetBackupReplicas()) > 0 {
			return errorf(codes.Unimplemented, "multicast group %d: backup replicas are not supported", id)
		}
		var port uint32
		switch pk := r.GetPortKind().(type) {
		case *p4v1.Replica_EgressPort:
			//lint:ignore SA1019 PI (BMv2), Stratum and most controllers still send egress_port
			port = pk.EgressPort
		case *p4v1.Replica_Port:
			v, err := p4info.Uint(pk.Port, 32)
			if err != nil {
				return errorf(codes.InvalidArgument, "multicast group %d: replica port: %v", id, err)
			}
			port, portBytes = uint32(v), true
		default:
			return errorf(codes.InvalidArgument, "multicast group %d: replica without a port", id)
		}
		if r.GetInstance() > 0xffff {
			return errorf(codes.InvalidArgument, "multicast group %d: instance %d exceeds 16 bits", id, r.GetInstance())
		}
		rep := Replica{EgressPort: port, Instance: uint16(r.GetInstance())}
		if seen[rep] {
			return errorf(codes.InvalidArgument, "multicast group %d: replica (port %d, instance %d) given twice", id, port, rep.Instance)
		}
		seen[rep] = true
		reps = append(reps, rep)
	}
	var err error
	if typ == p4v1.Update_INSERT {
		err = s.target.InsertMulticastGroup(uint16(id), reps)
	} else {
		err = s.target.ModifyMulticastGroup(uint16(id), reps)
	}
	if err != nil {
		return errorf(codeOf(err), "multicast group %d: %v: %v", id, typ, err)
	}
	s.groupMeta[uint16(id)] = groupMeta{metadata: append([]byte(nil), mg.GetMetadata()...), portBytes: portBytes}
	return nil
}

func (s *P4Runtime) writeRegister(typ p4v1.Update_Type, re *p4v1.RegisterEntry) error {
	rs := s.schema.registers[re.GetRegisterId()]
	if rs == nil {
		return errorf(codes.NotFound, "unknown register id %#x", re.GetRegisterId())
	}
	if typ != p4v1.Update_MODIFY {
		return errorf(codes.InvalidArgument, "register %s: only MODIFY is allowed (register cells always exist)", rs.name)
	}
	bs := re.GetData().GetBitstring()
	if bs == nil {
		return errorf(codes.InvalidArgument, "register %s: data must be a bitstring", rs.name)
	}
	var v int64
	if rs.signed {
		x, err := p4info.Int(bs, rs.width)
		if err != nil {
			return errorf(codeOf(err), "register %s: %v", rs.name, err)
		}
		v = x
	} else {
		x, err := p4info.Uint(bs, rs.width)
		if err != nil {
			return errorf(codeOf(err), "register %s: %v", rs.name, err)
		}
		v = int64(x)
	}
	size := s.target.RegisterSize(rs.name)
	if re.GetIndex() == nil {
		// Wildcard: every cell.
		for i := 0; i < size; i++ {
			if err := s.target.WriteRegister(rs.name, i, v); err != nil {
				return errorf(codeOf(err), "register %s[%d]: %v", rs.name, i, err)
			}
		}
		return nil
	}
	idx := re.GetIndex().GetIndex()
	if idx < 0 || idx >= int64(size) {
		return errorf(codes.OutOfRange, "register %s: index %d outside [0, %d)", rs.name, idx, size)
	}
	if err := s.target.WriteRegister(rs.name, int(idx), v); err != nil {
		return errorf(codeOf(err), "register %s[%d]: %v", rs.name, idx, err)
	}
	return nil
}

func (s *P4Runtime) writeCounter(typ p4v1.Update_Type, ce *p4v1.CounterEntry) error {
	if ce.GetCounterId() != p4info.CounterStatsID {
		return errorf(codes.NotFound, "unknown counter id %#x", ce.GetCounterId())
	}
	if typ != p4v1.Update_MODIFY {
		return errorf(codes.InvalidArgument, "counter %s: only MODIFY is allowed", p4info.CounterStats)
	}
	if ce.GetData() == nil {
		return nil // the specification: no data, no change
	}
	if ce.GetData().GetByteCount() != 0 {
		return errorf(codes.InvalidArgument, "counter %s counts packets only: byte_count must be 0", p4info.CounterStats)
	}
	want := ce.GetData().GetPacketCount()
	if want < 0 {
		return errorf(codes.InvalidArgument, "counter %s: negative packet count %d", p4info.CounterStats, want)
	}
	now := s.target.Counters(nil)
	set := func(i int) {
		for len(s.counterBase) <= i {
			s.counterBase = append(s.counterBase, 0)
		}
		s.counterBase[i] = now[i] - uint64(want)
	}
	if ce.GetIndex() == nil {
		for i := range now {
			set(i)
		}
		return nil
	}
	idx := ce.GetIndex().GetIndex()
	if idx < 0 || idx >= p4info.StatsSize {
		return errorf(codes.OutOfRange, "counter %s: index %d outside [0, %d)", p4info.CounterStats, idx, p4info.StatsSize)
	}
	if int(idx) >= len(now) {
		if want != 0 {
			return errorf(codes.InvalidArgument, "counter %s: index %d is reserved and always 0", p4info.CounterStats, idx)
		}
		return nil
	}
	set(int(idx))
	return nil
}
