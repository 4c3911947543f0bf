package p4rt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WorkerEntry is one SwitchMLIngress.workers entry as read back: the lane
// socket Addr belongs to rank Rank of the job the switch knows as JobID.
type WorkerEntry struct {
	Addr netip.AddrPort
	switchjob.Worker
}

// ReplyEntry is one SwitchMLEgress.reply_address entry as read back: results
// for lane Lane of rank Rank of job JobID go to Addr (and MAC, for targets
// that rewrite it).
type ReplyEntry struct {
	JobID uint32
	switchjob.Lane
}

// keyUpdate builds the update of a job's key (the job-key extern); DELETE
// needs no key.
func keyUpdate(typ p4v1.Update_Type, jobID uint32, key []byte) (*p4v1.Update, error) {
	if typ == p4v1.Update_DELETE {
		key = nil
	}
	e, err := p4info.JobKeyEntry(jobID, key)
	if err != nil {
		return nil, err
	}
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_ExternEntry{ExternEntry: e}}}, nil
}

// installKey gives the job its key on the switch before any of its entries:
// the switch drops the job's packets until then. A key left by a job the
// switch kept from an earlier controller is replaced.
func (c *Client) installKey(ctx context.Context, p switchjob.Placement) error {
	u, err := keyUpdate(p4v1.Update_INSERT, p.JobID, p.Key)
	if err != nil {
		return err
	}
	err = c.Write(ctx, u)
	if status.Code(err) == codes.AlreadyExists {
		u.Type = p4v1.Update_MODIFY
		err = c.Write(ctx, u)
	}
	if err != nil {
		return fmt.Errorf("install job entries: key of switch job %d: %w", p.JobID, err)
	}
	return nil
}

// ChecksTags asks the switch whether it checks tags: it answers a Read of
// the job-key extern only then (err says why it did not).
func (c *Client) ChecksTags(ctx context.Context) (bool, error) {
	_, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_ExternEntry{ExternEntry: &p4v1.ExternEntry{ExternTypeId: p4info.ExternJobKeyType}}})
	return err == nil, err
}

// KeyJobs says whether the switch checks tags and jobs have keys there:
// then RemoveJob also removes the key of a job found on the switch, whose
// key the client never learnt.
func (c *Client) KeyJobs(on bool) {
	c.mu.Lock()
	c.keys = on
	c.mu.Unlock()
}

// writeBatch bounds the updates per Write so that a large pool reset stays
// well under gRPC's default 4 MiB message limit.
const writeBatch = 4096

func tableUpdate(typ p4v1.Update_Type, te *p4v1.TableEntry) *p4v1.Update {
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: te}}}
}

// WorkerUpdate builds the update of a workers entry (DELETE needs only the key)
// with the ids of one P4Info.
func WorkerUpdate(ids p4info.IDs, typ p4v1.Update_Type, addr netip.AddrPort, w switchjob.Worker) (*p4v1.Update, error) {
	ip, err := p4info.IPv4(addr.Addr())
	if err != nil {
		return nil, fmt.Errorf("p4rt: worker %v: %w", addr, err)
	}
	te := &p4v1.TableEntry{TableId: ids.TableWorkers, Match: p4info.WorkerKey(ip, addr.Port())}
	if typ != p4v1.Update_DELETE {
		te.Action = p4info.SetWorker(w)
		te.Action.GetAction().ActionId = ids.ActionSetWorker
	}
	return tableUpdate(typ, te), nil
}

// ReplyUpdate builds the update of the reply_address entry of lane r of job
// jobID.
func ReplyUpdate(ids p4info.IDs, typ p4v1.Update_Type, jobID uint32, r switchjob.Lane) (*p4v1.Update, error) {
	te := &p4v1.TableEntry{TableId: ids.TableReplyAddress, Match: p4info.ReplyKey(jobID, r.Rank, r.Lane)}
	if typ != p4v1.Update_DELETE {
		ip, err := p4info.IPv4(r.Addr.Addr())
		if err != nil {
			return nil, fmt.Errorf("p4rt: reply address of job %d rank %d: %w", jobID, r.Rank, err)
		}
		te.Action = p4info.SetReply(r.MAC, ip, r.Addr.Port())
		te.Action.GetAction().ActionId = ids.ActionSetReply
	}
	return tableUpdate(typ, te), nil
}

