// Package switchjob is the vocabulary of a job on a switch, shared by the
// switch's pipeline (p4/pipeline), the P4Info contract (p4/p4info) and the
// controller (p4/controller and its core): a worker lane's entry, the
// copies of a job's results, a leaf's uplink, where a job sits on the
// switch (Placement), the counters and the limits of the slot pool. It is
// plain data: no tables, no encoding, no I/O.
package switchjob

import (
	"fmt"
	"net/netip"
)

// Limits of a switch's memory.
const (
	MaxSlots      = 1 << 20 // memory, not format, bound: 2*MaxSlots*MaxElements int32s
	MaxWorkersCap = 1 << 16 // ranks are 16-bit in the workers table
)

// Worker is the action data of set_worker: what the switch holds for one
// lane socket of one rank of a job.
type Worker struct {
	JobID          uint32 // the switch's id of the job (partition owner), not the allreduce sequence
	Rank           uint16
	NumWorkers     uint16
	MulticastGroup uint16
	Lane           uint8
	PoolBase       uint32 // first slot of the job's partition
	PoolSize       uint32 // number of slots of the partition
}

// Replica is one copy made by a multicast group: the port it leaves by,
// and Instance (the replication id), the rank the copy is for.
type Replica struct {
	EgressPort uint32
	Instance   uint16
}

// Uplink is the action data of set_parent: it makes a switch a leaf of a
// parent switch for one job. Once all of the job's workers there have
// contributed to a slot use, the partial sums (still int32, with the
// exponent maximum) go to Parent instead of back to the workers; the
// parent sees the leaf as one worker of its own job. The parent's result
// replaces the partial sums in the slot and is multicast to the workers.
type Uplink struct {
	// Parent is the parent switch's data-plane address. Results coming from
	// it are recognised by this source address.
	Parent netip.AddrPort
	// ParentBase is the first slot of the job's partition at the parent;
	// slot PoolBase+i here is slot ParentBase+i there.
	ParentBase uint32
	// PoolBase and PoolSize repeat the job's partition here, and
	// MulticastGroup its group, so a result from the parent finds its slot
	// and its workers without a workers-table entry.
	PoolBase, PoolSize uint32
	MulticastGroup     uint16
}

// Stat indexes the stats counter array. The first nine values are fixed by
// the P4Info counter description.
type Stat uint8

const (
	StatReceived                 Stat = iota // every packet handed to the pipeline
	StatAggregated                           // contributions added to a slot (fresh or not)
	StatMulticast                            // slot uses completed and multicast
	StatRetransmitReply                      // retransmissions answered by unicast
	StatDropNotWorker                        // source not in the workers table
	StatDropMalformed                        // header or payload rejected by wire.Parse, or too many elements
	StatDropOutOfPartition                   // slot outside the worker's pool partition
	StatDropIncompleteRetransmit             // retransmission for a slot still aggregating
	StatAbsorbed                             // contribution added to a slot still waiting for others: no packet out, nothing lost
	StatDropMismatch                         // element count differs from the slot use in progress
	StatDropNoGroup                          // completed, but the multicast group is missing
	StatReplicas                             // reply packets emitted by multicast
	StatDropNoReply                          // a reply skipped: no reply_address entry for (job, rank, lane)
	StatDropStale                            // a request older than the slot use it reaches (delayed or duplicated in the network)
	StatDropWrongShard                       // reached a data-plane shard other than the one whose loop serves its slot
	StatUpstream                             // a leaf's completed partial sums sent to its parent switch
	StatUpstreamResend                       // partial sums sent again: a worker retransmitted while the parent's result was missing
	StatFromParent                           // results from the parent switch, multicast to the leaf's workers
	StatDropBadTag                           // tag wrong or missing (an authenticated switch), or a tag the switch cannot check
	StatDropResult                           // a switch's result (wire.Header.Result) sent as a contribution: results never feed an aggregation
	NumStats
)

var statNames = [NumStats]string{
	"received", "aggregated", "multicast", "retransmit_reply", "drop_not_worker",
	"drop_malformed", "drop_out_of_partition", "drop_incomplete_retransmit",
	"absorbed", "drop_mismatch", "drop_no_group", "replicas", "drop_no_reply", "drop_stale",
	"drop_wrong_shard", "upstream", "upstream_resend", "from_parent", "drop_bad_tag",
	"drop_result",
}

// String returns the counter name used in logs and metrics.
func (s Stat) String() string {
	if s < NumStats {
		return statNames[s]
	}
	return fmt.Sprintf("stat(%d)", uint8(s))
}
