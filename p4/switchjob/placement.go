package switchjob

import (
	"fmt"
	"net/netip"
)

// Placement is where a job sits on a switch and what the switch holds for
// it, as plain data: the controller's core decides it, and the encoder of
// the switch's API writes it as the target's table entries, multicast
// group and key, or reads it back.
type Placement struct {
	JobID uint32 // the switch job id
	// PoolBase and PoolSize are the job's partition of the pool's slots.
	PoolBase, PoolSize uint32
	Group              uint16 // the job's multicast group
	World              int    // the job's ranks
	// Workers are the job's lane sockets, whose packets the switch takes;
	// Replies are where each rank's lanes get their results. They are the
	// same lanes for a job the core placed, and each as the switch holds
	// them for a job found there.
	Workers, Replies []Lane
	// Replicas are the copies of the job's results: the ports they leave
	// by, and the ranks they are for.
	Replicas []Replica
	// Key, on a switch that checks tags, is the job's data-plane key; nil
	// otherwise, and for a job found on the switch, whose key cannot be
	// read back.
	Key Key
	// Uplink, on a P4 switch that is a leaf of a tree, is where the job's
	// partial sums go and whose results come back. Nil otherwise: a
	// software leaf follows its parent for every job.
	Uplink *LeafUplink
}

// Lane is one lane socket of one rank, and its Ethernet address for
// targets that address results to it.
type Lane struct {
	Rank uint16
	Lane uint8
	Addr netip.AddrPort
	MAC  [6]byte
}

// Worker is the workers entry of lane l of the placed job.
func (p Placement) Worker(l Lane) Worker {
	return Worker{
		JobID: p.JobID, Rank: l.Rank, NumWorkers: uint16(p.World), MulticastGroup: p.Group,
		Lane: l.Lane, PoolBase: p.PoolBase, PoolSize: p.PoolSize,
	}
}

// LeafUplink is what a P4 leaf needs for one job's uplink: the pipeline's
// Uplink plus the switch port cabled to the parent and the parent's
// Ethernet address, which a P4 switch writes into the frame.
type LeafUplink struct {
	Uplink
	Port      uint32
	ParentMAC [6]byte
}

// Key is a job's data-plane key. It prints as a placeholder, so that
// logging a placement never shows it.
type Key []byte

// String hides the key.
func (k Key) String() string {
	if k == nil {
		return "none"
	}
	return "[secret]"
}

// Format hides the key from every fmt verb.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }
