package softswitch

import (
	"fmt"
	"sort"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// readChunk bounds the entities per ReadResponse and per hold of the data-path
// lock, so a wildcard read of pool_values (a million cells) neither builds one
// huge message nor stalls packet processing for its whole duration.
const readChunk = 4096

// Read implements p4.v1.P4Runtime. Wildcards follow the specification: table
// id 0 reads all tables, an empty match all entries, multicast group id 0 all
// groups, register or counter id 0 all arrays, an unset index all cells.
// Callers: the identities P4RuntimeConfig.Allow permits, primary or backup.
func (s *P4Runtime) Read(req *p4v1.ReadRequest, rs p4v1.P4Runtime_ReadServer) error {
	if err := s.authorize(rs.Context(), "Read"); err != nil {
		return err
	}
	if req.GetDeviceId() != s.deviceID {
		return status.Errorf(codes.NotFound, "unknown device id %d (this switch is device %d)", req.GetDeviceId(), s.deviceID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return status.Error(codes.FailedPrecondition, "no forwarding pipeline config: call SetForwardingPipelineConfig first")
	}
	errs := make([]error, len(req.GetEntities()))
	failed := false
	for i, e := range req.GetEntities() {
		var out []*p4v1.Entity
		flush := func() error {
			if len(out) == 0 {
				return nil
			}
			err := rs.Send(&p4v1.ReadResponse{Entities: out})
			out = nil
			return err
		}
		emit := func(ent *p4v1.Entity) error {
			out = append(out, ent)
			if len(out) >= readChunk {
				return flush()
			}
			return nil
		}
		err := s.readEntity(e, emit)
		if ferr := flush(); ferr != nil {
			return ferr
		}
		if st, ok := err.(sendError); ok {
			return st.err
		}
		errs[i] = err
		failed = failed || err != nil
	}
	if failed {
		return batchStatus("read", errs)
	}
	return nil
}

// sendError marks a failure to stream a response (the client went away), as
// opposed to a bad request.
type sendError struct{ err error }

func (e sendError) Error() string { return e.err.Error() }

func (s *P4Runtime) readEntity(e *p4v1.Entity, emit func(*p4v1.Entity) error) error {
	send := func(ent *p4v1.Entity) error {
		if err := emit(ent); err != nil {
			return sendError{err}
		}
		return nil
	}
	switch x := e.GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return s.readTables(x.TableEntry, send)
	case *p4v1.Entity_PacketReplicationEngineEntry:
		mg := x.PacketReplicationEngineEntry.GetMulticastGroupEntry()
		if mg == nil {
			return errorf(codes.Unimplemented, "clone sessions are not supported by this pipeline")
		}
		return s.readGroups(mg.GetMulticastGroupId(), send)
	case *p4v1.Entity_RegisterEntry:
		return s.readRegisters(x.RegisterEntry, send)
	case *p4v1.Entity_CounterEntry:
		return s.readCounters(x.CounterEntry, send)
	case *p4v1.Entity_ExternEntry:
		return s.readExterns(x.ExternEntry, send)
	case nil:
		return errorf(codes.InvalidArgument, "read entity has no type set (wildcard reads of everything are not allowed)")
	default:
		return errorf(codes.Unimplemented, "%s entities are not supported by this pipeline", entityKind(e))
	}
}

func (s *P4Runtime) readTables(q *p4v1.TableEntry, send func(*p4v1.Entity) error) error {
	ids := []uint32{p4info.TableWorkersID, p4info.TableReplyAddressID}
	if q.GetTableId() != 0 {
		if s.schema.tables[q.GetTableId()] == nil {
			return errorf(codes.NotFound, "unknown table id %#x", q.GetTableId())
		}
		ids = []uint32{q.GetTableId()}
	}
	for _, id := range ids {
		ts := s.schema.tables[id]
		if q.GetIsDefaultAction() {
			ent := &p4v1.TableEntry{TableId: id, IsDefaultAction: true, Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{
				Action: &p4v1.Action{ActionId: ts.t.GetConstDefaultActionId()}}}}
			if err := send(&p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: ent}}); err != nil {
				return err
			}
			continue
		}
		var only *tableKey
		if len(q.GetMatch()) > 0 {
			vals, err := decodeMatch(ts, q)
			if err != nil {
				return err
			}
			k := keyOf(id, vals)
			only = &k
		}
		var ents []*p4v1.TableEntry
		var bad error
		s.dp.Lock()
		if id == p4info.TableWorkersID {
			s.target.Workers(func(k WorkerKey, w Worker) bool {
				if only == nil || only.worker == k {
					var te *p4v1.TableEntry
					te, bad = s.workerEntry(k, w)
					ents = append(ents, te)
				}
				return bad == nil
			})
		} else {
			s.target.Replies(func(k ReplyKey, r Reply) bool {
				if only == nil || only.reply == k {
					var te *p4v1.TableEntry
					te, bad = s.replyEntry(k, r)
					ents = append(ents, te)
				}
				return bad == nil
			})
		}
		s.dp.Unlock()
		if bad != nil {
			return errorf(codes.Internal, "table %s: %v", ts.t.GetPreamble().GetName(), bad)
		}
		for _, te := range ents {
			if err := send(&p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: te}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// workerEntry and replyEntry fail only on entries a P4Runtime write could not
// have made (a target programmed directly with IPv6 addresses).
func (s *P4Runtime) workerEntry(k WorkerKey, w Worker) (*p4v1.TableEntry, error) {
	ip, err := p4info.IPv4(k.Addr())
	if err != nil {
		return nil, fmt.Errorf("worker %v: %w", k, err)
	}
	m := s.workerMeta[k]
	return &p4v1.TableEntry{
		TableId: p4info.TableWorkersID,
		Match:   p4info.WorkerKey(ip, k.Port()),
		Action:  p4info.SetWorker(w),
		//lint:ignore SA1019 a read returns what the client wrote, old fields too
		ControllerMetadata: m.controllerMetadata,
		Metadata:           m.metadata,
	}, nil
}

func (s *P4Runtime) replyEntry(k ReplyKey, r Reply) (*p4v1.TableEntry, error) {
	ip, err := p4info.IPv4(r.Addr.Addr())
	if err != nil {
		return nil, fmt.Errorf("reply address of %+v: %w", k, err)
	}
	m := s.replyMeta[k]
	return &p4v1.TableEntry{
		TableId: p4info.TableReplyAddressID,
		Match:   p4info.ReplyKey(k.JobID, k.Rank, k.Lane),
		Action:  p4info.SetReply(r.MAC, ip, r.Addr.Port()),
		//lint:ignore SA1019 a read returns what the client wrote, old fields too
		ControllerMetadata: m.controllerMetadata,
		Metadata:           m.metadata,
	}, nil
}

func (s *P4Runtime) readGroups(id uint32, send func(*p4v1.Entity) error) error {
	if id > 0xffff {
		return errorf(codes.NotFound, "multicast group %d does not exist (mgids are 16 bits)", id)
	}
	type group struct {
		id   uint16
		reps []Replica
	}
	var gs []group
	s.dp.Lock()
	s.target.MulticastGroups(func(g uint16, reps []Replica) bool {
		if id == 0 || uint32(g) == id {
			gs = append(gs, group{g, append([]Replica(nil), reps...)})
		}
		return true
	})
	s.dp.Unlock()
	sort.Slice(gs, func(i, j int) bool { return gs[i].id < gs[j].id })
	for _, g := range gs {
		meta := s.groupMeta[g.id]
		mg := &p4v1.MulticastGroupEntry{MulticastGroupId: uint32(g.id), Metadata: meta.metadata}
		for _, r := range g.reps {
			rep := &p4v1.Replica{Instance: uint32(r.Instance)}
			if meta.portBytes {
				rep.PortKind = &p4v1.Replica_Port{Port: p4info.Bytes(uint64(r.EgressPort))}
			} else {
				//lint:ignore SA1019 answered in the field the client wrote
				rep.PortKind = &p4v1.Replica_EgressPort{EgressPort: r.EgressPort}
			}
			mg.Replicas = append(mg.Replicas, rep)
		}
		ent := &p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
			Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: mg}}}}
		if err := send(ent); err != nil {
			return err
		}
	}
	return nil
}

