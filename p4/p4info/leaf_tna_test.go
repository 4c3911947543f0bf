package p4info_test

import (
	"net/netip"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/p4/tna"
	"github.com/switchml/switchml-go/p4/v1model"
)

// The ids bf-p4c gave the leaf role's objects in the Tofino 2 leaf P4Info.
const (
	tnaLeafUplink, tnaLeafSetUplink             = 33554690, 16777474
	tnaLeafFromParent, tnaLeafSetParentResult   = 33554691, 16777475
	tnaSlots                                    = 8192
	tnaSlotMask                                 = tnaSlots - 1
	leafSlotDeltaWidth, leafFromParentSlotWidth = 16, 13
)

func tnaLeafIDs(t *testing.T) (*p4configv1.P4Info, p4info.IDs) {
	t.Helper()
	info := parse(t, tna.P4InfoTofino2LeafText)
	ids, err := p4info.Resolve(info)
	if err != nil {
		t.Fatalf("the Tofino 2 leaf P4Info is refused: %v", err)
	}
	return info, ids
}

// TestResolveTNALeaf: the TNA leaf's P4Info resolves, in the slot_delta
// form, with its leaf tables and registers and the Tofino 2 job tag.
func TestResolveTNALeaf(t *testing.T) {
	info, ids := tnaLeafIDs(t)
	if !ids.Leaf() || !ids.LeafSlotDelta {
		t.Errorf("Leaf() %v, LeafSlotDelta %v; want both true", ids.Leaf(), ids.LeafSlotDelta)
	}
	if ids.TableUplink != tnaLeafUplink || ids.ActionSetUplink != tnaLeafSetUplink ||
		ids.TableFromParent != tnaLeafFromParent || ids.ActionSetParentResult != tnaLeafSetParentResult {
		t.Errorf("leaf ids: uplink %d/%d from_parent %d/%d", ids.TableUplink, ids.ActionSetUplink, ids.TableFromParent, ids.ActionSetParentResult)
	}
	if ids.RegisterPoolTag == 0 || ids.RegisterPoolBitmapPair == 0 || ids.TableWorkers == 0 {
		t.Errorf("the Tofino 2 program's objects do not resolve: %+v", ids)
	}
	for _, name := range []string{p4info.RegisterPoolWaiting, p4info.RegisterPoolUse} {
		if _, err := p4info.Register(info, name); err != nil {
			t.Error(err)
		}
	}
	// The other programs keep the bases form.
	for name, text := range map[string][]byte{"v1model": v1model.P4InfoText, "tofino2": tna.P4InfoTofino2Text} {
		if ids, err := p4info.Resolve(parse(t, text)); err != nil || ids.LeafSlotDelta {
			t.Errorf("%s: %v, LeafSlotDelta %v; want it resolved without slot_delta", name, err, ids.LeafSlotDelta)
		}
	}
}

// actionParams are an entry's action parameters by id, each checked to
// fit width bits.
func actionParams(t *testing.T, e *p4v1.TableEntry, widths map[uint32]int) map[uint32]uint64 {
	t.Helper()
	out := map[uint32]uint64{}
	for _, p := range e.GetAction().GetAction().GetParams() {
		w, ok := widths[p.GetParamId()]
		if !ok {
			t.Errorf("table %d: unexpected parameter id %d", e.GetTableId(), p.GetParamId())
			continue
		}
		v, err := p4info.Uint(p.GetValue(), w)
		if err != nil {
			t.Errorf("table %d parameter %d: %v", e.GetTableId(), p.GetParamId(), err)
		}
		out[p.GetParamId()] = v
	}
	if len(out) != len(widths) {
		t.Errorf("table %d: parameters %v, want ids %v", e.GetTableId(), out, widths)
	}
	return out
}

