//go:build !linux

package afxdp

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/switchml/switchml-go/transport"
)

// Message is transport.Message.
type Message = transport.Message

var errUnsupported = errors.New("afxdp: AF_XDP sockets exist on Linux only")

var _ transport.PacketConn = (*Conn)(nil)

// Conn is a UDP endpoint whose datagrams move through an AF_XDP socket;
// on this system Listen always fails.
type Conn struct{}

// Listen fails: AF_XDP sockets exist on Linux only.
func Listen(addr netip.AddrPort, opts Options) (*Conn, error) { return nil, errUnsupported }

// Supported reports why AF_XDP cannot be used here.
func Supported() error { return errUnsupported }

func (c *Conn) LocalAddr() netip.AddrPort                        { return netip.AddrPort{} }
func (c *Conn) Batch() int                                       { return 0 }
func (c *Conn) Coalesced() uint64                                { return 0 }
func (c *Conn) Interface() string                                { return "" }
func (c *Conn) Mode() Mode                                       { return Auto }
func (c *Conn) ZeroCopy() bool                                   { return false }
func (c *Conn) Stats() Stats                                     { return Stats{} }
func (c *Conn) SetReadDeadline(t time.Time) error                { return net.ErrClosed }
func (c *Conn) Close() error                                     { return net.ErrClosed }
func (c *Conn) TryReadBatch(ms []Message) (int, error)           { return 0, net.ErrClosed }
func (c *Conn) WriteBatch(ms []Message) (int, error)             { return 0, net.ErrClosed }
func (c *Conn) ReadBatch(ms []Message, _ time.Time) (int, error) { return 0, net.ErrClosed }
