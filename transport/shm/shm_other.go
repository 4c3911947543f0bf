//go:build !linux

package shm

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/switchml/switchml-go/transport"
)

// Message is one datagram in a batch.
type Message = transport.Message

var errUnsupported = errors.New("shm: shared-memory inboxes need Linux")

// Conn is a shared-memory Conn; on this system Listen always fails.
type Conn struct{}

var _ transport.PacketConn = (*Conn)(nil)

// Listen fails on this system.
func Listen(addr netip.AddrPort, opts Options, udpOpts transport.Options) (*Conn, error) {
	return nil, errUnsupported
}

func (c *Conn) LocalAddr() netip.AddrPort                        { return netip.AddrPort{} }
func (c *Conn) Batch() int                                       { return 0 }
func (c *Conn) Coalesced() uint64                                { return 0 }
func (c *Conn) Inbox() string                                    { return "" }
func (c *Conn) Stats() Stats                                     { return Stats{} }
func (c *Conn) SetReadDeadline(t time.Time) error                { return net.ErrClosed }
func (c *Conn) Close() error                                     { return net.ErrClosed }
func (c *Conn) Flush()                                           {}
func (c *Conn) TryReadBatch(ms []Message) (int, error)           { return 0, net.ErrClosed }
func (c *Conn) WriteBatch(ms []Message) (int, error)             { return 0, net.ErrClosed }
func (c *Conn) ReadBatch(ms []Message, _ time.Time) (int, error) { return 0, net.ErrClosed }
