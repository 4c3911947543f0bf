package transport

// InboxCounts are the counts of a PacketConn that moves datagrams through
// memory-mapped inboxes beside its UDP socket (package shm's Conns).
type InboxCounts struct {
	// Received and Sent count datagrams read from the Conn's inbox and
	// written into its peers' inboxes, not through the UDP socket.
	Received, Sent uint64
	// Shared counts datagrams written into inboxes as a reference to one
	// copy in the Conn's outbox.
	Shared uint64
	// RingFull counts datagrams dropped at a peer's full ring.
	RingFull uint64
	// Wakeups counts the times the Conn woke a sleeping reader.
	Wakeups uint64
}

// Add adds o's counts to c's.
func (c *InboxCounts) Add(o InboxCounts) {
	c.Received += o.Received
	c.Sent += o.Sent
	c.Shared += o.Shared
	c.RingFull += o.RingFull
	c.Wakeups += o.Wakeups
}

// InboxCounter is a PacketConn that moves datagrams through inboxes and
// counts them: the software switch exports the counts of its sockets that
// are one, whatever their transport.
type InboxCounter interface {
	InboxCounts() InboxCounts
}