// TestUplinkEntriesSlotDelta: for the TNA leaf, set_uplink and
// set_parent_result carry the offsets between the partitions mod 65536
// in 16 bits, and adding them to a slot and keeping 13 bits (as the
// program does) maps each partition onto the other, slot for slot.
func TestUplinkEntriesSlotDelta(t *testing.T) {
	_, ids := tnaLeafIDs(t)
	for _, c := range []struct {
		poolBase, parentBase, size uint32
		up, down                   uint64
	}{
		{100, 40, 64, 65476, 60}, // the parent's partition lies below the leaf's
		{40, 100, 64, 60, 65476}, // and above
		{0, 8192 - 256, 256, 7936, 65536 - 7936},
		{8192 - 16, 0, 16, 65536 - 8176, 8176},
		{500, 500, 128, 0, 0},
	} {
		u := switchjob.LeafUplink{Port: 7, ParentMAC: [6]byte{2, 0, 0, 0, 0, 1}, Uplink: switchjob.Uplink{
			Parent: netip.MustParseAddrPort("10.2.0.1:48864"), ParentBase: c.parentBase, PoolBase: c.poolBase, PoolSize: c.size, MulticastGroup: 4}}
		up, from, err := p4info.UplinkEntries(ids, 9, u, true)
		if err != nil {
			t.Fatalf("pool %d, parent %d: %v", c.poolBase, c.parentBase, err)
		}
		if up.GetTableId() != tnaLeafUplink || up.GetAction().GetAction().GetActionId() != tnaLeafSetUplink ||
			from.GetTableId() != tnaLeafFromParent || from.GetAction().GetAction().GetActionId() != tnaLeafSetParentResult {
			t.Errorf("entry ids: uplink %d/%d from_parent %d/%d", up.GetTableId(), up.GetAction().GetAction().GetActionId(),
				from.GetTableId(), from.GetAction().GetAction().GetActionId())
		}
		upP := actionParams(t, up, map[uint32]int{p4info.SetUplinkPort: 9, p4info.SetUplinkParentMAC: 48, p4info.SetUplinkParentIPv4: 32,
			p4info.SetUplinkParentPort: 16, p4info.SetUplinkSlotDelta: leafSlotDeltaWidth})
		prP := actionParams(t, from, map[uint32]int{p4info.SetParentResultJobID: 32, p4info.SetParentResultMgid: 16,
			p4info.SetParentResultSlotDelta: leafSlotDeltaWidth})
		if upP[p4info.SetUplinkPort] != 7 || upP[p4info.SetUplinkParentIPv4] != 0x0a020001 || upP[p4info.SetUplinkParentPort] != 48864 ||
			upP[p4info.SetUplinkParentMAC] != 0x020000000001 || prP[p4info.SetParentResultJobID] != 9 || prP[p4info.SetParentResultMgid] != 4 {
			t.Errorf("pool %d, parent %d: set_uplink %v, set_parent_result %v", c.poolBase, c.parentBase, upP, prP)
		}
		upDelta, downDelta := upP[p4info.SetUplinkSlotDelta], prP[p4info.SetParentResultSlotDelta]
		if upDelta != c.up || downDelta != c.down {
			t.Errorf("pool %d, parent %d: slot_delta up %d, down %d; want %d, %d", c.poolBase, c.parentBase, upDelta, downDelta, c.up, c.down)
		}
		for _, i := range []uint32{0, c.size - 1} {
			leaf, parent := uint64(c.poolBase+i), uint64(c.parentBase+i)
			if got := (leaf + upDelta) & tnaSlotMask; got != parent {
				t.Errorf("pool %d, parent %d: leaf slot %d goes up to %d, want %d", c.poolBase, c.parentBase, leaf, got, parent)
			}
			if got := (parent + downDelta) & tnaSlotMask; got != leaf {
				t.Errorf("pool %d, parent %d: parent slot %d comes down to %d, want %d", c.poolBase, c.parentBase, parent, got, leaf)
			}
		}
		r := from.GetMatch()[2].GetRange()
		lo, errLo := p4info.Uint(r.GetLow(), leafFromParentSlotWidth)
		hi, errHi := p4info.Uint(r.GetHigh(), leafFromParentSlotWidth)
		if errLo != nil || errHi != nil || lo != uint64(c.parentBase) || hi != uint64(c.parentBase+c.size-1) {
			t.Errorf("from_parent slots %d..%d (%v, %v), want %d..%d in 13 bits", lo, hi, errLo, errHi, c.parentBase, c.parentBase+c.size-1)
		}
	}
}

