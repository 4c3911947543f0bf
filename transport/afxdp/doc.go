// Package afxdp moves SwitchML datagrams through an AF_XDP socket,
// bypassing the kernel's IP and UDP layers, behind the same PacketConn
// interface as package transport's UDP sockets.
//
// # How it works
//
// Listen takes an IPv4 address configured on a network interface. The
// first Conn on an interface and receive queue sets up what all Conns
// there share: a UMEM (frames in memory mapped by the process and the
// kernel, half for receiving, half for sending), one AF_XDP socket bound
// to the queue with its fill, completion, RX and TX rings, and an XDP
// program attached to the interface. The program steers unfragmented
// UDP-over-IPv4 packets (after at most one 802.1Q tag) whose destination
// address and port belong to a Conn into the socket; everything else (ARP,
// ICMP, TCP, other ports, fragments) goes on to the kernel untouched. The
// program is assembled in Go and needs no C compiler; the Conns' addresses
// live in a BPF hash map whose 6-byte key is the destination IPv4 address
// and UDP port, both in network byte order as they sit in the packet. The
// last Close detaches the program and frees the socket.
//
// Each Conn also binds an ordinary UDP socket to its address and keeps it
// for its lifetime. It reserves the port, and it carries the slow path:
// datagrams to destinations whose next hop's MAC address the kernel does
// not know yet (the kernel then resolves it), that route out of another
// interface or back to this host, or that exceed the MTU, are sent through
// it; and whatever the program leaves to the kernel for the Conn's address
// (fragments, other receive queues, datagrams from this host) is read from
// it. Stats counts both paths.
//
// Reads are zero-copy: each message points into the frame the datagram
// arrived in, valid until the next read on the Conn, when the frame goes
// back to the fill ring. The reader of any Conn drains the shared RX ring
// and hands datagrams for other Conns to their bounded queues, waking
// their readers. A blocked read waits in poll(2) on the socket, the kernel
// UDP socket and an eventfd that SetReadDeadline and Close signal. Writes
// build Ethernet, IPv4 (20-byte header, DF, TTL 64, incrementing ID) and
// UDP headers in a transmit frame around a copy of each payload, submit a
// batch to the TX ring at once and wake the kernel once per batch. The UDP
// checksum is 0 (allowed for IPv4; the link's CRC covers each hop) unless
// Options.UDPChecksum asks for it. Next hops come from the kernel's routing
// and neighbour tables over route netlink (github.com/vishvananda/netlink),
// cached for a second. Steady state reads and writes allocate nothing.
//
// # Requirements
//
// Linux 5.9 or later built with AF_XDP sockets (the program is attached
// through a BPF link, which also detaches it if the process dies) and a
// process that may load and attach XDP programs and open
// AF_XDP sockets: root, or CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (and a
// locked-memory limit that covers the UMEM, or CAP_IPC_LOCK). Supported
// reports whether this kernel and process qualify. Listen must run in the
// network namespace of the interface; the Conn can be used from any thread
// afterwards.
//
// The program runs in native mode (in the driver, for drivers with XDP
// support and veth) or generic mode (on socket buffers in the kernel's
// receive path, for any device, bridges included); Auto tries native
// first. In native mode on a driver with AF_XDP zero-copy support the
// socket shares the UMEM with the device; otherwise, and always in generic
// mode, the kernel copies each packet between the device and the UMEM.
//
// In generic mode the program can see a sender's segmentation-offload
// super-packet (one IPv4 and UDP header for a run of datagrams) when the
// sender is on this host, for example in another network namespace behind
// a veth or a bridge. Such packets carry an unfinished UDP checksum, and
// the program leaves every packet whose checksum holds exactly the
// unfinished value, or that is longer than the MTU allows, to the kernel,
// which splits it; those arrive through the slow path. Local senders reach
// the fast path by sending through AF_XDP themselves (checksum 0) or with
// checksum offload off on their device (ethtool -K dev tx off).
//
// # Dependencies
//
// github.com/cilium/ebpf creates the maps, loads the program (written with
// its asm package) and attaches it: it is pure Go and maintained. The
// socket, UMEM and rings are set up directly with golang.org/x/sys/unix:
// that code is small, and keeping it here keeps the dependencies few.
// No cgo.
//
// # Limits
//
// IPv4 only. One receive queue per interface is served (Options.Queue);
// datagrams arriving on other queues reach the Conn through the kernel, so
// on multi-queue NICs steer the traffic to that queue (ethtool -N) or use
// one queue (ethtool -L). Frames must hold an Ethernet frame of the
// interface's MTU after 256 bytes of kernel headroom, which caps the MTU
// at 3826 with 4 KiB pages; Listen refuses larger MTUs (ListenOrUDP then
// falls back to UDP sockets). Datagrams to a destination take the slow
// path until the kernel has resolved its neighbour. Received UDP checksums
// are not verified. The first Listen on an interface and queue fixes the
// Frames, FrameSize and Mode that later Conns there share.
package afxdp