func (s *P4Runtime) readRegisters(q *p4v1.RegisterEntry, send func(*p4v1.Entity) error) error {
	ids := s.schema.registerIDs()
	if q.GetRegisterId() != 0 {
		if s.schema.registers[q.GetRegisterId()] == nil {
			return errorf(codes.NotFound, "unknown register id %#x", q.GetRegisterId())
		}
		ids = []uint32{q.GetRegisterId()}
	}
	for _, id := range ids {
		rs := s.schema.registers[id]
		s.dp.Lock()
		size := s.target.RegisterSize(rs.name)
		s.dp.Unlock()
		first, last := 0, size
		if q.GetIndex() != nil {
			idx := q.GetIndex().GetIndex()
			if idx < 0 || idx >= int64(size) {
				return errorf(codes.OutOfRange, "register %s: index %d outside [0, %d)", rs.name, idx, size)
			}
			first, last = int(idx), int(idx)+1
		}
		for lo := first; lo < last; lo += readChunk {
			hi := min(lo+readChunk, last)
			ents := make([]*p4v1.Entity, 0, hi-lo)
			s.dp.Lock()
			for i := lo; i < hi; i++ {
				v, err := s.target.ReadRegister(rs.name, i)
				if err != nil {
					s.dp.Unlock()
					return errorf(codes.Internal, "register %s[%d]: %v", rs.name, i, err)
				}
				var b []byte
				if rs.signed {
					b = p4info.IntBytes(v)
				} else {
					b = p4info.Bytes(uint64(v))
				}
				ents = append(ents, &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
					RegisterId: id, Index: &p4v1.Index{Index: int64(i)},
					Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: b}},
				}}})
			}
			s.dp.Unlock()
			for _, e := range ents {
				if err := send(e); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *P4Runtime) readCounters(q *p4v1.CounterEntry, send func(*p4v1.Entity) error) error {
	if q.GetCounterId() != 0 && q.GetCounterId() != p4info.CounterStatsID {
		return errorf(codes.NotFound, "unknown counter id %#x", q.GetCounterId())
	}
	s.dp.Lock()
	now := s.target.Counters(nil)
	s.dp.Unlock()
	value := func(i int) int64 {
		if i >= len(now) {
			return 0
		}
		var base uint64
		if i < len(s.counterBase) {
			base = s.counterBase[i]
		}
		return int64(now[i] - base)
	}
	first, last := 0, p4info.StatsSize
	if q.GetIndex() != nil {
		idx := q.GetIndex().GetIndex()
		if idx < 0 || idx >= p4info.StatsSize {
			return errorf(codes.OutOfRange, "counter %s: index %d outside [0, %d)", p4info.CounterStats, idx, p4info.StatsSize)
		}
		first, last = int(idx), int(idx)+1
	}
	for i := first; i < last; i++ {
		ent := &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
			CounterId: p4info.CounterStatsID, Index: &p4v1.Index{Index: int64(i)},
			Data: &p4v1.CounterData{PacketCount: value(i)},
		}}}
		if err := send(ent); err != nil {
			return err
		}
	}
	return nil
}
