package p4info

import (
	"errors"
	"fmt"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// Names of entities that only the P4 programs have (see p4/README.md).
const (
	TableDropSimulator     = "SwitchMLIngress.drop_simulator"
	ActionSetDropRates     = "SwitchMLIngress.set_drop_rates"
	TableARPReply          = "SwitchMLIngress.arp_reply"
	ActionSendARPReply     = "SwitchMLIngress.send_arp_reply"
	RegisterPoolBitmapPair = "SwitchMLIngress.pool_bitmap_pair" // TNA: index = slot, {f1, f2} = the bitmaps of sets 0 and 1
	// RegisterPoolTag is the per-(set, slot) job tag of the Tofino 2
	// program: with it, a job's first packet on a slot finds it idle, and
	// the pool needs no reset.
	RegisterPoolTag = "SwitchMLIngress.pool_tag"

	// The leaf role of a two-level tree (v1model, and TNA for Tofino 2): a
	// job's uplink to its parent switch, the table that recognises the
	// parent's results, and the registers of a use that waits for them.
	TableUplink           = "SwitchMLIngress.uplink"
	ActionSetUplink       = "SwitchMLIngress.set_uplink"
	TableFromParent       = "SwitchMLIngress.from_parent"
	ActionSetParentResult = "SwitchMLIngress.set_parent_result"
	RegisterPoolWaiting   = "SwitchMLIngress.pool_waiting"
	RegisterPoolUse       = "SwitchMLIngress.pool_use"
)

// Match field ids of SwitchMLIngress.uplink and SwitchMLIngress.from_parent.
const (
	UplinkJobID         uint32 = 1 // meta.job_id, 32 bits
	FromParentSrcAddrID uint32 = 1 // hdr.ipv4.src_addr, 32 bits
	FromParentSrcPortID uint32 = 2 // hdr.udp.src_port, 16 bits
	FromParentSlotID    uint32 = 3 // hdr.switchml.slot, range: 14 bits (v1model), 13 (TNA)

	uplinkPortBits = 9
)

// Parameter ids of SwitchMLIngress.set_uplink and
// SwitchMLIngress.set_parent_result. The two programs locate a job's slots
// at the parent in two forms: the v1model leaf takes both partitions'
// bases, the TNA leaf one slot_delta per direction (IDs.LeafSlotDelta).
const (
	SetUplinkPort       uint32 = 1 // 9 bits: the switch port cabled to the parent
	SetUplinkParentMAC  uint32 = 2 // 48 bits
	SetUplinkParentIPv4 uint32 = 3 // 32 bits
	SetUplinkParentPort uint32 = 4 // 16 bits
	SetUplinkParentBase uint32 = 5 // v1model, 32 bits: the job's first slot at the parent
	SetUplinkSlotDelta  uint32 = 5 // TNA, 16 bits: (parent_base - pool_base) mod 65536

	SetParentResultJobID      uint32 = 1 // 32 bits
	SetParentResultMgid       uint32 = 2 // 16 bits
	SetParentResultPoolBase   uint32 = 3 // v1model, 32 bits
	SetParentResultParentBase uint32 = 4 // v1model, 32 bits
	SetParentResultSlotDelta  uint32 = 3 // TNA, 16 bits: (pool_base - parent_base) mod 65536
)

// field is a match field or an action parameter as the controller writes
// it.
type field struct {
	name  string
	id    uint32
	width int32
}

// leafForm is one form of the leaf role's actions: the parameters that
// locate a job's slots at the parent, and the width of the slots that
// from_parent matches.
type leafForm struct {
	name         string // says which program has it, in errors
	param        string // set_uplink's parameter that tells the form
	uplink       []field
	parentResult []field
	slotBits     int32
}

var (
	// leafBases: slot PoolBase+i at the leaf is slot ParentBase+i at the
	// parent; the program computes the offset (v1model).
	leafBases = leafForm{
		name:  "the v1model leaf's",
		param: "parent_base",
		uplink: []field{{"port", SetUplinkPort, uplinkPortBits}, {"parent_mac", SetUplinkParentMAC, 48},
			{"parent_ipv4", SetUplinkParentIPv4, 32}, {"parent_port", SetUplinkParentPort, 16}, {"parent_base", SetUplinkParentBase, 32}},
		parentResult: []field{{"job_id", SetParentResultJobID, 32}, {"mgid", SetParentResultMgid, 16},
			{"pool_base", SetParentResultPoolBase, 32}, {"parent_base", SetParentResultParentBase, 32}},
		slotBits: 14,
	}
	// leafSlotDelta: the controller computes the offset, and the program
	// adds it to a slot and keeps the slot's 13 bits (the TNA leaf, where
	// 32-bit bases break Tofino 2's action constraints; p4/README.md).
	leafSlotDelta = leafForm{
		name:  "the TNA leaf's",
		param: "slot_delta",
		uplink: []field{{"port", SetUplinkPort, uplinkPortBits}, {"parent_mac", SetUplinkParentMAC, 48},
			{"parent_ipv4", SetUplinkParentIPv4, 32}, {"parent_port", SetUplinkParentPort, 16}, {"slot_delta", SetUplinkSlotDelta, 16}},
		parentResult: []field{{"job_id", SetParentResultJobID, 32}, {"mgid", SetParentResultMgid, 16}, {"slot_delta", SetParentResultSlotDelta, 16}},
		slotBits:     13,
	}
)

// leafForm is the form of the leaf role's actions that the ids' program
// has.
func (ids IDs) leafForm() leafForm {
	if ids.LeafSlotDelta {
		return leafSlotDelta
	}
	return leafBases
}

// IDs are the ids a controller uses, as one P4Info assigns them. The main
// P4Info, the v1model program and the software switch share the constants of
// this package; a compiler may give other ids (the Tofino compiler ignores
// @id on externs), and P4Runtime writes name objects by id, so a controller
// resolves them from the P4Info it pushes.
type IDs struct {
	TableWorkers, TableReplyAddress uint32
	ActionSetWorker, ActionSetReply uint32
	CounterStats                    uint32
	// RegisterPoolBitmap is zero where the program keeps both sets' bitmaps
	// of a slot in one pair register (RegisterPoolBitmapPair, Tofino).
	RegisterPoolBitmap, RegisterPoolBitmapPair uint32
	RegisterPoolCount                          uint32
	// RegisterPoolTag is nonzero where the program tags slots with the
	// job that uses them (Tofino 2): no pool reset is needed there.
	RegisterPoolTag uint32
	// Program-specific tables; zero when the P4Info has none.
	TableDropSimulator, ActionSetDropRates uint32
	TableARPReply, ActionSendARPReply      uint32
	// The leaf role's tables; zero in a program that cannot be a leaf.
	TableUplink, ActionSetUplink           uint32
	TableFromParent, ActionSetParentResult uint32
	// LeafSlotDelta is true where the leaf's set_uplink and
	// set_parent_result take one 16-bit slot_delta each, the offset
	// between the job's partitions at the leaf and at the parent that the
	// controller computes, and its slots are 13 bits (the TNA leaf); false
	// where they take both partitions' 32-bit bases (the v1model leaf) or
	// the program has no leaf role.
	LeafSlotDelta bool
}

// Leaf reports whether the program can be a leaf of a two-level tree (it
// has the uplink and from_parent tables).
func (ids IDs) Leaf() bool {
	return ids.TableUplink != 0 && ids.ActionSetUplink != 0 && ids.TableFromParent != 0 && ids.ActionSetParentResult != 0
}

// DefaultIDs are the ids of the main P4Info.
func DefaultIDs() IDs {
	return IDs{
		TableWorkers: TableWorkersID, TableReplyAddress: TableReplyAddressID,
		ActionSetWorker: ActionSetWorkerID, ActionSetReply: ActionSetReplyID,
		CounterStats:       CounterStatsID,
		RegisterPoolBitmap: RegisterPoolBitmapID, RegisterPoolCount: RegisterPoolCountID,
	}
}

// lookup finds the preamble whose name is name, or name under a pipeline
// instance prefix ("pipe.SwitchMLIngress.workers", as the Tofino compiler
// names objects); an alias does not count, so that a program with a
// same-named object elsewhere cannot be mistaken for ours.
func lookup(pres []*p4configv1.Preamble, name string) *p4configv1.Preamble {
	for _, p := range pres {
		if Names(p.GetName(), name) {
			return p
		}
	}
	return nil
}

// Names reports whether n, a name in a P4Info or a BF Runtime schema
// (bfrt.json), is name itself or name under one pipeline instance prefix
// ("pipe.SwitchMLIngress.workers").
func Names(n, name string) bool {
	return n == name || (strings.HasSuffix(n, "."+name) && !strings.Contains(strings.TrimSuffix(n, "."+name), "."))
}

func preambles[T interface{ GetPreamble() *p4configv1.Preamble }](xs []T) []*p4configv1.Preamble {
	out := make([]*p4configv1.Preamble, len(xs))
	for i, x := range xs {
		out[i] = x.GetPreamble()
	}
	return out
}

// Resolve finds in info every object the controller uses and checks that
// the match fields and action parameters it writes have the ids and widths
// it writes them with. The error lists everything missing or different, so
// that a P4Info of another program, or of another version of this one, is
// refused before anything is written to the switch.
func Resolve(info *p4configv1.P4Info) (IDs, error) {
	r := &resolver{info: info}
	ids := r.objects()
	r.checkMain(ids)
	ids.LeafSlotDelta = r.leafSlotDelta(ids)
	r.checkLeaf(ids)
	if len(r.errs) > 0 {
		return IDs{}, fmt.Errorf("p4info: not the SwitchML pipeline the controller drives: %w", errors.Join(r.errs...))
	}
	return ids, nil
}

// resolver is one Resolve: the P4Info, and every problem found in it.
type resolver struct {
	info *p4configv1.P4Info
	errs []error
	// note follows a missing parameter: the form the program was taken to
	// have, for the leaf's actions.
	note string
}

func (r *resolver) errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, args...))
}