// TestUplinkEntriesSlotDeltaRefuses: the TNA leaf's slots are 13 bits on
// both sides; the port keeps its 9 bits.
func TestUplinkEntriesSlotDeltaRefuses(t *testing.T) {
	_, ids := tnaLeafIDs(t)
	ok := switchjob.LeafUplink{Port: 1, Uplink: switchjob.Uplink{
		Parent: netip.MustParseAddrPort("10.2.0.1:48864"), ParentBase: 0, PoolBase: 0, PoolSize: 64, MulticastGroup: 1}}
	if _, _, err := p4info.UplinkEntries(ids, 3, ok, true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  func(*switchjob.LeafUplink)
		want string
	}{
		{"leaf partition past 8192", func(u *switchjob.LeafUplink) { u.PoolBase = tnaSlots - 63 }, "slots 8129..8192 on the leaf exceed the program's 13-bit"},
		{"leaf partition beyond 8192", func(u *switchjob.LeafUplink) { u.PoolBase = 9000 }, "on the leaf exceed"},
		{"parent partition past 8192", func(u *switchjob.LeafUplink) { u.ParentBase = tnaSlots - 63 }, "slots 8129..8192 at the parent exceed the program's 13-bit"},
		{"port", func(u *switchjob.LeafUplink) { u.Port = 512 }, "port 512 exceeds"},
		{"empty", func(u *switchjob.LeafUplink) { u.PoolSize = 0 }, "empty partition"},
	} {
		u := ok
		c.set(&u)
		_, _, err := p4info.UplinkEntries(ids, 3, u, true)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// The last slots of both partitions are the program's last slot.
	edge := ok
	edge.PoolBase, edge.ParentBase = tnaSlots-64, tnaSlots-64
	if _, _, err := p4info.UplinkEntries(ids, 3, edge, true); err != nil {
		t.Errorf("partitions ending at slot 8191: %v", err)
	}
	// The v1model leaf's 14-bit slots still take a partition there.
	v1, err := p4info.Resolve(parse(t, v1model.P4InfoText))
	if err != nil {
		t.Fatal(err)
	}
	far := ok
	far.PoolBase, far.ParentBase = 9000, 9000
	if _, _, err := p4info.UplinkEntries(v1, 3, far, true); err != nil {
		t.Errorf("v1model leaf, slots 9000..9063: %v", err)
	}
}

// TestResolveRefusesIncompleteLeaf: a leaf whose actions have neither
// complete form is refused, naming what is missing.
func TestResolveRefusesIncompleteLeaf(t *testing.T) {
	dropParam := func(a *p4configv1.Action, name string) {
		for i, p := range a.GetParams() {
			if p.GetName() == name {
				a.Params = append(a.Params[:i], a.Params[i+1:]...)
				return
			}
		}
		t.Fatalf("action %s has no parameter %s to drop", a.GetPreamble().GetName(), name)
	}
	action := func(info *p4configv1.P4Info, name string) *p4configv1.Action {
		a, err := p4info.Action(info, name)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		name   string
		text   []byte
		mutate func(*p4configv1.P4Info)
		want   []string
	}{
		{"TNA set_uplink without slot_delta", tna.P4InfoTofino2LeafText, func(i *p4configv1.P4Info) { dropParam(action(i, p4info.ActionSetUplink), "slot_delta") },
			[]string{"action SwitchMLIngress.set_uplink has neither parameter parent_base (32 bits, the v1model leaf) nor slot_delta (16 bits, the TNA leaf)"}},
		{"v1model set_uplink without parent_base", v1model.P4InfoText, func(i *p4configv1.P4Info) { dropParam(action(i, p4info.ActionSetUplink), "parent_base") },
			[]string{"action SwitchMLIngress.set_uplink has neither parameter parent_base"}},
		{"TNA set_parent_result without slot_delta", tna.P4InfoTofino2LeafText, func(i *p4configv1.P4Info) {
			dropParam(action(i, p4info.ActionSetParentResult), "slot_delta")
		}, []string{"action SwitchMLIngress.set_parent_result has no parameter slot_delta (the TNA leaf's form)"}},
		{"TNA slot_delta of 32 bits", tna.P4InfoTofino2LeafText, func(i *p4configv1.P4Info) {
			a := action(i, p4info.ActionSetUplink)
			a.Params[4].Bitwidth = 32
		}, []string{"set_uplink parameter slot_delta is id 5, 32 bits; the controller writes id 5, 16 bits"}},
		{"TNA from_parent on 14-bit slots", tna.P4InfoTofino2LeafText, func(i *p4configv1.P4Info) {
			tb, err := p4info.Table(i, p4info.TableFromParent)
			if err != nil {
				t.Fatal(err)
			}
			tb.MatchFields[2].Bitwidth = 14
		}, []string{"match field hdr.switchml.slot is id 3, 14 bits; the controller writes id 3, 13 bits"}},
		{"mixed forms", tna.P4InfoTofino2LeafText, func(i *p4configv1.P4Info) {
			a := action(i, p4info.ActionSetParentResult)
			a.Params[2] = &p4configv1.Action_Param{Id: 3, Name: "pool_base", Bitwidth: 32}
			a.Params = append(a.Params, &p4configv1.Action_Param{Id: 4, Name: "parent_base", Bitwidth: 32})
		}, []string{"set_parent_result has no parameter slot_delta (the TNA leaf's form)"}},
		{"both forms", v1model.P4InfoText, func(i *p4configv1.P4Info) {
			a := action(i, p4info.ActionSetUplink)
			a.Params = append(a.Params, &p4configv1.Action_Param{Id: 6, Name: "slot_delta", Bitwidth: 16})
		}, []string{"has both parameters parent_base (the v1model leaf) and slot_delta (the TNA leaf)"}},
	} {
		info := parse(t, c.text)
		c.mutate(info)
		_, err := p4info.Resolve(info)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range append(c.want, "not the SwitchML pipeline the controller drives") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", c.name, err, w)
			}
		}
	}
}
