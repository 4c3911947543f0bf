// Package p4info holds the P4Info of the SwitchML pipeline: the contract between
// the data plane (the software switch, BMv2 or Tofino programs) and the
// controller. The text is checked in as switchml.p4info.txtpb and embedded, so
// both sides agree on names and ids without a P4 compiler at build time.
package p4info

import (
	_ "embed"
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"
)

//go:embed switchml.p4info.txtpb
var text []byte

// Fully qualified names of the pipeline's entities.
const (
	TableWorkers      = "SwitchMLIngress.workers"
	TableReplyAddress = "SwitchMLEgress.reply_address"

	ActionNoAction  = "NoAction"
	ActionSetWorker = "SwitchMLIngress.set_worker"
	ActionDrop      = "SwitchMLIngress.drop"
	ActionSetReply  = "SwitchMLEgress.set_reply"

	CounterStats = "SwitchMLIngress.stats"

	RegisterPoolBitmap   = "SwitchMLIngress.pool_bitmap"
	RegisterPoolCount    = "SwitchMLIngress.pool_count"
	RegisterPoolExponent = "SwitchMLIngress.pool_exponent"
	RegisterPoolValues   = "SwitchMLIngress.pool_values"
)

// Ids of the entities above. They are fixed in the checked-in text and never
// reused, so a controller built against an older P4Info still addresses the
// same objects.
const (
	TableWorkersID      uint32 = 0x02000001
	TableReplyAddressID uint32 = 0x02000002

	ActionNoActionID  uint32 = 0x01000001
	ActionSetWorkerID uint32 = 0x01000002
	ActionDropID      uint32 = 0x01000003
	ActionSetReplyID  uint32 = 0x01000004

	CounterStatsID uint32 = 0x12000001

	RegisterPoolBitmapID   uint32 = 0x16000001
	RegisterPoolCountID    uint32 = 0x16000002
	RegisterPoolExponentID uint32 = 0x16000003
	RegisterPoolValuesID   uint32 = 0x16000004
)

// Match field ids of SwitchMLIngress.workers.
const (
	WorkersSrcAddrID uint32 = 1 // hdr.ipv4.src_addr, 32 bits
	WorkersSrcPortID uint32 = 2 // hdr.udp.src_port, 16 bits
)

// Match field ids of SwitchMLEgress.reply_address.
const (
	ReplyJobID  uint32 = 1 // meta.job_id, 32 bits
	ReplyRankID uint32 = 2 // meta.rank, 16 bits
	ReplyLaneID uint32 = 3 // meta.lane, 8 bits
)

// Parameter ids of SwitchMLIngress.set_worker.
const (
	SetWorkerJobID      uint32 = 1 // 32 bits
	SetWorkerRank       uint32 = 2 // 16 bits
	SetWorkerNumWorkers uint32 = 3 // 16 bits
	SetWorkerMgid       uint32 = 4 // 16 bits
	SetWorkerLane       uint32 = 5 // 8 bits
	SetWorkerPoolBase   uint32 = 6 // 32 bits
	SetWorkerPoolSize   uint32 = 7 // 32 bits
)

// Parameter ids of SwitchMLEgress.set_reply.
const (
	SetReplyDstMAC  uint32 = 1 // 48 bits
	SetReplyDstIPv4 uint32 = 2 // 32 bits
	SetReplyDstPort uint32 = 3 // 16 bits
)

// Geometry of the register arrays as declared in the P4Info (the reference
// Tofino program's sizes). A software switch may be configured smaller or
// larger; its registers are then indexed the same way with its own slot count.
const (
	Sets           = 2
	Slots          = 8192
	PoolIndices    = Sets * Slots // index = set*Slots + slot
	ValuesPerIndex = 64           // pool_values element j of idx is at idx*ValuesPerIndex + j
	StatsSize      = 32
)

// Text returns the checked-in P4Info text.
func Text() []byte {
	return append([]byte(nil), text...)
}

// Load parses the embedded P4Info. Every call returns a fresh message that the
// caller may modify.
func Load() (*p4configv1.P4Info, error) {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(text, info); err != nil {
		return nil, fmt.Errorf("p4info: parse embedded switchml.p4info.txtpb: %w", err)
	}
	return info, nil
}

// Table finds a table by fully qualified name or alias.
func Table(info *p4configv1.P4Info, name string) (*p4configv1.Table, error) {
	for _, t := range info.GetTables() {
		if matches(t.GetPreamble(), name) {
			return t, nil
		}
	}
	return nil, fmt.Errorf("p4info: no table %q", name)
}

// Action finds an action by fully qualified name or alias.
func Action(info *p4configv1.P4Info, name string) (*p4configv1.Action, error) {
	for _, a := range info.GetActions() {
		if matches(a.GetPreamble(), name) {
			return a, nil
		}
	}
	return nil, fmt.Errorf("p4info: no action %q", name)
}

// Register finds a register by fully qualified name or alias.
func Register(info *p4configv1.P4Info, name string) (*p4configv1.Register, error) {
	for _, r := range info.GetRegisters() {
		if matches(r.GetPreamble(), name) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("p4info: no register %q", name)
}

// Counter finds an indirect counter by fully qualified name or alias.
func Counter(info *p4configv1.P4Info, name string) (*p4configv1.Counter, error) {
	for _, c := range info.GetCounters() {
		if matches(c.GetPreamble(), name) {
			return c, nil
		}
	}
	return nil, fmt.Errorf("p4info: no counter %q", name)
}

// ID returns the id of the table, action, counter or register with the given
// name or alias.
func ID(info *p4configv1.P4Info, name string) (uint32, error) {
	for _, p := range Preambles(info) {
		if matches(p, name) {
			return p.GetId(), nil
		}
	}
	return 0, fmt.Errorf("p4info: no entity named %q", name)
}

// Name returns the fully qualified name of the entity with the given id.
func Name(info *p4configv1.P4Info, id uint32) (string, error) {
	for _, p := range Preambles(info) {
		if p.GetId() == id {
			return p.GetName(), nil
		}
	}
	return "", fmt.Errorf("p4info: no entity with id %#x", id)
}

// MatchFieldID returns the id of a table's match field.
func MatchFieldID(t *p4configv1.Table, name string) (uint32, error) {
	for _, mf := range t.GetMatchFields() {
		if mf.GetName() == name {
			return mf.GetId(), nil
		}
	}
	return 0, fmt.Errorf("p4info: table %q has no match field %q", t.GetPreamble().GetName(), name)
}

// ParamID returns the id of an action's parameter.
func ParamID(a *p4configv1.Action, name string) (uint32, error) {
	for _, p := range a.GetParams() {
		if p.GetName() == name {
			return p.GetId(), nil
		}
	}
	return 0, fmt.Errorf("p4info: action %q has no parameter %q", a.GetPreamble().GetName(), name)
}

// Preambles lists the preambles of all tables, actions, counters and
// registers, in that order.
func Preambles(info *p4configv1.P4Info) []*p4configv1.Preamble {
	var out []*p4configv1.Preamble
	for _, t := range info.GetTables() {
		out = append(out, t.GetPreamble())
	}
	for _, a := range info.GetActions() {
		out = append(out, a.GetPreamble())
	}
	for _, c := range info.GetCounters() {
		out = append(out, c.GetPreamble())
	}
	for _, r := range info.GetRegisters() {
		out = append(out, r.GetPreamble())
	}
	return out
}

func matches(p *p4configv1.Preamble, name string) bool {
	return name != "" && (p.GetName() == name || p.GetAlias() == name)
}
