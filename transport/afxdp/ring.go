package afxdp

import (
	"sync/atomic"
	"unsafe"
)

// xdpDesc is one entry of the RX and TX rings: where a packet sits in the
// UMEM and how long it is (struct xdp_desc).
type xdpDesc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// ringNeedWakeup is XDP_RING_NEED_WAKEUP: the kernel wants a system call
// before it looks at the ring again.
const ringNeedWakeup = 1

// ring is the index half of a single-producer single-consumer ring shared
// with the kernel. The producer and consumer indices run freely and wrap
// at 2^32; an entry lives at index&mask. Loads and stores of the shared
// indices are atomic, which orders them against the entries as the
// kernel's acquire/release pairs expect.
type ring struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	mask     uint32
	size     uint32
	// cachedProd and cachedCons are this side's view of the indices: the
	// side it owns is exact, the other side is refreshed when needed.
	cachedProd uint32
	cachedCons uint32
}

func (r *ring) needWakeup() bool {
	return r.flags != nil && atomic.LoadUint32(r.flags)&ringNeedWakeup != 0
}

// free reports how many entries a producer can write, refreshing the
// consumer index only when fewer than want are known to be free.
func (r *ring) free(want uint32) uint32 {
	f := r.size - (r.cachedProd - r.cachedCons)
	if f >= want {
		return f
	}
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r.size - (r.cachedProd - r.cachedCons)
}

// publish makes the entries written since the last publish visible to the
// consumer.
func (r *ring) publish() { atomic.StoreUint32(r.producer, r.cachedProd) }

// available reports how many entries a consumer can read (at most max),
// refreshing the producer index only when none are known.
func (r *ring) available(max uint32) uint32 {
	n := r.cachedProd - r.cachedCons
	if n == 0 {
		r.cachedProd = atomic.LoadUint32(r.producer)
		n = r.cachedProd - r.cachedCons
	}
	if n > r.size {
		// A producer that breaks the protocol must not make us read
		// entries twice; treat the ring as full.
		n = r.size
	}
	if n > max {
		n = max
	}
	return n
}

// release hands n consumed entries back to the producer.
func (r *ring) release(n uint32) {
	r.cachedCons += n
	atomic.StoreUint32(r.consumer, r.cachedCons)
}

// addrRing is the fill or completion ring: entries are UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

// push writes one address at the producer side; it reports false if the
// ring is full. Nothing is visible to the kernel before publish.
func (r *addrRing) push(addr uint64) bool {
	if r.free(1) == 0 {
		return false
	}
	r.addrs[r.cachedProd&r.mask] = addr
	r.cachedProd++
	return true
}

// at is the i-th entry past the consumer index (after available).
func (r *addrRing) at(i uint32) uint64 { return r.addrs[(r.cachedCons+i)&r.mask] }

// descRing is the RX or TX ring: entries are packet descriptors.
type descRing struct {
	ring
	descs []xdpDesc
}

// at is the i-th entry past the consumer index (after available).
func (r *descRing) at(i uint32) xdpDesc { return r.descs[(r.cachedCons+i)&r.mask] }

// slot is the i-th entry past the producer index, to be filled before
// advance and publish.
func (r *descRing) slot(i uint32) *xdpDesc { return &r.descs[(r.cachedProd+i)&r.mask] }

// advance moves the producer index over n filled slots.
func (r *descRing) advance(n uint32) { r.cachedProd += n }

// ringAt lays a ring over memory shared with the kernel: the indices and
// flags at their offsets and the entries from desc on.
func ringAt(mem []byte, prodOff, consOff, flagsOff uint64, size uint32) ring {
	base := unsafe.Pointer(unsafe.SliceData(mem))
	return ring{
		producer: (*uint32)(unsafe.Add(base, prodOff)),
		consumer: (*uint32)(unsafe.Add(base, consOff)),
		flags:    (*uint32)(unsafe.Add(base, flagsOff)),
		mask:     size - 1,
		size:     size,
	}
}

func addrsAt(mem []byte, off uint64, size uint32) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(mem)), off)), size)
}

func descsAt(mem []byte, off uint64, size uint32) []xdpDesc {
	return unsafe.Slice((*xdpDesc)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(mem)), off)), size)
}