// find is the id of the object named name among pres, 0 when there is none
// (a problem when it is required).
func (r *resolver) find(pres []*p4configv1.Preamble, kind, name string, required bool) uint32 {
	p := lookup(pres, name)
	if p == nil {
		if required {
			r.errorf("no %s %s", kind, name)
		}
		return 0
	}
	return p.GetId()
}

// objects finds the ids of every object the controller uses.
func (r *resolver) objects() IDs {
	var ids IDs
	info := r.info
	tables, actions := preambles(info.GetTables()), preambles(info.GetActions())
	ids.TableWorkers = r.find(tables, "table", TableWorkers, true)
	ids.TableReplyAddress = r.find(tables, "table", TableReplyAddress, true)
	ids.ActionSetWorker = r.find(actions, "action", ActionSetWorker, true)
	ids.ActionSetReply = r.find(actions, "action", ActionSetReply, true)
	ids.CounterStats = r.find(preambles(info.GetCounters()), "counter", CounterStats, false)
	if ids.CounterStats == 0 {
		// TNA counters are Tofino externs, listed apart from P4 counters.
		ids.CounterStats = r.find(externPreambles(info), "counter", CounterStats, true)
	}
	regs := append(preambles(info.GetRegisters()), externPreambles(info)...)
	ids.RegisterPoolCount = r.find(regs, "register", RegisterPoolCount, true)
	ids.RegisterPoolBitmap = r.find(regs, "register", RegisterPoolBitmap, false)
	ids.RegisterPoolBitmapPair = r.find(regs, "register", RegisterPoolBitmapPair, false)
	if ids.RegisterPoolBitmap == 0 && ids.RegisterPoolBitmapPair == 0 {
		r.errorf("no register %s (or %s)", RegisterPoolBitmap, RegisterPoolBitmapPair)
	}
	ids.RegisterPoolTag = r.find(regs, "register", RegisterPoolTag, false)
	ids.TableDropSimulator = r.find(tables, "table", TableDropSimulator, false)
	ids.ActionSetDropRates = r.find(actions, "action", ActionSetDropRates, false)
	ids.TableARPReply = r.find(tables, "table", TableARPReply, false)
	ids.ActionSendARPReply = r.find(actions, "action", ActionSendARPReply, false)
	ids.TableUplink = r.find(tables, "table", TableUplink, false)
	ids.ActionSetUplink = r.find(actions, "action", ActionSetUplink, false)
	ids.TableFromParent = r.find(tables, "table", TableFromParent, false)
	ids.ActionSetParentResult = r.find(actions, "action", ActionSetParentResult, false)
	return ids
}

