package p4info

import (
	"fmt"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The software switch's job keys (switch --auth) are not part of the P4
// programs: no P4 target can check a MAC at line rate. They travel as a
// target-specific extern, in the range P4Runtime reserves for
// architecture-specific extern types ([0x81, 0xfe], P4Ids.OTHER_EXTERNS_START
// and up): one ExternEntry per job, extern_id the switch's job id, entry a
// google.protobuf.BytesValue holding the 32-byte key. The software switch
// accepts it only with --auth, and a Read answers the job ids without the
// keys.
const (
	// ExternJobKeyType is the extern_type_id of job keys.
	ExternJobKeyType = 0x81
	// ExternJobKeyName names the extern type in messages.
	ExternJobKeyName = "SwitchMLJobKey"
)

// JobKeyEntry is the ExternEntry that gives job jobID its key; a nil key
// gives the entry's identity only (DELETE, Read).
func JobKeyEntry(jobID uint32, key []byte) (*p4v1.ExternEntry, error) {
	e := &p4v1.ExternEntry{ExternTypeId: ExternJobKeyType, ExternId: jobID}
	if key != nil {
		a, err := anypb.New(wrapperspb.Bytes(key))
		if err != nil {
			return nil, fmt.Errorf("p4info: job key entry: %w", err)
		}
		e.Entry = a
	}
	return e, nil
}

// JobKeyOf returns the key an ExternEntry of ExternJobKeyType carries.
func JobKeyOf(e *p4v1.ExternEntry) ([]byte, error) {
	if e.GetEntry() == nil {
		return nil, fmt.Errorf("%s entry of job %d carries no key", ExternJobKeyName, e.GetExternId())
	}
	var b wrapperspb.BytesValue
	if err := e.GetEntry().UnmarshalTo(&b); err != nil {
		return nil, fmt.Errorf("%s entry of job %d: want a google.protobuf.BytesValue: %v", ExternJobKeyName, e.GetExternId(), err)
	}
	return b.GetValue(), nil
}
