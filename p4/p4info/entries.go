package p4info

import (
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/switchml/switchml-go/p4/pipeline"
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
func SetWorker(w pipeline.Worker) *p4v1.TableAction {
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
func WorkerFromParams(p map[uint32]uint64) pipeline.Worker {
	return pipeline.Worker{
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