// checkMain checks the fields and parameters of the switch's own tables
// and actions.
func (r *resolver) checkMain(ids IDs) {
	r.checkTable(ids.TableWorkers, TableWorkers, []field{{"hdr.ipv4.src_addr", WorkersSrcAddrID, 32}, {"hdr.udp.src_port", WorkersSrcPortID, 16}})
	r.checkTable(ids.TableReplyAddress, TableReplyAddress, []field{{"meta.job_id", ReplyJobID, 32}, {"meta.rank", ReplyRankID, 16}, {"meta.lane", ReplyLaneID, 8}})
	r.checkAction(ids.ActionSetWorker, ActionSetWorker, []field{
		{"job_id", SetWorkerJobID, 32}, {"rank", SetWorkerRank, 16}, {"num_workers", SetWorkerNumWorkers, 16},
		{"mgid", SetWorkerMgid, 16}, {"lane", SetWorkerLane, 8}, {"pool_base", SetWorkerPoolBase, 32}, {"pool_size", SetWorkerPoolSize, 32}})
	r.checkAction(ids.ActionSetReply, ActionSetReply, []field{{"dst_mac", SetReplyDstMAC, 48}, {"dst_ipv4", SetReplyDstIPv4, 32}, {"dst_port", SetReplyDstPort, 16}})
	r.checkTable(ids.TableDropSimulator, TableDropSimulator, []field{{"meta.job_id", 1, 32}, {"meta.rank", 2, 16}})
	r.checkAction(ids.ActionSetDropRates, ActionSetDropRates, []field{{"ingress_drop_rate", 1, 16}, {"egress_drop_rate", 2, 16}})
	r.checkTable(ids.TableARPReply, TableARPReply, []field{{"hdr.arp.target_proto_addr", 1, 32}})
	r.checkAction(ids.ActionSendARPReply, ActionSendARPReply, []field{{"switch_mac", 1, 48}})
}

