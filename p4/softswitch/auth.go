package softswitch

import (
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/wire"
	"google.golang.org/grpc/codes"
)

// KeyTarget is a Target that checks tags (switch --auth): it holds one key
// per job, written through the job-key extern (p4info.ExternJobKeyType)
// and never read back.
type KeyTarget interface {
	// Auth reports whether the target checks tags; a target that does not
	// refuses keys.
	Auth() bool
	InsertKey(jobID uint32, key []byte) error
	ModifyKey(jobID uint32, key []byte) error
	DeleteKey(jobID uint32) error
	// KeyedJobs calls yield for every job with a key.
	KeyedJobs(yield func(jobID uint32) bool)
	ClearKeys()
}

func (t pipelineTarget) Auth() bool { return t.p.Auth() }
func (t pipelineTarget) InsertKey(id uint32, key []byte) error {
	return mapErr(t.p.InsertKey(id, key))
}
func (t pipelineTarget) ModifyKey(id uint32, key []byte) error {
	return mapErr(t.p.ModifyKey(id, key))
}
func (t pipelineTarget) DeleteKey(id uint32) error         { return mapErr(t.p.DeleteKey(id)) }
func (t pipelineTarget) KeyedJobs(yield func(uint32) bool) { t.p.KeyedJobs(yield) }
func (t pipelineTarget) ClearKeys()                        { t.p.ClearKeys() }

// keys returns the target's key table, or the error that says this switch
// has none.
func (s *P4Runtime) keys() (KeyTarget, error) {
	kt, ok := s.target.(KeyTarget)
	if !ok || !kt.Auth() {
		return nil, errorf(codes.Unimplemented, "%s externs: this switch does not check tags (start it with Auth set)", p4info.ExternJobKeyName)
	}
	return kt, nil
}

// writeExtern applies an update of an ExternEntry: only job keys exist.
// Callers hold s.mu and s.dp. Errors never hold the key.
func (s *P4Runtime) writeExtern(typ p4v1.Update_Type, e *p4v1.ExternEntry) error {
	if e.GetExternTypeId() != p4info.ExternJobKeyType {
		return errorf(codes.NotFound, "extern type %#x: this switch has only %s (%#x)", e.GetExternTypeId(), p4info.ExternJobKeyName, p4info.ExternJobKeyType)
	}
	kt, err := s.keys()
	if err != nil {
		return err
	}
	id := e.GetExternId()
	if typ == p4v1.Update_DELETE {
		return kt.DeleteKey(id)
	}
	key, err := p4info.JobKeyOf(e)
	if err != nil {
		return errorf(codes.InvalidArgument, "%v", err)
	}
	if len(key) != wire.KeyLen {
		return errorf(codes.InvalidArgument, "%s of job %d: %d bytes, want %d", p4info.ExternJobKeyName, id, len(key), wire.KeyLen)
	}
	if typ == p4v1.Update_MODIFY {
		return kt.ModifyKey(id, key)
	}
	return kt.InsertKey(id, key)
}

// readExterns answers a Read of job keys (extern_id 0: every job) with the
// jobs that have one. The keys are secret: entries come back without them.
func (s *P4Runtime) readExterns(q *p4v1.ExternEntry, send func(*p4v1.Entity) error) error {
	if t := q.GetExternTypeId(); t != 0 && t != p4info.ExternJobKeyType {
		return errorf(codes.NotFound, "extern type %#x: this switch has only %s (%#x)", t, p4info.ExternJobKeyName, p4info.ExternJobKeyType)
	}
	kt, err := s.keys()
	if err != nil {
		return err
	}
	s.dp.Lock()
	var ids []uint32
	kt.KeyedJobs(func(id uint32) bool {
		if q.GetExternId() == 0 || id == q.GetExternId() {
			ids = append(ids, id)
		}
		return true
	})
	s.dp.Unlock()
	if q.GetExternId() != 0 && len(ids) == 0 {
		return errorf(codes.NotFound, "%s of job %d: none", p4info.ExternJobKeyName, q.GetExternId())
	}
	for _, id := range ids {
		ent := &p4v1.Entity{Entity: &p4v1.Entity_ExternEntry{ExternEntry: &p4v1.ExternEntry{ExternTypeId: p4info.ExternJobKeyType, ExternId: id}}}
		if err := send(ent); err != nil {
			return err
		}
	}
	return nil
}

// clearKeys removes every job key, with the tables (VERIFY_AND_COMMIT).
// Callers hold s.dp.
func (s *P4Runtime) clearKeys() {
	if kt, ok := s.target.(KeyTarget); ok {
		kt.ClearKeys()
	}
}
