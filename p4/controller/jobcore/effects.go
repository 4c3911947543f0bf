package jobcore

// What the core hands its driver (Ready): answers to waiting calls, and
// placements to install on the switch or remove from it, as plain data.

import (
	"github.com/switchml/switchml-go/p4/switchjob"

	"github.com/switchml/switchml-go/jobpb"
)

// Answer is the core's reply to a waiting call.
type Answer struct {
	to    Waiter
	resp  *jobpb.RegisterResponse // a registration's
	data  []byte                  // a broadcast's
	ended string                  // a lease's: why the job ended
	cause EndCause                // a lease's: the cause's class
	err   error
}

// To is the call the answer is for.
func (a Answer) To() Waiter { return a.to }

// Err is the refusal a call is answered with (nil: it succeeded).
func (a Answer) Err() error { return a.err }

// Registered is a registration's answer: its session, or the ring.
func (a Answer) Registered() *jobpb.RegisterResponse { return a.resp }

// Data is a broadcast's answer: the root's data.
func (a Answer) Data() []byte { return a.data }

// Ended is a lease's answer: why its job ended, and the cause's class.
func (a Answer) Ended() (why string, cause EndCause) { return a.ended, a.cause }

// Install asks the driver to make the slots of a job's partition idle and
// give the switch what the job needs there (Place), then to report with
// Installed(Gen).
type Install struct {
	Gen   uint64
	Job   string
	Place switchjob.Placement
	// Claim is what the job's ranks prove themselves with, for the driver
	// to keep where a restarted controller finds it (see Adopt) before it
	// programs the switch.
	Claim Claim
}

// Claim is what proves the ranks of a job on the switch to a controller
// that restarted: it holds no secret, only hashes of them, so that whoever
// reads where it is kept learns the job's name, session and partition but
// cannot act as one of its ranks.
type Claim struct {
	JobID   uint32 `json:"job_id"`
	Job     string `json:"job"`
	Session uint64 `json:"session"`
	// Owner is the SHA-256 of the job's token (of the empty string for a
	// job without one).
	Owner [32]byte `json:"owner"`
	// Client is the identity whose quotas the job counts against.
	Client string `json:"client"`
	// Ranks are the SHA-256 of each rank's secret, in rank order.
	Ranks [][32]byte `json:"ranks"`
	// PoolBase, PoolSize and World must be what the switch holds for the
	// job id, or the claim is for another job.
	PoolBase uint32 `json:"pool_base"`
	PoolSize uint32 `json:"pool_size"`
	World    int    `json:"world"`
}

// Removal asks the driver to take a retired job's entries off the switch,
// then to report with Removed(Gen).
type Removal struct {
	Gen   uint64
	Job   string
	Place switchjob.Placement
}

// Effects is what the steps since the last Ready ask the driver to do.
type Effects struct {
	Answers  []Answer
	Installs []Install
	Removals []Removal
	// Forgets are the switch job ids whose claims (Install.Claim) no
	// longer prove anything: their jobs ended.
	Forgets []uint32
}
