package stratum_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/stratum"
	"github.com/switchml/switchml-go/p4/tna"
)

// fakeOutput writes a directory laid out as bf-p4c's output for target
// ("tofino" or "tofino2") and returns it with the bytes of its files.
func fakeOutput(t *testing.T, target string) (dir string, files map[string][]byte) {
	t.Helper()
	dir = t.TempDir()
	bin := "tofino.bin"
	if target == "tofino2" {
		bin = "tofino2.bin"
	}
	manifest := fmt.Sprintf(`{"target": %q, "programs": [{"program_name": "switchml.p4", "pipes": [
		{"pipe_id": 0, "pipe_name": "pipe", "files": {"context": {"path": "pipe/context.json"}}}]}]}`, target)
	files = map[string][]byte{
		"manifest.json":            []byte(manifest),
		"bfrt.json":                []byte(`{"schema_version": "1.0.0", "tables": []}`),
		"pipe/context.json":        []byte(`{"program_name": "switchml.p4"}`),
		filepath.Join("pipe", bin): {0x01, 0x02, 0x00, 0xff},
	}
	for name, b := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

// Pack's bytes decode with Stratum's bf.proto into the program's name,
// bfrt.json byte for byte and one profile holding the pipe's context.json
// and binary, on all four pipes.
func TestStratumPackDecodes(t *testing.T) {
	for _, target := range []string{"tofino", "tofino2"} {
		t.Run(target, func(t *testing.T) {
			dir, files := fakeOutput(t, target)
			b, err := stratum.Pack(dir)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := stratum.Unpack(b)
			if err != nil {
				t.Fatal(err)
			}
			bin := "pipe/tofino.bin"
			if target == "tofino2" {
				bin = "pipe/tofino2.bin"
			}
			if cfg.GetP4Name() != "switchml" || !bytes.Equal(cfg.GetBfruntimeInfo(), files["bfrt.json"]) || len(cfg.GetProfiles()) != 1 {
				t.Fatalf("config %v", cfg)
			}
			p := cfg.GetProfiles()[0]
			if p.GetProfileName() != "pipe" || !bytes.Equal(p.GetContext(), files["pipe/context.json"]) ||
				!bytes.Equal(p.GetBinary(), files[bin]) || !slices.Equal(p.GetPipeScope(), []uint32{0, 1, 2, 3}) {
				t.Errorf("profile %v", p)
			}
		})
	}
}

// A missing file is named.
func TestStratumPackNamesMissingFile(t *testing.T) {
	for _, missing := range []string{"manifest.json", "bfrt.json", "pipe/context.json", "pipe/tofino.bin"} {
		dir, _ := fakeOutput(t, "tofino")
		if err := os.Remove(filepath.Join(dir, missing)); err != nil {
			t.Fatal(err)
		}
		if _, err := stratum.Pack(dir); !errContains(err, missing) {
			t.Errorf("without %s: %v, want an error naming it", missing, err)
		}
	}
}

// Pipelines share out the four pipes as bf-p4c's conf generator does.
func TestStratumPipeScope(t *testing.T) {
	for _, c := range []struct {
		target string
		n, i   int
		want   []uint32
	}{
		{"tofino", 1, 0, []uint32{0, 1, 2, 3}},
		{"tofino", 2, 1, []uint32{1, 3}},
		{"tofino2", 2, 1, []uint32{2, 3}},
		{"tofino", 4, 2, []uint32{2}},
	} {
		if got := stratum.PipeScope(c.target, c.n, c.i); !slices.Equal(got, c.want) {
			t.Errorf("PipeScope(%s, %d, %d) = %v, want %v", c.target, c.n, c.i, got, c.want)
		}
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A whole job's control traffic, from the real controller through real
// registrations and leaves of a 3-rank job, goes to a P4Runtime server that
// serves the P4Info bf-p4c writes for the TNA program (checked in as
// p4/tna/switchml.p4info.txtpb; p4/programs' TestTNACompiles checks it is
// exactly the compiler's) and refuses what Stratum refuses. Every message
// is checked: ids against the compiler's P4Info, register data widths,
// update types, batching, the multicast group and the workers' mgid.
//
// On Tofino 2 the program tags slots with their job (pool_tag), and the
// same job makes no register write at all.
func TestStratumJobControlTraffic(t *testing.T) {
	t.Run("tofino", func(t *testing.T) { runStratumJob(t, "tofino", tna.P4InfoText, false) })
	t.Run("tofino2", func(t *testing.T) { runStratumJob(t, "tofino2", tna.P4InfoTofino2Text, false) })
	// A controller that finds the pipeline running (an earlier controller
	// pushed it) cannot know which job ids that one used: a reused id
	// would match a finished job's tag, so it resets the pool all the same.
	t.Run("tofino2 adopted", func(t *testing.T) { runStratumJob(t, "tofino2", tna.P4InfoTofino2Text, true) })
}

// runStratumJob runs the job; with adopt, a first controller pushes the
// pipeline and stops before the one that serves the job starts.
func runStratumJob(t *testing.T, chip string, p4infoText []byte, adopt bool) {
	rec := newRecorder(t, p4infoText)
	target := rec.serve(t)
	dir, _ := fakeOutput(t, chip)
	devcfg, err := stratum.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const world, lanes, window = 3, 2, 8
	sw, err := controller.TargetFor(controller.KindTofino, 0)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(rank int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(rank + 1)}) }
	port := func(rank int) uint32 { return uint32(8 * (rank + 1)) }
	sw.Ports = map[netip.Addr]uint32{}
	for r := 0; r < world; r++ {
		sw.Ports[addr(r)] = port(r)
	}
	start := func(ctx context.Context, ready chan<- net.Addr, done chan<- error) {
		done <- controller.Run(ctx, controller.Config{
			Target: target, Listen: "127.0.0.1:0", Dataplane: "10.0.0.254:48864", Switch: sw,
			P4Info: rec.info, DeviceConfig: devcfg, SwitchMAC: net.HardwareAddr{2, 0x53, 0x4d, 0x4c, 0, 0xfe},
			JobLimits: controller.JobLimits{LeaseGrace: time.Hour, JoinTimeout: time.Hour, MaxJobsPerClient: -1},
			Logger:    quiet, Ready: func(a net.Addr) { ready <- a },
		})
	}
	if adopt {
		firstCtx, stopFirst := context.WithCancel(ctx)
		ready, done := make(chan net.Addr, 1), make(chan error, 1)
		go start(firstCtx, ready, done)
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("first controller ended before serving: %v", err)
		}
		stopFirst()
		if err := <-done; err != nil {
			t.Fatalf("first controller: %v", err)
		}
	}
	ids0 := struct{ arp uint32 }{rec.id(t, p4info.TableARPReply)}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go start(runCtx, ready, done)
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	var jobsAddr net.Addr
	select {
	case jobsAddr = <-ready:
	case err := <-done:
		t.Fatalf("controller ended before serving: %v", err)
	}
	conn, err := grpc.NewClient(jobsAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := jobpb.NewJobServiceClient(conn)

	resps := make([]*jobpb.RegisterResponse, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		req := &jobpb.RegisterRequest{Job: "tofino", Rank: uint32(r), WorldSize: world, Lanes: lanes, Window: window, Elements: 64,
			Mac: []byte{2, 0, 0, 0, 0, byte(r + 1)}}
		for l := 0; l < lanes; l++ {
			req.LaneAddresses = append(req.LaneAddresses, netip.AddrPortFrom(addr(r), uint16(40000+l)).String())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[r], errs[r] = jobs.Register(ctx, req)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	_, active, _, _ := rec.snapshot()
	for r := 0; r < world; r++ {
		if _, err := jobs.Leave(ctx, &jobpb.LeaveRequest{Job: "tofino", Rank: uint32(r), SessionId: resps[r].GetSessionId(), RankSecret: resps[r].GetRankSecret()}); err != nil {
			t.Fatalf("leave rank %d: %v", r, err)
		}
	}
	if err := rec.await(ctx, func() bool { _, _, _, groups := rec.snapshot(); return groups == 0 }); err != nil {
		t.Fatalf("the job's multicast group was never deleted: %v", err)
	}
	pushes, writes, refused, _ := rec.snapshot()
	if adopt {
		// The ARP entry the first controller wrote is there: the second
		// one's INSERT is refused, and it modifies the entry instead.
		refused = slices.DeleteFunc(refused, func(r refusal) bool {
			return r.u.GetEntity().GetTableEntry().GetTableId() == ids0.arp && r.code == codes.AlreadyExists
		})
	}
	if len(refused) > 0 {
		t.Fatalf("the server refused, as Stratum would: %v", refused)
	}

	// The pipeline: pushed once, packed for stratum_bfrt.
	if len(pushes) != 1 || pushes[0].GetAction() != p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT ||
		!bytes.Equal(pushes[0].GetConfig().GetP4DeviceConfig(), devcfg) {
		t.Fatalf("pipeline pushes %d, want one VERIFY_AND_COMMIT with the packed config", len(pushes))
	}

	ids := struct{ arp, workers, replies, bitmap, count, setWorker, setReply, sendARP uint32 }{
		rec.id(t, p4info.TableARPReply), rec.id(t, p4info.TableWorkers), rec.id(t, p4info.TableReplyAddress),
		rec.id(t, p4info.RegisterPoolBitmapPair), rec.id(t, p4info.RegisterPoolCount),
		rec.id(t, p4info.ActionSetWorker), rec.id(t, p4info.ActionSetReply), rec.id(t, p4info.ActionSendARPReply),
	}
	base, size := int(resps[0].GetPoolBase()), int(resps[0].GetPoolSize())
	if size != lanes*window {
		t.Fatalf("pool size %d, want %d", size, lanes*window)
	}

	// Walk every update in order.
	type seen struct{ resets, resetRequests int }
	var s seen
	var mgid uint32
	bitmapIdx, countIdx := map[int64]bool{}, map[int64]bool{}
	workerAdds, workerDels, replyAdds, replyDels := 0, 0, 0, 0
	groupDeleted := false
	for wi, w := range writes {
		regs := 0
		for _, u := range w.GetUpdates() {
			e := u.GetEntity()
			switch {
			case e.GetRegisterEntry() != nil:
				re := e.GetRegisterEntry()
				regs++
				if u.GetType() != p4v1.Update_MODIFY || re.GetIndex() == nil {
					t.Errorf("register write %v: want a MODIFY of one index", u)
				}
				v, err := p4info.Uint(re.GetData().GetBitstring(), 64)
				if err != nil || v != 0 {
					t.Errorf("register write %v: want zero", u)
				}
				switch re.GetRegisterId() {
				case ids.bitmap:
					if len(re.GetData().GetBitstring()) > 4 {
						t.Errorf("pool_bitmap_pair data %x wider than its 32-bit f1", re.GetData().GetBitstring())
					}
					bitmapIdx[re.GetIndex().GetIndex()] = true
				case ids.count:
					if len(re.GetData().GetBitstring()) > 2 {
						t.Errorf("pool_count data %x wider than its 16 bits", re.GetData().GetBitstring())
					}
					countIdx[re.GetIndex().GetIndex()] = true
				default:
					t.Errorf("register %#x (%s) written; the reset writes pool_bitmap_pair and pool_count", re.GetRegisterId(), rec.names[re.GetRegisterId()])
				}
				s.resets++
			case e.GetPacketReplicationEngineEntry() != nil:
				mg := e.GetPacketReplicationEngineEntry().GetMulticastGroupEntry()
				switch u.GetType() {
				case p4v1.Update_INSERT:
					mgid = mg.GetMulticastGroupId()
					var got []string
					for _, rep := range mg.GetReplicas() {
						//lint:ignore SA1019 the field Stratum reads
						got = append(got, fmt.Sprintf("%d@%d", rep.GetInstance(), rep.GetEgressPort()))
					}
					want := []string{}
					for r := 0; r < world; r++ {
						want = append(want, fmt.Sprintf("%d@%d", r, port(r)))
					}
					slices.Sort(got)
					if !slices.Equal(got, want) {
						t.Errorf("group %d replicas (rank@port) %v, want %v", mgid, got, want)
					}
				case p4v1.Update_DELETE:
					if mg.GetMulticastGroupId() != mgid || workerDels != world*lanes {
						t.Errorf("group %d deleted with %d of %d worker entries gone (group %d installed)", mg.GetMulticastGroupId(), workerDels, world*lanes, mgid)
					}
					groupDeleted = true
				default:
					t.Errorf("multicast update %v", u.GetType())
				}
			case e.GetTableEntry() != nil:
				te := e.GetTableEntry()
				switch te.GetTableId() {
				case ids.arp:
					if (u.GetType() != p4v1.Update_INSERT && !(adopt && u.GetType() == p4v1.Update_MODIFY)) || te.GetAction().GetAction().GetActionId() != ids.sendARP {
						t.Errorf("arp_reply update %v", u)
					}
				case ids.workers:
					if u.GetType() == p4v1.Update_DELETE {
						workerDels++
						continue
					}
					a := te.GetAction().GetAction()
					p := map[uint32]uint64{}
					for _, x := range a.GetParams() {
						p[x.GetParamId()], _ = p4info.Uint(x.GetValue(), 32)
					}
					w := p4info.WorkerFromParams(p)
					if u.GetType() != p4v1.Update_INSERT || a.GetActionId() != ids.setWorker || mgid == 0 || uint32(w.MulticastGroup) != mgid ||
						int(w.PoolBase) != base || int(w.PoolSize) != size || int(w.NumWorkers) != world || w.JobID != resps[0].GetJobId() {
						t.Errorf("workers update %v: want an INSERT of set_worker with group %d, pool [%d,+%d), %d workers, job %d", u, mgid, base, size, world, resps[0].GetJobId())
					}
					workerAdds++
				case ids.replies:
					if u.GetType() == p4v1.Update_DELETE {
						replyDels++
					} else if u.GetType() == p4v1.Update_INSERT && te.GetAction().GetAction().GetActionId() == ids.setReply {
						replyAdds++
					} else {
						t.Errorf("reply_address update %v", u)
					}
				default:
					t.Errorf("write to table %#x (%s)", te.GetTableId(), rec.names[te.GetTableId()])
				}
			default:
				t.Errorf("write request %d: unexpected entity %v", wi, e)
			}
		}
		if regs > 0 {
			s.resetRequests++
			if regs != len(w.GetUpdates()) {
				t.Errorf("write request %d mixes the pool reset with other updates", wi)
			}
		}
	}
	wantResets, wantRequests := 3*size, 1
	if chip == "tofino2" && !adopt {
		wantResets, wantRequests = 0, 0
	}
	// The reset: both sets' bitmaps of every slot of the partition (one
	// pool_bitmap_pair cell per slot) and both sets' countdowns.
	for slot := base; wantResets > 0 && slot < base+size; slot++ {
		if !bitmapIdx[int64(slot)] || !countIdx[int64(slot)] || !countIdx[int64(p4info.Slots+slot)] {
			t.Errorf("slot %d not reset (bitmap %v, count set0 %v set1 %v)", slot, bitmapIdx[int64(slot)], countIdx[int64(slot)], countIdx[int64(p4info.Slots+slot)])
		}
	}
	if s.resets != wantResets || s.resetRequests != wantRequests {
		t.Errorf("pool reset: %d register writes in %d write requests, want %d in %d", s.resets, s.resetRequests, wantResets, wantRequests)
	}
	if workerAdds != world*lanes || replyAdds != world*lanes || workerDels != world*lanes || replyDels != world*lanes || !groupDeleted {
		t.Errorf("workers +%d -%d, replies +%d -%d, group deleted %v; want %d each", workerAdds, workerDels, replyAdds, replyDels, groupDeleted, world*lanes)
	}
	if len(active) == 0 {
		t.Error("no writes while the job was active")
	}
}

// The server refuses what Stratum refuses, so the test above would catch a
// controller that sent it: register data as a struct (P4Runtime allows it,
// Stratum does not), a register INSERT, a register whose element has no f1
// field, a register known only as a Tofino extern, a counter write without
// an index. The controller's own counter
// reset and read go through.
func TestStratumRecorderRefuses(t *testing.T) {
	rec := newRecorder(t, tna.P4InfoText)
	target := rec.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := controller.Dial(ctx, controller.ClientConfig{Target: target, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.UseP4Info(rec.info); err != nil {
		t.Fatal(err)
	}
	bitmap, values := rec.id(t, p4info.RegisterPoolBitmapPair), rec.id(t, "SwitchMLIngress.pool_values_00")
	structData := &p4v1.P4Data{Data: &p4v1.P4Data_Struct{Struct: &p4v1.P4StructLike{Members: []*p4v1.P4Data{
		{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{0}}}, {Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{0}}}}}}}
	reg := func(typ p4v1.Update_Type, id uint32, data *p4v1.P4Data) *p4v1.Update {
		return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{
			RegisterId: id, Index: &p4v1.Index{Index: 1}, Data: data}}}}
	}
	for _, c := range []struct {
		name string
		u    *p4v1.Update
		want string
	}{
		{"struct data", reg(p4v1.Update_MODIFY, bitmap, structData), "Only bitstring"},
		{"insert", controller.RegisterUpdate(bitmap, 1, 0), ""},
		{"insert", func() *p4v1.Update {
			u := controller.RegisterUpdate(bitmap, 1, 0)
			u.Type = p4v1.Update_INSERT
			return u
		}(), "must be MODIFY"},
		{"no f1 field", controller.RegisterUpdate(values, 1, 0), "Could not find register data field"},
		// An id that only a Tofino extern has (what bf-p4c gives pool_count
		// without --p4runtime-force-std-externs).
		{"extern id", controller.RegisterUpdate(0x8b87c021, 1, 0), "Unable to find bfrt id"},
		{"too wide", reg(p4v1.Update_MODIFY, bitmap, &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: []byte{1, 0, 0, 0, 0}}}), "not a bit<32>"},
		{"counter without index", &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
			CounterId: cl.IDs().CounterStats, Data: &p4v1.CounterData{}}}}}, "without counter index"},
	} {
		err := cl.Write(ctx, c.u)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want accepted", c.name, err)
			}
			continue
		}
		if !errContains(err, c.want) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
	if err := cl.ResetCounters(ctx); err != nil {
		t.Errorf("ResetCounters: %v", err)
	}
	if n, err := cl.ReadCounters(ctx); err != nil || len(n) != p4info.StatsSize {
		t.Errorf("ReadCounters = %d counters, %v; want %d", len(n), err, p4info.StatsSize)
	}
}
