package softswitch

import (
	"errors"
	"net/netip"

	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/switchjob"
)

// Errors a Target returns (wrapped or as is) so that the P4Runtime service can
// map them to the canonical codes the specification requires.
var (
	ErrExists   = errors.New("entry already exists")  // ALREADY_EXISTS
	ErrNotFound = errors.New("entry not found")       // NOT_FOUND
	ErrFull     = errors.New("no room for the entry") // RESOURCE_EXHAUSTED
)

// WorkerKey is the key of SwitchMLIngress.workers: the IPv4 source address and
// UDP source port of one lane socket of one worker.
type WorkerKey = netip.AddrPort

// The action data and keys of the tables and multicast groups are the
// pipeline's own types: the service programs exactly what the pipeline holds.
type (
	// Worker is the set_worker action data of a workers entry.
	Worker = switchjob.Worker
	// ReplyKey is the key of SwitchMLEgress.reply_address.
	ReplyKey = pipeline.ReplyKey
	// Reply is the set_reply action data: where results for (job, rank, lane) go.
	Reply = pipeline.Reply
	// Replica is one copy made by a multicast group: the instance is the
	// rank the copy is addressed to (the reply_address lookup key).
	Replica = switchjob.Replica
)

// Target is the switch state the P4Runtime service programs. The software
// switch's pipeline implements it (see pipelineTarget); tests use a fake. The
// service serialises all calls with the lock it was given, so an
// implementation needs no locking of its own beyond what its data path needs.
//
// Register names are the fully qualified P4Info names (p4info.Register*).
// pool_values is addressed flat: element j of pool index idx is at
// idx*ValuesPerIndex() + j.
type Target interface {
	InsertWorker(WorkerKey, Worker) error
	ModifyWorker(WorkerKey, Worker) error
	DeleteWorker(WorkerKey) error
	Workers(yield func(WorkerKey, Worker) bool)

	InsertReply(ReplyKey, Reply) error
	ModifyReply(ReplyKey, Reply) error
	DeleteReply(ReplyKey) error
	Replies(yield func(ReplyKey, Reply) bool)

	InsertMulticastGroup(id uint16, replicas []Replica) error
	ModifyMulticastGroup(id uint16, replicas []Replica) error
	DeleteMulticastGroup(id uint16) error
	MulticastGroups(yield func(id uint16, replicas []Replica) bool)

	// RegisterSize is the number of cells of a register array; 0 if the
	// target has no register of that name.
	RegisterSize(name string) int
	ReadRegister(name string, index int) (int64, error)
	WriteRegister(name string, index int, value int64) error

	// Counters appends the packet count of every stats index to dst.
	Counters(dst []uint64) []uint64
}
