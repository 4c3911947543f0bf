package softswitch

import (
	"bytes"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/prototext"
)

// newAuthHarness is newHarness over a pipeline that checks tags.
func newAuthHarness(t *testing.T) (*harness, *pipeline.Pipeline) {
	t.Helper()
	p, err := pipeline.New(pipeline.Config{Slots: 16, MaxElements: 64, MaxWorkers: 8, Auth: true})
	if err != nil {
		t.Fatal(err)
	}
	return harnessOn(t, PipelineTarget(p)), p
}

func keyUpdate(t *testing.T, typ p4v1.Update_Type, jobID uint32, key []byte) *p4v1.Update {
	t.Helper()
	e, err := p4info.JobKeyEntry(jobID, key)
	if err != nil {
		t.Fatal(err)
	}
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_ExternEntry{ExternEntry: e}}}
}

var allKeys = &p4v1.Entity{Entity: &p4v1.Entity_ExternEntry{ExternEntry: &p4v1.ExternEntry{ExternTypeId: p4info.ExternJobKeyType}}}

// TestJobKeyExtern: job keys are written as the job-key extern, read back
// without their bytes, and refused in every malformed shape; a
// VERIFY_AND_COMMIT clears them with the tables.
func TestJobKeyExtern(t *testing.T) {
	h, _ := newAuthHarness(t)
	ctx := ctxT(t)
	h.primary(ctx, 1)
	key := bytes.Repeat([]byte{0xc3}, 32)
	if err := h.write(ctx, 1, keyUpdate(t, p4v1.Update_INSERT, 5, key)); err != nil {
		t.Fatal(err)
	}
	ents, err := h.read(ctx, allKeys)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].GetExternEntry().GetExternId() != 5 || ents[0].GetExternEntry().GetEntry() != nil {
		t.Fatalf("read keys = %v, want job 5 without its key", ents)
	}
	if b, _ := prototext.Marshal(ents[0]); bytes.Contains(b, []byte("\\303\\303")) || bytes.Contains(b, key) {
		t.Fatal("a read returned the key's bytes")
	}
	err = h.write(ctx, 1, keyUpdate(t, p4v1.Update_INSERT, 5, key))
	if got := p4Errors(t, err); got[0] != codes.AlreadyExists {
		t.Fatalf("second insert: %v", got)
	}
	if err := h.write(ctx, 1, keyUpdate(t, p4v1.Update_MODIFY, 5, bytes.Repeat([]byte{1}, 32))); err != nil {
		t.Fatal(err)
	}
	short := bytes.Repeat([]byte{0xc3}, 16)
	err = h.write(ctx, 1, keyUpdate(t, p4v1.Update_INSERT, 6, short))
	if got := p4Errors(t, err); got[0] != codes.InvalidArgument {
		t.Fatalf("16-byte key: %v", got)
	}
	if bytes.Contains([]byte(err.Error()), short) || bytes.Contains([]byte(err.Error()), []byte("c3c3")) {
		t.Fatalf("the refusal shows the key: %v", err)
	}
	noEntry := keyUpdate(t, p4v1.Update_INSERT, 6, nil)
	if got := p4Errors(t, h.write(ctx, 1, noEntry)); got[0] != codes.InvalidArgument {
		t.Fatalf("key entry without a key: %v", got)
	}
	other := keyUpdate(t, p4v1.Update_INSERT, 6, key)
	other.GetEntity().GetExternEntry().ExternTypeId = 0x90
	if got := p4Errors(t, h.write(ctx, 1, other)); got[0] != codes.NotFound {
		t.Fatalf("extern type 0x90: %v", got)
	}
	if err := h.write(ctx, 1, keyUpdate(t, p4v1.Update_DELETE, 5, nil)); err != nil {
		t.Fatal(err)
	}
	if got := p4Errors(t, h.write(ctx, 1, keyUpdate(t, p4v1.Update_DELETE, 5, nil))); got[0] != codes.NotFound {
		t.Fatalf("second delete: %v", got)
	}
	if ents, err := h.read(ctx, allKeys); err != nil || len(ents) != 0 {
		t.Fatalf("keys after delete = %v, %v", ents, err)
	}

	if err := h.write(ctx, 1, keyUpdate(t, p4v1.Update_INSERT, 7, key)); err != nil {
		t.Fatal(err)
	}
	h.primary(ctx, 2) // pushes the pipeline again: VERIFY_AND_COMMIT
	if ents, err := h.read(ctx, allKeys); err != nil || len(ents) != 0 {
		t.Fatalf("keys after VERIFY_AND_COMMIT = %v, %v", ents, err)
	}
}

// TestJobKeyExternWithoutAuth: a switch that does not check tags refuses
// the extern, saying how to start it, for writes and reads alike.
func TestJobKeyExternWithoutAuth(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t)
	h.primary(ctx, 1)
	err := h.write(ctx, 1, keyUpdate(t, p4v1.Update_INSERT, 5, bytes.Repeat([]byte{1}, 32)))
	if got := p4Errors(t, err); got[0] != codes.Unimplemented {
		t.Fatalf("key write: %v", got)
	}
	wantCode(t, err, codes.Unknown, "start it with Auth set")
	_, err = h.read(ctx, allKeys)
	if got := p4Errors(t, err); got[0] != codes.Unimplemented {
		t.Fatalf("key read: %v", got)
	}
}
