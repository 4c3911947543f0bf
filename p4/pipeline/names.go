package pipeline

import "github.com/switchml/switchml-go/p4/switchjob"

// The vocabulary's names under this package's, for the callers that still
// name them through the pipeline (p4/fabric, switchml's tests); the
// definitions are switchjob's.
type (
	Worker  = switchjob.Worker
	Replica = switchjob.Replica
	Stat    = switchjob.Stat
)

// The counters, as switchjob's.
const (
	StatReceived        = switchjob.StatReceived
	StatAggregated      = switchjob.StatAggregated
	StatMulticast       = switchjob.StatMulticast
	StatRetransmitReply = switchjob.StatRetransmitReply
	StatAbsorbed        = switchjob.StatAbsorbed
	StatReplicas        = switchjob.StatReplicas
	StatDropWrongShard  = switchjob.StatDropWrongShard
	StatUpstream        = switchjob.StatUpstream
	StatUpstreamResend  = switchjob.StatUpstreamResend
	StatFromParent      = switchjob.StatFromParent
	StatDropBadTag      = switchjob.StatDropBadTag
	NumStats            = switchjob.NumStats
)