// GroupUpdate builds the update of a multicast group. Ports are sent in the
// (deprecated but universally supported) egress_port field, the one
// Stratum reads (BfrtPreManager::WriteMulticastGroupEntry in
// stratum/hal/lib/barefoot/bfrt_pre_manager.cc); the instance is the rank,
// which the egress sees as the replication id.
func GroupUpdate(typ p4v1.Update_Type, id uint16, replicas []switchjob.Replica) *p4v1.Update {
	mg := &p4v1.MulticastGroupEntry{MulticastGroupId: uint32(id)}
	if typ != p4v1.Update_DELETE {
		for _, r := range replicas {
			//lint:ignore SA1019 egress_port is the replica field PI (BMv2) and Stratum read
			mg.Replicas = append(mg.Replicas, &p4v1.Replica{PortKind: &p4v1.Replica_EgressPort{EgressPort: r.EgressPort}, Instance: uint32(r.Instance)})
		}
	}
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{
		PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: mg}}}}}
}

// RegisterUpdate builds a register write; index < 0 writes every cell.
func RegisterUpdate(registerID uint32, index int64, value uint64) *p4v1.Update {
	re := &p4v1.RegisterEntry{RegisterId: registerID, Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: p4info.Bytes(value)}}}
	if index >= 0 {
		re.Index = &p4v1.Index{Index: index}
	}
	return &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: re}}}
}

// InstallJob inserts a placed job's multicast group, uplink and reply
// entries, then its worker entries (so the switch accepts the job's packets
// only once it can answer them). On failure it removes what it installed.
func (c *Client) InstallJob(ctx context.Context, j switchjob.Placement) error {
	if j.Key != nil {
		if err := c.installKey(ctx, j); err != nil {
			return err
		}
	}
	var first, second []*p4v1.Update
	first = append(first, GroupUpdate(p4v1.Update_INSERT, j.Group, j.Replicas))
	if j.Uplink != nil {
		// Before the workers entries: a slot use completed by the job's
		// first packets must find where to send its partial sums.
		up, from, err := p4info.UplinkEntries(c.IDs(), j.JobID, *j.Uplink, true)
		if err != nil {
			return fmt.Errorf("install job entries: %w", err)
		}
		first = append(first, tableUpdate(p4v1.Update_INSERT, up), tableUpdate(p4v1.Update_INSERT, from))
	}
	for _, r := range j.Replies {
		u, err := ReplyUpdate(c.IDs(), p4v1.Update_INSERT, j.JobID, r)
		if err != nil {
			return err
		}
		first = append(first, u)
	}
	for _, w := range j.Workers {
		u, err := WorkerUpdate(c.IDs(), p4v1.Update_INSERT, w.Addr, j.Worker(w))
		if err != nil {
			return err
		}
		second = append(second, u)
	}
	err := c.Write(ctx, first...)
	if err == nil {
		if err = c.Write(ctx, second...); err != nil {
			c.undo(ctx, second, err)
			c.undo(ctx, first, nil)
		}
	} else {
		c.undo(ctx, first, err)
	}
	if err != nil {
		if j.Key != nil {
			u, _ := keyUpdate(p4v1.Update_DELETE, j.JobID, nil) // no key to wrap: cannot fail
			if kerr := c.Write(ctx, u); kerr != nil && status.Code(kerr) != codes.NotFound {
				c.log.Warn("controller: rollback of a job's key incomplete", "job_id", j.JobID, "err", kerr)
			}
		}
		return fmt.Errorf("install job entries: %w", err)
	}
	return nil
}

