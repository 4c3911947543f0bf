package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

func join(cfg switchml.Config) (int64, error) {
	if cfg.Controller == "" {
		return 0, invalid("no controller address: set switchml_config.controller to the controller's host:port")
	}
	if cfg.Job == "" {
		return 0, invalid("no job name: set switchml_config.job to the same name on every rank")
	}
	s, err := switchml.Join(context.Background(), cfg)
	if err != nil {
		return 0, err
	}
	return sessions.add(&session{Session: s, cfg: cfg}), nil
}

// allreduce sums count values at data in place; code is a dtype's number
// in switchml.h (dtype.Codec.Code). data is the caller's memory: it is
// only used until the library's call returns, and the library's calls
// return only once every lane has stopped touching it.
func allreduce(id int64, data unsafe.Pointer, count int64, code int, timeoutMS int64) error {
	c, err := codecOf(code)
	if err != nil {
		return err
	}
	size := c.Size()
	switch {
	case count < 0:
		return invalid("count is %d: want the number of values, 0 or more", count)
	case count > 0 && data == nil:
		return invalid("data is NULL for %d values", count)
	case uintptr(data)%uintptr(size) != 0:
		return invalid("data at %#x is not aligned to its %d-byte values", uintptr(data), size)
	}
	n, err := byteLen(data, count, size, "count")
	if err != nil {
		return err
	}
	s, ctx, cancel, err := sessionCall(id, timeoutMS)
	if err != nil {
		return err
	}
	defer cancel()
	if count == 0 {
		return nil
	}
	return s.AllReduce(ctx, c, unsafe.Slice((*byte)(data), n))
}

// codecOf is the dtype numbered code in switchml.h.
func codecOf(code int) (dtype.Codec, error) {
	c, err := dtype.ByCode(code)
	if err != nil {
		return nil, invalid("%v: the SWITCHML_* codes of switchml.h, or switchml_dtype_lookup's for a name", err)
	}
	return c, nil
}

// maxBufferBytes bounds a buffer a C caller hands over: 2^56 bytes, as
// much as a 64-bit process can map with five-level page tables, and more
// than any machine it runs on has.
const maxBufferBytes = 1 << 56

// byteLen is the length in bytes of count values of size bytes each at
// data (count 0 or more), or a refusal when they would run past the end of
// the address space, beyond what an int counts or beyond maxBufferBytes:
// count*size computed blindly wraps, and a huge count would pass for a
// small buffer, or for none. field names the argument that holds count.
func byteLen(data unsafe.Pointer, count int64, size int, field string) (int, error) {
	room := ^uintptr(0) - uintptr(data) // bytes from data to the top of the address space
	room = min(room, math.MaxInt, maxBufferBytes)
	if uint64(count) > uint64(room)/uint64(size) {
		return 0, invalid("%s is %d: %d values of %d bytes each at %#x run past the end of the address space; pass the number of values in the buffer", field, count, count, size, uintptr(data))
	}
	return int(count) * size, nil
}

// dtypeOf looks a dtype up by name: its code for allreduce and the size
// of its values.
func dtypeOf(name string) (code, size int, err error) {
	c, err := dtype.ByName(name)
	if err != nil {
		return 0, 0, invalid("%v", err)
	}
	return c.Code(), c.Size(), nil
}

func barrier(id int64, name string, timeoutMS int64) error {
	s, ctx, cancel, err := sessionCall(id, timeoutMS)
	if err != nil {
		return err
	}
	defer cancel()
	return s.Barrier(ctx, name)
}

// broadcastAt is broadcast of the size bytes at data, the caller's memory.
func broadcastAt(id int64, name string, root int, data unsafe.Pointer, size, timeoutMS int64) error {
	if size < 0 || (size > 0 && data == nil) {
		return invalid("broadcast of %d bytes at %p: want a size of 0 or more and data for it", size, data)
	}
	n, err := byteLen(data, size, 1, "size")
	if err != nil {
		return err
	}
	if n > math.MaxInt32 {
		return invalid("size is %d: a broadcast carries at most %d bytes (it is meant for small data, through the controller)", size, math.MaxInt32)
	}
	var buf []byte
	if n > 0 {
		buf = unsafe.Slice((*byte)(data), n)
	}
	return broadcast(id, name, root, buf, timeoutMS)
}