// leafSlotDelta tells the leaf's form from set_uplink's parameters (or,
// without set_uplink, set_parent_result's): true for the TNA leaf's
// slot_delta.
func (r *resolver) leafSlotDelta(ids IDs) bool {
	up, pr := r.params(ids.ActionSetUplink), r.params(ids.ActionSetParentResult)
	switch {
	case up != nil && up[leafBases.param] != nil && up[leafSlotDelta.param] != nil:
		r.errorf("action %s has both parameters %s (the v1model leaf) and %s (the TNA leaf): the controller writes one form", ActionSetUplink, leafBases.param, leafSlotDelta.param)
	case up != nil && up[leafSlotDelta.param] != nil, up == nil && pr[leafSlotDelta.param] != nil:
		return true
	case up != nil && up[leafBases.param] == nil:
		r.errorf("action %s has neither parameter %s (32 bits, the v1model leaf) nor %s (16 bits, the TNA leaf)", ActionSetUplink, leafBases.param, leafSlotDelta.param)
	}
	return false
}

// checkLeaf checks every object of the leaf role against the program's
// form.
func (r *resolver) checkLeaf(ids IDs) {
	form := ids.leafForm()
	r.note = " (" + form.name + " form)"
	r.checkTable(ids.TableUplink, TableUplink, []field{{"meta.job_id", UplinkJobID, 32}})
	r.checkAction(ids.ActionSetUplink, ActionSetUplink, form.uplink)
	r.checkTable(ids.TableFromParent, TableFromParent, []field{{"hdr.ipv4.src_addr", FromParentSrcAddrID, 32},
		{"hdr.udp.src_port", FromParentSrcPortID, 16}, {"hdr.switchml.slot", FromParentSlotID, form.slotBits}})
	r.checkAction(ids.ActionSetParentResult, ActionSetParentResult, form.parentResult)
}

// checkTable checks the match fields of the table with id (none: 0).
func (r *resolver) checkTable(id uint32, name string, want []field) {
	if id == 0 {
		return
	}
	for _, t := range r.info.GetTables() {
		if t.GetPreamble().GetId() != id {
			continue
		}
		for _, w := range want {
			var got *p4configv1.MatchField
			for _, mf := range t.GetMatchFields() {
				if mf.GetName() == w.name {
					got = mf
				}
			}
			switch {
			case got == nil:
				r.errorf("table %s has no match field %s", name, w.name)
			case got.GetId() != w.id || got.GetBitwidth() != w.width:
				r.errorf("table %s match field %s is id %d, %d bits; the controller writes id %d, %d bits",
					name, w.name, got.GetId(), got.GetBitwidth(), w.id, w.width)
			}
		}
	}
}

// params is the parameters by name of the action with id (nil when it is
// absent).
func (r *resolver) params(id uint32) map[string]*p4configv1.Action_Param {
	if id == 0 {
		return nil
	}
	for _, a := range r.info.GetActions() {
		if a.GetPreamble().GetId() == id {
			out := map[string]*p4configv1.Action_Param{}
			for _, p := range a.GetParams() {
				out[p.GetName()] = p
			}
			return out
		}
	}
	return nil
}

// checkAction checks the parameters of the action with id (none: 0).
func (r *resolver) checkAction(id uint32, name string, want []field) {
	got := r.params(id)
	if got == nil {
		return
	}
	for _, w := range want {
		p := got[w.name]
		switch {
		case p == nil:
			r.errorf("action %s has no parameter %s%s", name, w.name, r.note)
		case p.GetId() != w.id || p.GetBitwidth() != w.width:
			r.errorf("action %s parameter %s is id %d, %d bits; the controller writes id %d, %d bits",
				name, w.name, p.GetId(), p.GetBitwidth(), w.id, w.width)
		}
	}
}

// externPreambles lists the preambles of architecture-specific externs
// (Tofino's Register and Counter).
func externPreambles(info *p4configv1.P4Info) []*p4configv1.Preamble {
	var out []*p4configv1.Preamble
	for _, e := range info.GetExterns() {
		for _, in := range e.GetInstances() {
			out = append(out, in.GetPreamble())
		}
	}
	return out
}