// undo deletes the entities of the inserts that went through; failed is the
// batch's error (nil: all went through).
func (c *Client) undo(ctx context.Context, inserts []*p4v1.Update, failed error) {
	var we *WriteError
	perUpdate := errors.As(failed, &we) && len(we.Updates) == len(inserts)
	var dels []*p4v1.Update
	for i, u := range inserts {
		if perUpdate && we.Updates[i] != nil {
			continue
		}
		dels = append(dels, &p4v1.Update{Type: p4v1.Update_DELETE, Entity: u.GetEntity()})
	}
	if err := c.Write(ctx, dels...); err != nil && status.Code(err) != codes.NotFound {
		c.log.Warn("controller: rollback of job entries incomplete", "err", err)
	}
}

// RemoveJob deletes a placed job's worker entries, then its reply entries,
// multicast group and uplink. Entries already gone are not an error.
func (c *Client) RemoveJob(ctx context.Context, j switchjob.Placement) error {
	var first, second []*p4v1.Update
	for _, w := range j.Workers {
		u, err := WorkerUpdate(c.IDs(), p4v1.Update_DELETE, w.Addr, switchjob.Worker{})
		if err != nil {
			return err
		}
		first = append(first, u)
	}
	for _, r := range j.Replies {
		u, err := ReplyUpdate(c.IDs(), p4v1.Update_DELETE, j.JobID, r)
		if err != nil {
			return err
		}
		second = append(second, u)
	}
	second = append(second, GroupUpdate(p4v1.Update_DELETE, j.Group, nil))
	if j.Uplink != nil {
		up, from, err := p4info.UplinkEntries(c.IDs(), j.JobID, *j.Uplink, false)
		if err != nil {
			return fmt.Errorf("remove job entries: %w", err)
		}
		second = append(second, tableUpdate(p4v1.Update_DELETE, up), tableUpdate(p4v1.Update_DELETE, from))
	}
	c.mu.Lock()
	keys := c.keys
	c.mu.Unlock()
	// A job a restarted controller found on the switch has its key there
	// too, though the controller never learnt it.
	if j.Key != nil || keys && len(j.Workers) > 0 {
		// After the workers entries: the job's packets are not taken
		// from then on, so none waits for a key that is gone.
		u, err := keyUpdate(p4v1.Update_DELETE, j.JobID, nil)
		if err != nil {
			return err
		}
		second = append(second, u)
	}
	for _, batch := range [][]*p4v1.Update{first, second} {
		if err := ignoreNotFound(c.Write(ctx, batch...)); err != nil {
			return fmt.Errorf("remove job entries: %w", err)
		}
	}
	return nil
}

func ignoreNotFound(err error) error {
	var we *WriteError
	if !errors.As(err, &we) || len(we.Updates) == 0 {
		return err
	}
	for _, u := range we.Updates {
		if u != nil && status.Code(u) != codes.NotFound {
			return err
		}
	}
	return nil
}

// RegisterBackend writes registers where the target's P4Runtime server
// cannot: BMv2's P4Runtime server implements no register access, its Thrift
// runtime server does (p4/bmv2.Thrift satisfies this).
type RegisterBackend interface {
	// RegisterWriteRange sets cells [first, end) of the register array
	// with the given fully qualified name.
	RegisterWriteRange(ctx context.Context, name string, first, end int, value uint64) error
}

// SetRegisterBackend makes ResetPool write through rb instead of P4Runtime.
func (c *Client) SetRegisterBackend(rb RegisterBackend) {
	c.mu.Lock()
	c.regs = rb
	c.mu.Unlock()
}

// KeepResetting makes ResetPool reset the pool even where the program tags
// slots with their job: a controller that adopted the pipeline an earlier
// one pushed does not know which switch job ids that one gave out, and a
// job id used again would match the tag a finished job left on its slots.
func (c *Client) KeepResetting() {
	c.mu.Lock()
	c.adopted = true
	c.mu.Unlock()
}

