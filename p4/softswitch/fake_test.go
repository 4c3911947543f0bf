package softswitch

import (
	"fmt"
	"slices"

	"github.com/switchml/switchml-go/p4/p4info"
)

// fakeTarget is an in-memory Target for tests of the P4Runtime layer alone.
type fakeTarget struct {
	workers  map[WorkerKey]Worker
	replies  map[ReplyKey]Reply
	groups   map[uint16][]Replica
	regs     map[string][]int64
	counters []uint64
}

func newFakeTarget(slots, elements int) *fakeTarget {
	return &fakeTarget{
		workers: map[WorkerKey]Worker{},
		replies: map[ReplyKey]Reply{},
		groups:  map[uint16][]Replica{},
		regs: map[string][]int64{
			p4info.RegisterPoolBitmap:   make([]int64, 2*slots),
			p4info.RegisterPoolCount:    make([]int64, 2*slots),
			p4info.RegisterPoolExponent: make([]int64, 2*slots),
			p4info.RegisterPoolValues:   make([]int64, 2*slots*elements),
		},
		counters: make([]uint64, 9),
	}
}

func insert[K comparable, V any](m map[K]V, k K, v V) error {
	if _, ok := m[k]; ok {
		return fmt.Errorf("fake: %v: %w", k, ErrExists)
	}
	m[k] = v
	return nil
}

func modify[K comparable, V any](m map[K]V, k K, v V) error {
	if _, ok := m[k]; !ok {
		return fmt.Errorf("fake: %v: %w", k, ErrNotFound)
	}
	m[k] = v
	return nil
}

func del[K comparable, V any](m map[K]V, k K) error {
	if _, ok := m[k]; !ok {
		return fmt.Errorf("fake: %v: %w", k, ErrNotFound)
	}
	delete(m, k)
	return nil
}

func (f *fakeTarget) InsertWorker(k WorkerKey, w Worker) error { return insert(f.workers, k, w) }
func (f *fakeTarget) ModifyWorker(k WorkerKey, w Worker) error { return modify(f.workers, k, w) }
func (f *fakeTarget) DeleteWorker(k WorkerKey) error           { return del(f.workers, k) }
func (f *fakeTarget) Workers(yield func(WorkerKey, Worker) bool) {
	keys := make([]WorkerKey, 0, len(f.workers))
	for k := range f.workers {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b WorkerKey) int { return a.Compare(b) })
	for _, k := range keys {
		if !yield(k, f.workers[k]) {
			return
		}
	}
}
func (f *fakeTarget) InsertReply(k ReplyKey, r Reply) error { return insert(f.replies, k, r) }
func (f *fakeTarget) ModifyReply(k ReplyKey, r Reply) error { return modify(f.replies, k, r) }
func (f *fakeTarget) DeleteReply(k ReplyKey) error          { return del(f.replies, k) }
func (f *fakeTarget) Replies(yield func(ReplyKey, Reply) bool) {
	for k, v := range f.replies {
		if !yield(k, v) {
			return
		}
	}
}
func (f *fakeTarget) InsertMulticastGroup(id uint16, r []Replica) error {
	return insert(f.groups, id, slices.Clone(r))
}
func (f *fakeTarget) ModifyMulticastGroup(id uint16, r []Replica) error {
	return modify(f.groups, id, slices.Clone(r))
}
func (f *fakeTarget) DeleteMulticastGroup(id uint16) error { return del(f.groups, id) }
func (f *fakeTarget) MulticastGroups(yield func(uint16, []Replica) bool) {
	for k, v := range f.groups {
		if !yield(k, v) {
			return
		}
	}
}
func (f *fakeTarget) RegisterSize(name string) int { return len(f.regs[name]) }
func (f *fakeTarget) ReadRegister(name string, i int) (int64, error) {
	r := f.regs[name]
	if i < 0 || i >= len(r) {
		return 0, fmt.Errorf("fake: %s[%d] out of range", name, i)
	}
	return r[i], nil
}
func (f *fakeTarget) WriteRegister(name string, i int, v int64) error {
	r := f.regs[name]
	if i < 0 || i >= len(r) {
		return fmt.Errorf("fake: %s[%d] out of range", name, i)
	}
	r[i] = v
	return nil
}
func (f *fakeTarget) Counters(dst []uint64) []uint64 { return append(dst, f.counters...) }
