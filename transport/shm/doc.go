// Package shm moves SwitchML datagrams between processes of one host
// through shared memory, behind the same PacketConn interface as package
// transport's UDP sockets, so that workers and a software switch on one
// machine exchange packets without a system call per batch.
//
// # How it works
//
// Every Conn is a UDP socket on its address plus an inbox: a file in
// shared memory (Options.Dir, /dev/shm by default) named after the
// network namespace and the address, which the Conn creates, maps and
// holds an exclusive lock on for its lifetime. The inbox has a table of
// producer entries, each with its own single-producer, single-consumer
// ring of fixed-size slots. A Conn that sends to an address looks for that
// address's inbox in the same directory and network namespace; when it
// finds one whose owner is alive (its lock is held) and that has a free
// producer entry, it claims the entry and from then on copies datagrams to
// that address into its ring, with its own address as the source, and
// publishes each batch with one atomic store. A sender may also build
// datagrams straight in the ring (Reserve and Commit,
// transport.InPlaceWriter), which the worker's lanes do: the packet is
// quantized into the slot the switch reads it from. A sender that first
// reaches an inbox through Reserve sizes its ring's slots to the
// datagrams it asked for (the lane's packet), so that small ones lie
// close together, and writes that size into its entry for the reader.
// Before it builds in place, it allocates its whole ring in the file
// (fallocate), so that a file system out of space turns it back to
// copying (below) rather than faulting. Datagrams to any other
// destination, larger than the ring's slots, or beyond a full entry
// table go through the UDP socket, as does everything a peer without an
// inbox sends. A full ring drops the datagram, as a full socket buffer
// would; the protocol recovers it.
//
// Reads are zero-copy: each message points into the slot the datagram sits
// in, valid until the next read on the Conn, which hands the slots back to
// their producers. A reader drains the rings without a system call. When
// they are empty it raises a flag in the inbox, looks once more, and
// sleeps reading a FIFO beside the inbox (named after the inbox and the
// owner's random token, which the inbox's header holds) through the
// runtime's poller; a producer that finds the flag raised
// after publishing lowers it and writes one byte to the FIFO. So a busy
// reader costs no system calls, and an idle one one wake-up per batch that
// finds it asleep. The UDP socket is read by a goroutine of the Conn's,
// which hands each batch to the reader the same way and reads the next
// once the reader has taken it. Deadlines, SetReadDeadline and Close work
// through the FIFO.
//
// A multicast's copies share one buffer. With Options.ShareCopies (the
// software switch sets it) a WriteBatch that sends one buffer to several
// inboxes writes it once, into an outbox: a file of the writer's beside
// its inbox, named after it and the writer's token, which readers map
// read-only, and where the datagrams lie one after another, so that small
// ones share pages. Each inbox gets a reference (the token and the
// offset) in place of the bytes, and the reader's message points into the
// outbox.
// The writer reuses an outbox slot once every ring that referenced it has
// been read past the reference, which it learns from the heads it reads
// anyway; so a message from an outbox is valid exactly as long as one
// from the ring. A full outbox (a reader fell behind) means copies again,
// never a wait.
//
// Senders look an address up again every second: a new inbox is found, and
// one whose owner closed it or died (its lock is gone) is dropped, and
// traffic goes back to UDP. The owner frees the entries of producers that
// closed or whose process is gone, and their rings' memory. An inbox is
// made under a temporary name and renamed into place once complete and
// locked; Listen removes the inboxes of killed processes it finds (their
// lock is gone).
//
// # Requirements and limits
//
// Linux. A Conn needs a specific address (not 0.0.0.0 or ::): it is the
// source address written into the rings and the inbox's name. Only
// processes of the same user (the inbox is mode 0600) in the same network
// namespace and with the same Dir find each other; everything else is
// plain UDP. A reader that had not yet mapped a writer's outbox when the
// writer closed loses the datagrams it still had by reference, as it
// would those of a producer that died. A producer that dies in the middle
// of a batch loses that batch, nothing more. The inbox file is sparse:
// only the rings of senders take memory, up to Slots × about 9 KiB each,
// or Slots × the slot size a sender chose (2.3 MiB with the defaults and
// the largest slots). A copying write that faults on the inbox's memory
// (the file system is full, someone cut the file short) is an error for
// the call, and the destination goes over UDP from then on; it is not a
// crash.
package shm