// ResetPool zeroes the worker bitmap and countdown of both sets of slots
// [base, base+size) on a switch with the given number of slots (register
// index set*slots + slot), so that a job starting there finds them idle.
// Values and exponents need no reset: the first contribution overwrites them.
// Where the program keeps a slot's two bitmaps in one pair register (TNA),
// that register is written, once per slot, with one bitstring (what
// Stratum takes). Every write is a MODIFY of one index, sent in batches of
// up to writeBatch updates per WriteRequest. With a RegisterBackend the writes
// go through it, a range per register and set.
func (c *Client) ResetPool(ctx context.Context, base, size, slots int) error {
	if base < 0 || size < 0 || base+size > slots {
		return fmt.Errorf("p4rt: pool reset [%d, %d) outside the switch's %d slots", base, base+size, slots)
	}
	ids := c.IDs()
	c.mu.Lock()
	rb, adopted := c.regs, c.adopted
	c.mu.Unlock()
	if ids.RegisterPoolTag != 0 && !adopted {
		// The program tags each (set, slot) with its job and treats a
		// new job's first packet there as the first of an idle set
		// (the Tofino 2 program): nothing to write. Not so on a switch
		// whose registers an earlier controller's jobs left (KeepResetting).
		return nil
	}
	if rb != nil {
		if ids.RegisterPoolBitmap == 0 {
			return fmt.Errorf("p4rt: pool reset through the register backend needs register %s", p4info.RegisterPoolBitmap)
		}
		names := []string{p4info.RegisterPoolBitmap, p4info.RegisterPoolCount}
		if ids.Leaf() {
			// A use left waiting for a parent's result must not take one.
			names = append(names, p4info.RegisterPoolWaiting)
		}
		for set := 0; set < 2; set++ {
			first := set*slots + base
			for _, name := range names {
				if err := rb.RegisterWriteRange(ctx, name, first, first+size, 0); err != nil {
					return fmt.Errorf("reset pool: %w", err)
				}
			}
		}
		return nil
	}
	ups := make([]*p4v1.Update, 0, writeBatch)
	add := func(u *p4v1.Update) error {
		ups = append(ups, u)
		if len(ups) < writeBatch {
			return nil
		}
		err := c.Write(ctx, ups...)
		ups = ups[:0]
		return err
	}
	for slot := base; slot < base+size; slot++ {
		if ids.RegisterPoolBitmapPair != 0 {
			// One bitstring for both sets: Stratum takes only bitstring
			// register data and writes it to the data field named
			// "<register>.f1" (WriteRegisterEntry in
			// stratum/hal/lib/barefoot/bfrt_table_manager.cc,
			// BfSdeWrapper::WriteRegister in bf_sde_wrapper.cc); f2 is
			// left to the SDE's zeroed data object (docs/tofino.md).
			if err := add(RegisterUpdate(ids.RegisterPoolBitmapPair, int64(slot), 0)); err != nil {
				return fmt.Errorf("reset pool: %w", err)
			}
		}
		for set := 0; set < 2; set++ {
			idx := int64(set*slots + slot)
			if ids.RegisterPoolBitmap != 0 {
				if err := add(RegisterUpdate(ids.RegisterPoolBitmap, idx, 0)); err != nil {
					return fmt.Errorf("reset pool: %w", err)
				}
			}
			if err := add(RegisterUpdate(ids.RegisterPoolCount, idx, 0)); err != nil {
				return fmt.Errorf("reset pool: %w", err)
			}
		}
	}
	if err := c.Write(ctx, ups...); err != nil {
		return fmt.Errorf("reset pool: %w", err)
	}
	return nil
}

// ReadWorkers returns the workers table.
func (c *Client) ReadWorkers(ctx context.Context) ([]WorkerEntry, error) {
	ents, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: c.IDs().TableWorkers}}})
	if err != nil {
		return nil, err
	}
	var out []WorkerEntry
	for _, e := range ents {
		m, p, err := entryValues(e.GetTableEntry())
		if err != nil {
			return nil, fmt.Errorf("p4rt: read workers: %w", err)
		}
		out = append(out, WorkerEntry{
			Addr:   netip.AddrPortFrom(p4info.AddrFromIPv4(uint32(m[p4info.WorkersSrcAddrID])), uint16(m[p4info.WorkersSrcPortID])),
			Worker: p4info.WorkerFromParams(p),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Compare(out[j].Addr) < 0 })
	return out, nil
}

