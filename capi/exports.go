package main

/*
#include <stdlib.h>
#include "switchml.h"

// cgo writes char* for a Go *C.char; these keep the const of switchml.h in
// the header cgo generates, so that the two headers agree.
typedef const char switchml_cchar;
typedef const switchml_config switchml_cconfig;
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/switchml/switchml-go/switchml"
)

// statusNamesC are allocated once and never freed: switchml_status_name
// returns them as constants.
var statusNamesC = func() []*C.char {
	names := make([]*C.char, len(statusNames)+1)
	for i, n := range statusNames {
		names[i] = C.CString(n)
	}
	names[len(statusNames)] = C.CString("SWITCHML_UNKNOWN_STATUS")
	return names
}()

// finish writes err's message into the caller's buffer and returns its
// status. A panic inside the call becomes SWITCHML_ERR_OTHER rather than
// a crash of the caller's process.
func finish(err error, buf *C.char, n C.size_t) C.int {
	st := statusOf(err)
	if err != nil {
		writeString(buf, n, err.Error())
	}
	return C.int(st)
}

func recovered(buf *C.char, n C.size_t, st *C.int) {
	if r := recover(); r != nil {
		*st = finish(fmt.Errorf("internal error in libswitchml (please report it): %v", r), buf, n)
	}
}

// writeWhole copies s, NUL-terminated, into the C buffer buf of n bytes,
// or, if it does not fit, writes nothing and says so, naming the length
// argument (field) and what s is.
func writeWhole(buf *C.char, n C.size_t, field, what, s string) error {
	if uint64(len(s))+1 > uint64(n) {
		return invalid("%s %d cannot hold the %s %q: pass at least %d bytes", field, uint64(n), what, s, len(s)+1)
	}
	writeString(buf, n, s)
	return nil
}

// writeString copies s into the C buffer buf of n bytes, truncated and
// NUL-terminated. Only the bytes it writes are taken as a Go slice, so an
// n beyond what an int holds or the address space has (a size_t the
// caller got wrong) costs nothing: it writes len(s)+1 bytes at most.
func writeString(buf *C.char, n C.size_t, s string) {
	if buf == nil || n == 0 {
		return
	}
	m := min(uint64(n), uint64(len(s))+1)
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(m))
	k := copy(dst[:len(dst)-1], s)
	dst[k] = 0
}

func goString(s *C.switchml_cchar) string {
	if s == nil {
		return ""
	}
	return C.GoString((*C.char)(unsafe.Pointer(s)))
}

//export switchml_abi_version
func switchml_abi_version() C.int { return C.SWITCHML_ABI_VERSION }

//export switchml_status_name
func switchml_status_name(status C.int) *C.switchml_cchar {
	i := int(status)
	if i < 0 || i >= len(statusNames) {
		i = len(statusNames)
	}
	return (*C.switchml_cchar)(unsafe.Pointer(statusNamesC[i]))
}

//export switchml_join
func switchml_join(cfg *C.switchml_cconfig, out *C.int64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	if cfg == nil || out == nil {
		return finish(invalid("cfg and session must not be NULL"), errBuf, errLen)
	}
	if cfg.join_timeout_ms < 0 || cfg.give_up_ms < 0 {
		return finish(invalid("join_timeout_ms (%d) and give_up_ms (%d) must not be negative: 0 takes the default", cfg.join_timeout_ms, cfg.give_up_ms), errBuf, errLen)
	}
	if int64(cfg.join_timeout_ms) > maxMillis || int64(cfg.give_up_ms) > maxMillis {
		return finish(invalid("join_timeout_ms (%d) and give_up_ms (%d) must be at most %d (about 292 years)", cfg.join_timeout_ms, cfg.give_up_ms, int64(maxMillis)), errBuf, errLen)
	}
	id, err := join(switchml.Config{
		Controller: goString(cfg.controller), Job: goString(cfg.job),
		Rank: int(cfg.rank), Workers: int(cfg.workers),
		Bind: goString(cfg.bind), Token: goString(cfg.token),
		Lanes: int(cfg.lanes), Window: int(cfg.window), PacketElements: int(cfg.packet_elements),
		JoinTimeout: time.Duration(cfg.join_timeout_ms) * time.Millisecond,
		GiveUp:      time.Duration(cfg.give_up_ms) * time.Millisecond,
		Extended:    cfg.extended != 0,
		Fallback:    goString(cfg.fallback), FallbackOnLoss: cfg.fallback_on_loss != 0,
		FallbackListen: goString(cfg.fallback_listen), FallbackPeers: splitPeers(goString(cfg.fallback_peers)),
		Transport: goString(cfg.transport), Sparse: cfg.sparse != 0,
		WireBits: int(cfg.wire_bits),
	})
	if err == nil {
		*out = C.int64_t(id)
	}
	return finish(err, errBuf, errLen)
}

//export switchml_allreduce
func switchml_allreduce(session C.int64_t, data unsafe.Pointer, count C.int64_t, dtype C.int, timeoutMS C.int64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	return finish(allreduce(int64(session), data, int64(count), int(dtype), int64(timeoutMS)), errBuf, errLen)
}

//export switchml_dtype_lookup
func switchml_dtype_lookup(name *C.switchml_cchar, code *C.int32_t, size *C.int32_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	if name == nil || code == nil || size == nil {
		return finish(invalid("name, code and size must not be NULL"), errBuf, errLen)
	}
	c, n, err := dtypeOf(goString(name))
	if err == nil {
		*code, *size = C.int32_t(c), C.int32_t(n)
	}
	return finish(err, errBuf, errLen)
}

//export switchml_barrier
func switchml_barrier(session C.int64_t, name *C.switchml_cchar, timeoutMS C.int64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	return finish(barrier(int64(session), goString(name), int64(timeoutMS)), errBuf, errLen)
}

//export switchml_broadcast
func switchml_broadcast(session C.int64_t, name *C.switchml_cchar, root C.int32_t, data unsafe.Pointer, size C.int64_t, timeoutMS C.int64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	return finish(broadcastAt(int64(session), goString(name), int(root), data, int64(size), int64(timeoutMS)), errBuf, errLen)
}

//export switchml_close
func switchml_close(session C.int64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	return finish(closeSession(int64(session)), errBuf, errLen)
}

//export switchml_fallback
func switchml_fallback(session C.int64_t, onRing *C.int32_t, why *C.char, whyLen C.size_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	if onRing == nil {
		return finish(invalid("on_ring must not be NULL"), errBuf, errLen)
	}
	active, reason, err := fallbackOf(int64(session))
	if err == nil {
		*onRing = 0
		if active {
			*onRing = 1
		}
		writeString(why, whyLen, reason)
	}
	return finish(err, errBuf, errLen)
}

//export switchml_transport
func switchml_transport(session C.int64_t, out *C.char, outLen C.size_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	if out == nil || outLen == 0 {
		return finish(invalid("out must not be NULL, out_len not 0"), errBuf, errLen)
	}
	t, err := transportOf(int64(session))
	if err != nil {
		return finish(err, errBuf, errLen)
	}
	return finish(writeWhole(out, outLen, "out_len", "transport", t), errBuf, errLen)
}

//export switchml_stats
func switchml_stats(session C.int64_t, allreduces, packets, sentBytes, elements *C.uint64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	s, err := statsOf(int64(session))
	if err != nil {
		return finish(err, errBuf, errLen)
	}
	for _, f := range []struct {
		out *C.uint64_t
		v   uint64
	}{{allreduces, s.AllReduces}, {packets, s.Packets}, {sentBytes, s.SentBytes}, {elements, s.Elements}} {
		if f.out != nil {
			*f.out = C.uint64_t(f.v)
		}
	}
	return finish(nil, errBuf, errLen)
}

//export switchml_counter
func switchml_counter(session C.int64_t, name *C.switchml_cchar, value *C.uint64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	if name == nil || value == nil {
		return finish(invalid("name and value must not be NULL"), errBuf, errLen)
	}
	v, err := counterOf(int64(session), goString(name))
	if err == nil {
		*value = C.uint64_t(v)
	}
	return finish(err, errBuf, errLen)
}

//export switchml_wire_bits
func switchml_wire_bits(session C.int64_t, code C.int, bits *C.int32_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	if bits == nil {
		return finish(invalid("bits must not be NULL"), errBuf, errLen)
	}
	b, err := wireBitsOf(int64(session), int(code))
	if err == nil {
		*bits = C.int32_t(b)
	}
	return finish(err, errBuf, errLen)
}

//export switchml_local_start
func switchml_local_start(out *C.int64_t, addr *C.char, addrLen C.size_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	return localStartExport("", out, addr, addrLen, errBuf, errLen)
}

//export switchml_local_start_transport
func switchml_local_start_transport(kind *C.switchml_cchar, out *C.int64_t, addr *C.char, addrLen C.size_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	return localStartExport(goString(kind), out, addr, addrLen, errBuf, errLen)
}

// localStartExport is switchml_local_start with the switch's transport.
func localStartExport(kind string, out *C.int64_t, addr *C.char, addrLen C.size_t, errBuf *C.char, errLen C.size_t) C.int {
	if out == nil || addr == nil || addrLen == 0 {
		return finish(invalid("sw and addr must not be NULL, addr_len not 0"), errBuf, errLen)
	}
	if kind != "" && kind != switchml.TransportUDP && kind != switchml.TransportShm {
		return finish(invalid("transport %q: the embedded switch takes udp or shm", kind), errBuf, errLen)
	}
	id, a, err := localStart(kind)
	if err != nil {
		return finish(err, errBuf, errLen)
	}
	if err := writeWhole(addr, addrLen, "addr_len", "controller address", a); err != nil {
		localStop(id)
		return finish(err, errBuf, errLen)
	}
	*out = C.int64_t(id)
	return C.SWITCHML_OK
}

//export switchml_local_stop
func switchml_local_stop(sw C.int64_t, errBuf *C.char, errLen C.size_t) (st C.int) {
	defer recovered(errBuf, errLen, &st)
	return finish(localStop(int64(sw)), errBuf, errLen)
}
