package p4info

import (
	"fmt"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/switchml/switchml-go/p4/switchjob"
)

// Exact is an exact match on field id.
func Exact(id uint32, v uint64) *p4v1.FieldMatch {
	return &p4v1.FieldMatch{FieldId: id, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: Bytes(v)}}}
}

// Param is an action parameter.
func Param(id uint32, v uint64) *p4v1.Action_Param {
	return &p4v1.Action_Param{ParamId: id, Value: Bytes(v)}
}

// WorkerKey is the match of a SwitchMLIngress.workers entry.
func WorkerKey(srcIPv4 uint32, srcPort uint16) []*p4v1.FieldMatch {
	return []*p4v1.FieldMatch{Exact(WorkersSrcAddrID, uint64(srcIPv4)), Exact(WorkersSrcPortID, uint64(srcPort))}
}

// SetWorker is the set_worker action of a workers entry.
func SetWorker(w switchjob.Worker) *p4v1.TableAction {
	return &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{
		ActionId: ActionSetWorkerID,
		Params: []*p4v1.Action_Param{
			Param(SetWorkerJobID, uint64(w.JobID)),
			Param(SetWorkerRank, uint64(w.Rank)),
			Param(SetWorkerNumWorkers, uint64(w.NumWorkers)),
			Param(SetWorkerMgid, uint64(w.MulticastGroup)),
			Param(SetWorkerLane, uint64(w.Lane)),
			Param(SetWorkerPoolBase, uint64(w.PoolBase)),
			Param(SetWorkerPoolSize, uint64(w.PoolSize)),
		},
	}}}
}

// WorkerFromParams reads set_worker's parameters, by parameter id, as
// decoded from a write or a read (each value already checked against its
// width in the P4Info).
func WorkerFromParams(p map[uint32]uint64) switchjob.Worker {
	return switchjob.Worker{
		JobID:          uint32(p[SetWorkerJobID]),
		Rank:           uint16(p[SetWorkerRank]),
		NumWorkers:     uint16(p[SetWorkerNumWorkers]),
		MulticastGroup: uint16(p[SetWorkerMgid]),
		Lane:           uint8(p[SetWorkerLane]),
		PoolBase:       uint32(p[SetWorkerPoolBase]),
		PoolSize:       uint32(p[SetWorkerPoolSize]),
	}
}

// ReplyKey is the match of a SwitchMLEgress.reply_address entry.
func ReplyKey(jobID uint32, rank uint16, lane uint8) []*p4v1.FieldMatch {
	return []*p4v1.FieldMatch{Exact(ReplyJobID, uint64(jobID)), Exact(ReplyRankID, uint64(rank)), Exact(ReplyLaneID, uint64(lane))}
}

// SetReply is the set_reply action of a reply_address entry.
func SetReply(mac [6]byte, dstIPv4 uint32, dstPort uint16) *p4v1.TableAction {
	return &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{
		ActionId: ActionSetReplyID,
		Params:   []*p4v1.Action_Param{Param(SetReplyDstMAC, MAC(mac)), Param(SetReplyDstIPv4, uint64(dstIPv4)), Param(SetReplyDstPort, uint64(dstPort))},
	}}}
}

// Range is a range match on field id: values lo..hi, both included.
func Range(id uint32, lo, hi uint64) *p4v1.FieldMatch {
	return &p4v1.FieldMatch{FieldId: id, FieldMatchType: &p4v1.FieldMatch_Range_{Range: &p4v1.FieldMatch_Range{Low: Bytes(lo), High: Bytes(hi)}}}
}