// ReadReplies returns the reply_address table.
func (c *Client) ReadReplies(ctx context.Context) ([]ReplyEntry, error) {
	ents, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: c.IDs().TableReplyAddress}}})
	if err != nil {
		return nil, err
	}
	var out []ReplyEntry
	for _, e := range ents {
		m, p, err := entryValues(e.GetTableEntry())
		if err != nil {
			return nil, fmt.Errorf("p4rt: read reply addresses: %w", err)
		}
		out = append(out, ReplyEntry{JobID: uint32(m[p4info.ReplyJobID]), Lane: switchjob.Lane{
			Rank: uint16(m[p4info.ReplyRankID]), Lane: uint8(m[p4info.ReplyLaneID]),
			MAC:  p4info.MACFrom(p[p4info.SetReplyDstMAC]),
			Addr: netip.AddrPortFrom(p4info.AddrFromIPv4(uint32(p[p4info.SetReplyDstIPv4])), uint16(p[p4info.SetReplyDstPort])),
		}})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.JobID != b.JobID {
			return a.JobID < b.JobID
		}
		if a.Rank != b.Rank {
			return a.Rank < b.Rank
		}
		return a.Lane.Lane < b.Lane.Lane
	})
	return out, nil
}

// ReadMulticastGroups returns every multicast group.
func (c *Client) ReadMulticastGroups(ctx context.Context) (map[uint16][]switchjob.Replica, error) {
	ents, err := c.Read(ctx, GroupUpdate(p4v1.Update_DELETE, 0, nil).GetEntity())
	if err != nil {
		return nil, err
	}
	out := map[uint16][]switchjob.Replica{}
	for _, e := range ents {
		mg := e.GetPacketReplicationEngineEntry().GetMulticastGroupEntry()
		reps := []switchjob.Replica{}
		for _, r := range mg.GetReplicas() {
			//lint:ignore SA1019 still what most targets return
			port := r.GetEgressPort()
			if b := r.GetPort(); len(b) > 0 {
				p, err := p4info.Uint(b, 32)
				if err != nil {
					return nil, fmt.Errorf("p4rt: read multicast group %d: replica port: %w", mg.GetMulticastGroupId(), err)
				}
				port = uint32(p)
			}
			reps = append(reps, switchjob.Replica{EgressPort: port, Instance: uint16(r.GetInstance())})
		}
		out[uint16(mg.GetMulticastGroupId())] = reps
	}
	return out, nil
}

// ReadPlacements reads back the jobs the switch holds (workers, reply and
// multicast group entries), grouped by switch job id in the order the
// workers come: a job's partition, group and world are those of its first
// worker entry. Keys and uplinks are not read back.
func (c *Client) ReadPlacements(ctx context.Context) ([]switchjob.Placement, error) {
	workers, err := c.ReadWorkers(ctx)
	if err != nil {
		return nil, fmt.Errorf("read back the switch's workers: %w", err)
	}
	replies, err := c.ReadReplies(ctx)
	if err != nil {
		return nil, fmt.Errorf("read back the switch's replies: %w", err)
	}
	groups, err := c.ReadMulticastGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("read back the switch's multicast groups: %w", err)
	}
	return placementsOf(workers, replies, groups), nil
}

func placementsOf(workers []WorkerEntry, replies []ReplyEntry, groups map[uint16][]switchjob.Replica) []switchjob.Placement {
	var out []switchjob.Placement
	at := map[uint32]int{}
	for _, w := range workers {
		i, ok := at[w.JobID]
		if !ok {
			i = len(out)
			at[w.JobID] = i
			out = append(out, switchjob.Placement{
				JobID: w.JobID, PoolBase: w.PoolBase, PoolSize: w.PoolSize, Group: w.MulticastGroup, World: int(w.NumWorkers),
				Replicas: groups[w.MulticastGroup],
			})
		}
		out[i].Workers = append(out[i].Workers, switchjob.Lane{Rank: w.Rank, Lane: w.Lane, Addr: w.Addr})
	}
	for _, r := range replies {
		if i, ok := at[r.JobID]; ok {
			out[i].Replies = append(out[i].Replies, r.Lane)
		}
	}
	return out
}