// broadcast fills buf on every rank with root's buf.
func broadcast(id int64, name string, root int, buf []byte, timeoutMS int64) error {
	s, ctx, cancel, err := sessionCall(id, timeoutMS)
	if err != nil {
		return err
	}
	defer cancel()
	if root < 0 || root >= s.Workers() {
		return invalid("root %d is not a rank of this %d-rank job", root, s.Workers())
	}
	var send []byte
	if s.Rank() == root {
		send = buf
	}
	got, err := s.Broadcast(ctx, name, root, send)
	if err != nil {
		return err
	}
	if len(got) != len(buf) {
		return fmt.Errorf("%w: broadcast %q: root %d sent %d bytes, this rank expects %d", errMismatch, name, root, len(got), len(buf))
	}
	copy(buf, got)
	return nil
}

// splitPeers reads switchml_config.fallback_peers: comma-separated, nil
// when empty.
func splitPeers(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	peers := strings.Split(s, ",")
	for i := range peers {
		peers[i] = strings.TrimSpace(peers[i])
	}
	return peers
}

// fallbackOf says whether session id runs over the ring, and why.
func fallbackOf(id int64) (bool, string, error) {
	s, ok := sessions.get(id)
	if !ok {
		return false, "", noHandle("session", id)
	}
	active, why := s.Fallback()
	return active, why, nil
}

func transportOf(id int64) (string, error) {
	s, ok := sessions.get(id)
	if !ok {
		return "", noHandle("session", id)
	}
	return s.Transport(), nil
}

func statsOf(id int64) (switchml.Stats, error) {
	s, ok := sessions.get(id)
	if !ok {
		return switchml.Stats{}, noHandle("session", id)
	}
	return s.Stats(), nil
}

// counters are the Stats fields switchml_counter reads, by name.
var counters = []struct {
	name string
	get  func(switchml.Stats) uint64
}{
	{"allreduces", func(s switchml.Stats) uint64 { return s.AllReduces }},
	{"dense_calls", func(s switchml.Stats) uint64 { return s.DenseCalls }},
	{"failed", func(s switchml.Stats) uint64 { return s.Failed }},
	{"packets", func(s switchml.Stats) uint64 { return s.Packets }},
	{"retransmits", func(s switchml.Stats) uint64 { return s.Retransmits }},
	{"timeouts", func(s switchml.Stats) uint64 { return s.Timeouts }},
	{"sent_bytes", func(s switchml.Stats) uint64 { return s.SentBytes }},
	{"elements", func(s switchml.Stats) uint64 { return s.Elements }},
	{"ring", func(s switchml.Stats) uint64 { return s.Ring }},
}

// counterOf is session id's counter called name.
func counterOf(id int64, name string) (uint64, error) {
	names := make([]string, len(counters))
	for i, c := range counters {
		if c.name == name {
			st, err := statsOf(id)
			return c.get(st), err
		}
		names[i] = c.name
	}
	return 0, invalid("no counter is called %q: the counters are %s", name, strings.Join(names, ", "))
}

// wireBitsOf is the width values of the dtype numbered code travel at in
// session id.
func wireBitsOf(id int64, code int) (int, error) {
	c, err := codecOf(code)
	if err != nil {
		return 0, err
	}
	s, ok := sessions.get(id)
	if !ok {
		return 0, noHandle("session", id)
	}
	return s.cfg.WireWidth(c), nil
}

func closeSession(id int64) error {
	s, ok := sessions.take(id)
	if !ok {
		return noHandle("session", id)
	}
	return s.Close()
}

// localStartTimeout bounds the start of an embedded switch, which needs
// no network beyond loopback and is ready within a second when well.
const localStartTimeout = 30 * time.Second

func localStart(kind string) (int64, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), localStartTimeout)
	defer cancel()
	f, err := local.Start(ctx, local.Options{Transport: kind})
	if err != nil {
		return 0, "", fmt.Errorf("start the embedded switch and controller: %w", err)
	}
	return switches.add(f), f.ControllerAddr(), nil
}

func localStop(id int64) error {
	f, ok := switches.take(id)
	if !ok {
		return noHandle("embedded switch", id)
	}
	return f.Close()
}