// UplinkEntries are the entries of the leaf role of job jobID, with the
// ids of one P4Info: its SwitchMLIngress.uplink entry (where its partial sums go) and
// its SwitchMLIngress.from_parent entry (the parent's address and the
// job's slot range there: packets that are the job's results). DELETE needs
// only the keys; for it, withAction is false. The actions locate the job's
// slots at the parent in the program's form (IDs.LeafSlotDelta): both
// partitions' bases, or the offset from one partition to the other mod
// 65536, which the program adds to a slot of 13 bits; there both
// partitions must lie within the 8192 slots.
func UplinkEntries(ids IDs, jobID uint32, u switchjob.LeafUplink, withAction bool) (uplink, fromParent *p4v1.TableEntry, err error) {
	if !ids.Leaf() {
		return nil, nil, fmt.Errorf("p4info: the pipeline has no %s and %s tables: this program cannot be a leaf of a tree", TableUplink, TableFromParent)
	}
	ip, err := IPv4(u.Parent.Addr())
	if err != nil {
		return nil, nil, fmt.Errorf("p4info: parent of job %d: %w", jobID, err)
	}
	form := ids.leafForm()
	last := uint64(u.ParentBase) + uint64(u.PoolSize) - 1
	switch {
	case u.PoolSize == 0:
		return nil, nil, fmt.Errorf("p4info: uplink of job %d has an empty partition", jobID)
	case last >= 1<<form.slotBits:
		return nil, nil, fmt.Errorf("p4info: uplink of job %d: slots %d..%d at the parent exceed the program's %d-bit slot numbers", jobID, u.ParentBase, last, form.slotBits)
	case ids.LeafSlotDelta && uint64(u.PoolBase)+uint64(u.PoolSize) > 1<<form.slotBits:
		// A slot plus the offset wraps at 8192: a partition beyond would
		// land on other slots.
		return nil, nil, fmt.Errorf("p4info: uplink of job %d: slots %d..%d on the leaf exceed the program's %d-bit slot numbers (place the job's partition below slot %d)",
			jobID, u.PoolBase, uint64(u.PoolBase)+uint64(u.PoolSize)-1, form.slotBits, 1<<form.slotBits)
	case u.Port >= 1<<uplinkPortBits:
		return nil, nil, fmt.Errorf("p4info: uplink of job %d: port %d exceeds the program's %d-bit ports", jobID, u.Port, uplinkPortBits)
	}
	uplink = &p4v1.TableEntry{TableId: ids.TableUplink, Match: []*p4v1.FieldMatch{Exact(UplinkJobID, uint64(jobID))}}
	// A range match needs a priority (P4Runtime); the job's ranges at one
	// parent are disjoint, so all entries share one.
	fromParent = &p4v1.TableEntry{TableId: ids.TableFromParent, Priority: 1, Match: []*p4v1.FieldMatch{
		Exact(FromParentSrcAddrID, uint64(ip)), Exact(FromParentSrcPortID, uint64(u.Parent.Port())),
		Range(FromParentSlotID, uint64(u.ParentBase), last),
	}}
	if withAction {
		upParams := []*p4v1.Action_Param{
			Param(SetUplinkPort, uint64(u.Port)),
			Param(SetUplinkParentMAC, MAC(u.ParentMAC)),
			Param(SetUplinkParentIPv4, uint64(ip)),
			Param(SetUplinkParentPort, uint64(u.Parent.Port())),
		}
		prParams := []*p4v1.Action_Param{
			Param(SetParentResultJobID, uint64(jobID)),
			Param(SetParentResultMgid, uint64(u.MulticastGroup)),
		}
		if ids.LeafSlotDelta {
			// Unsigned differences wrap: uint16 keeps them mod 65536,
			// which is the offset mod 8192 too.
			upParams = append(upParams, Param(SetUplinkSlotDelta, uint64(uint16(u.ParentBase-u.PoolBase))))
			prParams = append(prParams, Param(SetParentResultSlotDelta, uint64(uint16(u.PoolBase-u.ParentBase))))
		} else {
			upParams = append(upParams, Param(SetUplinkParentBase, uint64(u.ParentBase)))
			prParams = append(prParams, Param(SetParentResultPoolBase, uint64(u.PoolBase)), Param(SetParentResultParentBase, uint64(u.ParentBase)))
		}
		uplink.Action = &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: ids.ActionSetUplink, Params: upParams}}}
		fromParent.Action = &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: ids.ActionSetParentResult, Params: prParams}}}
	}
	return uplink, fromParent, nil
}