// ReadRegister returns cells [first, first+count) of a register as unsigned
// values (an int<W> register's negative values come back in two's
// complement of their byte length).
func (c *Client) ReadRegister(ctx context.Context, registerID uint32, first, count int) ([]uint64, error) {
	qs := make([]*p4v1.Entity, count)
	for i := range qs {
		qs[i] = &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
			RegisterId: registerID, Index: &p4v1.Index{Index: int64(first + i)}}}}
	}
	ents, err := c.Read(ctx, qs...)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, count)
	for _, e := range ents {
		re := e.GetRegisterEntry()
		if i := int(re.GetIndex().GetIndex()) - first; i >= 0 && i < count {
			v, err := p4info.Uint(re.GetData().GetBitstring(), 64)
			if err != nil {
				return nil, fmt.Errorf("p4rt: read register %#x cell %d: %w", registerID, first+i, err)
			}
			out[i] = v
		}
	}
	return out, nil
}

// ReadCounters returns the packet counts of the stats counter, by index.
func (c *Client) ReadCounters(ctx context.Context) ([]int64, error) {
	ents, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: c.IDs().CounterStats}}})
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range ents {
		ce := e.GetCounterEntry()
		i := int(ce.GetIndex().GetIndex())
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i] = ce.GetData().GetPacketCount()
	}
	return out, nil
}

// ResetCounters zeroes every stats counter, one MODIFY per index (BMv2's
// P4Runtime server refuses a wildcard write to an indirect counter, and so
// does Stratum: BfrtCounterManager::WriteIndirectCounterEntry in
// stratum/hal/lib/barefoot/bfrt_counter_manager.cc).
func (c *Client) ResetCounters(ctx context.Context) error {
	ups := make([]*p4v1.Update, p4info.StatsSize)
	for i := range ups {
		ups[i] = &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
			CounterId: c.IDs().CounterStats, Index: &p4v1.Index{Index: int64(i)}, Data: &p4v1.CounterData{}}}}}
	}
	return c.Write(ctx, ups...)
}

// entryValues returns a table entry's exact match values by field id and its
// action's parameter values by parameter id.
func entryValues(te *p4v1.TableEntry) (match, params map[uint32]uint64, err error) {
	match, params = map[uint32]uint64{}, map[uint32]uint64{}
	for _, f := range te.GetMatch() {
		if match[f.GetFieldId()], err = p4info.Uint(f.GetExact().GetValue(), 64); err != nil {
			return nil, nil, fmt.Errorf("match field %d: %w", f.GetFieldId(), err)
		}
	}
	for _, p := range te.GetAction().GetAction().GetParams() {
		if params[p.GetParamId()], err = p4info.Uint(p.GetValue(), 64); err != nil {
			return nil, nil, fmt.Errorf("action parameter %d: %w", p.GetParamId(), err)
		}
	}
	return match, params, nil
}

// InstallARPReply makes the switch answer ARP requests for ip with mac, so
// that workers resolve the switch's data plane address (programs with the
// arp_reply table).
func (c *Client) InstallARPReply(ctx context.Context, ip netip.Addr, mac [6]byte) error {
	ids := c.IDs()
	if ids.TableARPReply == 0 || ids.ActionSendARPReply == 0 {
		return fmt.Errorf("p4rt: the pipeline has no %s table to answer ARP with", p4info.TableARPReply)
	}
	a, err := p4info.IPv4(ip)
	if err != nil {
		return fmt.Errorf("p4rt: ARP reply: %w", err)
	}
	te := &p4v1.TableEntry{TableId: ids.TableARPReply, Match: []*p4v1.FieldMatch{p4info.Exact(1, uint64(a))},
		Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{
			ActionId: ids.ActionSendARPReply, Params: []*p4v1.Action_Param{p4info.Param(1, p4info.MAC(mac))}}}}}
	err = c.Write(ctx, tableUpdate(p4v1.Update_INSERT, te))
	if status.Code(err) == codes.AlreadyExists { // a switch kept from an earlier controller
		err = c.Write(ctx, tableUpdate(p4v1.Update_MODIFY, te))
	}
	if err != nil {
		return fmt.Errorf("p4rt: install ARP reply for %v: %w", ip, err)
	}
	return nil
}

// SetSimulatedLoss makes the switch drop, for every job and rank, the given
// fractions of contributions on arrival (ingress) and of result copies on
// departure (egress), in programs with the drop_simulator table. Rates are
// quantized to 1/65536; 0 and 0 removes the entry's effect.
func (c *Client) SetSimulatedLoss(ctx context.Context, ingress, egress float64) error {
	ids := c.IDs()
	if ids.TableDropSimulator == 0 || ids.ActionSetDropRates == 0 {
		return fmt.Errorf("p4rt: the pipeline has no %s table to simulate loss with", p4info.TableDropSimulator)
	}
	rate := func(p float64) (uint64, error) {
		if !(p >= 0 && p < 1) {
			return 0, fmt.Errorf("p4rt: simulated loss %v, want 0 <= p < 1", p)
		}
		return uint64(p*65536 + 0.5), nil
	}
	in, err := rate(ingress)
	if err != nil {
		return err
	}
	out, err := rate(egress)
	if err != nil {
		return err
	}
	in, out = min(in, 65535), min(out, 65535)
	// Ternary fields all wildcarded (omitted): one entry matches everything.
	te := &p4v1.TableEntry{TableId: ids.TableDropSimulator, Priority: 1,
		Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{
			ActionId: ids.ActionSetDropRates, Params: []*p4v1.Action_Param{p4info.Param(1, in), p4info.Param(2, out)}}}}}
	err = c.Write(ctx, tableUpdate(p4v1.Update_INSERT, te))
	if status.Code(err) == codes.AlreadyExists {
		err = c.Write(ctx, tableUpdate(p4v1.Update_MODIFY, te))
	}
	if err != nil {
		return fmt.Errorf("p4rt: set simulated loss: %w", err)
	}
	return nil
}

// ClearJobs deletes every job entry on the switch: workers, replies,
// multicast groups, a P4 leaf's uplink entries, and the keys of the jobs
// those entries name when jobs have keys there (KeyJobs).
func (c *Client) ClearJobs(ctx context.Context) error {
	workers, err := c.ReadWorkers(ctx)
	if err != nil {
		return err
	}
	replies, err := c.ReadReplies(ctx)
	if err != nil {
		return err
	}
	groups, err := c.ReadMulticastGroups(ctx)
	if err != nil {
		return err
	}
	ids := c.IDs()
	var dels []*p4v1.Update
	for _, w := range workers {
		u, err := WorkerUpdate(ids, p4v1.Update_DELETE, w.Addr, w.Worker)
		if err != nil {
			return err
		}
		dels = append(dels, u)
	}
	for _, r := range replies {
		u, err := ReplyUpdate(ids, p4v1.Update_DELETE, r.JobID, r.Lane)
		if err != nil {
			return err
		}
		dels = append(dels, u)
	}
	for id := range groups {
		dels = append(dels, GroupUpdate(p4v1.Update_DELETE, id, nil))
	}
	c.mu.Lock()
	keys := c.keys
	c.mu.Unlock()
	if keys {
		jobs := map[uint32]bool{}
		for _, w := range workers {
			jobs[w.JobID] = true
		}
		for _, r := range replies {
			jobs[r.JobID] = true
		}
		for _, id := range slices.Sorted(maps.Keys(jobs)) {
			u, err := keyUpdate(p4v1.Update_DELETE, id, nil)
			if err != nil {
				return err
			}
			dels = append(dels, u)
		}
	}
	if ids.Leaf() {
		for _, table := range []uint32{ids.TableUplink, ids.TableFromParent} {
			ents, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: table}}})
			if err != nil {
				return err
			}
			for _, e := range ents {
				te := e.GetTableEntry()
				dels = append(dels, tableUpdate(p4v1.Update_DELETE, &p4v1.TableEntry{TableId: te.GetTableId(), Match: te.GetMatch(), Priority: te.GetPriority()}))
			}
		}
	}
	if len(dels) == 0 {
		return nil
	}
	return ignoreNotFound(c.Write(ctx, dels...))
}
