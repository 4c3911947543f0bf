package stratum_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/stratum"
	"github.com/switchml/switchml-go/p4/tna"
)

// fakeOutput writes a directory laid out as bf-p4c's output for program
// ("tofino", "tofino2" or "tofino2-leaf") and returns it with the bytes of
// its files. bfrt.json is the one bf-p4c writes for the program (checked
// in under testdata, kept equal to the compiler's by p4/programs
// TestBfrtJSONCheckedIn); context.json and the binary are stand-ins.
func fakeOutput(t *testing.T, program string) (dir string, files map[string][]byte) {
	t.Helper()
	dir = t.TempDir()
	target := strings.TrimSuffix(program, "-leaf")
	bin := "tofino.bin"
	if target == "tofino2" {
		bin = "tofino2.bin"
	}
	manifest := fmt.Sprintf(`{"target": %q, "programs": [{"program_name": "switchml.p4", "pipes": [
		{"pipe_id": 0, "pipe_name": "pipe", "files": {"context": {"path": "pipe/context.json"}}}]}]}`, target)
	files = map[string][]byte{
		"manifest.json":            []byte(manifest),
		"bfrt.json":                bfrtJSON(t, program),
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

// bfrtJSON is the bfrt.json bf-p4c writes for program.
func bfrtJSON(t *testing.T, program string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", program+".bfrt.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// packed is the device config the controller pushes for program.
func packed(t *testing.T, program string) []byte {
	t.Helper()
	dir, _ := fakeOutput(t, program)
	b, err := stratum.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
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
	t.Run("tofino", func(t *testing.T) { runStratumJob(t, "tofino", tna.P4InfoText, false, pipe0Ports) })
	t.Run("tofino2", func(t *testing.T) { runStratumJob(t, "tofino2", tna.P4InfoTofino2Text, false, pipe0Ports) })
	// The leaf role's program runs as a plain switch: no uplink entries.
	t.Run("tofino2 leaf", func(t *testing.T) { runStratumJob(t, "tofino2-leaf", tna.P4InfoTofino2LeafText, false, pipe0Ports) })
	// A controller that finds the pipeline running (an earlier controller
	// pushed it) cannot know which job ids that one used: a reused id
	// would match a finished job's tag, so it resets the pool all the same.
	t.Run("tofino2 adopted", func(t *testing.T) { runStratumJob(t, "tofino2", tna.P4InfoTofino2Text, true, pipe0Ports) })
}

// The job's layout: three ranks of two lanes with a window of eight.
const jobWorld, jobLanes, jobWindow = 3, 2, 8

// rankAddr is the address of rank's worker.
func rankAddr(rank int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(rank + 1)}) }

// pipe0Ports are the ranks' switch ports, all in pipe 0.
var pipe0Ports = []uint32{8, 16, 24}

// startFunc runs a controller until ctx ends, reporting its job service's
// address on ready and Run's result on done.
type startFunc func(ctx context.Context, ready chan<- net.Addr, done chan<- error)

// runStratumJob runs the job; with adopt, a first controller pushes the
// pipeline and stops before the one that serves the job starts.
func runStratumJob(t *testing.T, program string, p4infoText []byte, adopt bool, ports []uint32) {
	rec := newRecorder(t, p4infoText)
	dir, _ := fakeOutput(t, program)
	devcfg, err := stratum.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start := stratumController(t, rec, rec.serve(t), devcfg, ports)
	if adopt {
		runFirstController(ctx, t, start)
	}
	arpID := rec.id(t, p4info.TableARPReply)
	jobs, stopController := serveJobs(ctx, t, start)
	defer stopController()

	resps := registerRanks(ctx, t, jobs)
	_, active, _, _ := rec.snapshot()
	leaveRanks(ctx, t, jobs, resps)
	if err := rec.await(ctx, func() bool { _, _, _, groups := rec.snapshot(); return groups == 0 }); err != nil {
		t.Fatalf("the job's multicast group was never deleted: %v", err)
	}
	pushes, writes, refused, _ := rec.snapshot()
	if adopt {
		// The ARP entry the first controller wrote is there: the second
		// one's INSERT is refused, and it modifies the entry instead.
		refused = slices.DeleteFunc(refused, func(r refusal) bool {
			return r.u.GetEntity().GetTableEntry().GetTableId() == arpID && r.code == codes.AlreadyExists
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

	c := newTrafficChecker(t, rec, resps[0], adopt, ports)
	if c.size != jobLanes*jobWindow {
		t.Fatalf("pool size %d, want %d", c.size, jobLanes*jobWindow)
	}
	// Walk every update in order.
	for wi, w := range writes {
		c.write(wi, w)
	}
	c.checkTotals(strings.HasPrefix(program, "tofino2") && !adopt)
	if len(active) == 0 {
		t.Error("no writes while the job was active")
	}
}

// stratumController returns a startFunc for a controller of a Tofino with
// the job's ranks on ports (rank r on ports[r]), pushing devcfg to target.
func stratumController(t *testing.T, rec *recorder, target string, devcfg []byte, ports []uint32) startFunc {
	t.Helper()
	sw, err := controller.TargetFor(controller.KindTofino, 0)
	if err != nil {
		t.Fatal(err)
	}
	sw.Ports = map[netip.Addr]uint32{}
	for r := 0; r < jobWorld; r++ {
		sw.Ports[rankAddr(r)] = ports[r]
	}
	return func(ctx context.Context, ready chan<- net.Addr, done chan<- error) {
		done <- controller.Run(ctx, controller.Config{
			Target: target, Listen: "127.0.0.1:0", Dataplane: "10.0.0.254:48864", Switch: sw,
			P4Info: rec.info, DeviceConfig: devcfg, SwitchMAC: net.HardwareAddr{2, 0x53, 0x4d, 0x4c, 0, 0xfe},
			JobLimits: controller.JobLimits{LeaseGrace: time.Hour, JoinTimeout: time.Hour, MaxJobsPerClient: -1},
			// The ranks' data-plane addresses are not those they call
			// from, as with a Tofino's management network.
			AllowLaneAddressMismatch: true,
			Logger:                   quiet, Ready: func(a net.Addr) { ready <- a },
		})
	}
}

// runFirstController runs a controller until it serves, then stops it.
func runFirstController(ctx context.Context, t *testing.T, start startFunc) {
	t.Helper()
	firstCtx, stopFirst := context.WithCancel(ctx)
	ready, done := make(chan net.Addr, 1), make(chan error, 1)
	go start(firstCtx, ready, done)
	select {
	case <-ready:
	case err := <-done:
		stopFirst()
		t.Fatalf("first controller ended before serving: %v", err)
	}
	stopFirst()
	if err := <-done; err != nil {
		t.Fatalf("first controller: %v", err)
	}
}

// serveJobs starts a controller and returns a client of its job service
// and a function that closes the client, stops the controller and checks
// how it ended.
func serveJobs(ctx context.Context, t *testing.T, start startFunc) (jobpb.JobServiceClient, func()) {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go start(runCtx, ready, done)
	stopController := func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}
	var jobsAddr net.Addr
	select {
	case jobsAddr = <-ready:
	case err := <-done:
		stop()
		t.Fatalf("controller ended before serving: %v", err)
	}
	conn, err := grpc.NewClient(jobsAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stopController()
		t.Fatal(err)
	}
	return jobpb.NewJobServiceClient(conn), func() {
		conn.Close()
		stopController()
	}
}

// registerRanks registers every rank of the job at once.
func registerRanks(ctx context.Context, t *testing.T, jobs jobpb.JobServiceClient) []*jobpb.RegisterResponse {
	t.Helper()
	resps, errs := registerAll(ctx, jobs)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return resps
}

// registerAll registers every rank of the job at once and returns what
// each got.
func registerAll(ctx context.Context, jobs jobpb.JobServiceClient) ([]*jobpb.RegisterResponse, []error) {
	resps := make([]*jobpb.RegisterResponse, jobWorld)
	errs := make([]error, jobWorld)
	var wg sync.WaitGroup
	for r := 0; r < jobWorld; r++ {
		req := &jobpb.RegisterRequest{Job: "tofino", Rank: uint32(r), WorldSize: jobWorld, Lanes: jobLanes, Window: jobWindow, Elements: 64,
			Mac: []byte{2, 0, 0, 0, 0, byte(r + 1)}}
		for l := 0; l < jobLanes; l++ {
			req.LaneAddresses = append(req.LaneAddresses, netip.AddrPortFrom(rankAddr(r), uint16(40000+l)).String())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[r], errs[r] = jobs.Register(ctx, req)
		}()
	}
	wg.Wait()
	return resps, errs
}

// leaveRanks has every rank leave the job.
func leaveRanks(ctx context.Context, t *testing.T, jobs jobpb.JobServiceClient, resps []*jobpb.RegisterResponse) {
	t.Helper()
	for r := 0; r < jobWorld; r++ {
		if _, err := jobs.Leave(ctx, &jobpb.LeaveRequest{Job: "tofino", Rank: uint32(r), SessionId: resps[r].GetSessionId(), RankSecret: resps[r].GetRankSecret()}); err != nil {
			t.Fatalf("leave rank %d: %v", r, err)
		}
	}
}

// trafficChecker checks the controller's write requests one update at a
// time, with one method per kind of entity, and counts what it saw.
type trafficChecker struct {
	t     *testing.T
	rec   *recorder
	adopt bool
	ports []uint32 // rank r's switch port is ports[r]
	ids   struct{ arp, workers, replies, bitmap, count, setWorker, setReply, sendARP uint32 }
	// The job as the controller placed it.
	base, size int
	jobID      uint32

	mgid                   uint32 // the job's multicast group, once installed
	bitmapIdx, countIdx    map[int64]bool
	resets, resetWrites    int // register updates, and write requests holding them
	workerAdds, workerDels int
	replyAdds, replyDels   int
	groupDeleted           bool
}

func newTrafficChecker(t *testing.T, rec *recorder, placed *jobpb.RegisterResponse, adopt bool, ports []uint32) *trafficChecker {
	c := &trafficChecker{
		t: t, rec: rec, adopt: adopt, ports: ports,
		base: int(placed.GetPoolBase()), size: int(placed.GetPoolSize()), jobID: placed.GetJobId(),
		bitmapIdx: map[int64]bool{}, countIdx: map[int64]bool{},
	}
	c.ids.arp, c.ids.workers, c.ids.replies = rec.id(t, p4info.TableARPReply), rec.id(t, p4info.TableWorkers), rec.id(t, p4info.TableReplyAddress)
	c.ids.bitmap, c.ids.count = rec.id(t, p4info.RegisterPoolBitmapPair), rec.id(t, p4info.RegisterPoolCount)
	c.ids.setWorker, c.ids.setReply, c.ids.sendARP = rec.id(t, p4info.ActionSetWorker), rec.id(t, p4info.ActionSetReply), rec.id(t, p4info.ActionSendARPReply)
	return c
}

// write checks the wi-th write request: each update, and that the pool
// reset is not mixed with other updates.
func (c *trafficChecker) write(wi int, w *p4v1.WriteRequest) {
	regs := 0
	for _, u := range w.GetUpdates() {
		e := u.GetEntity()
		switch {
		case e.GetRegisterEntry() != nil:
			regs++
			c.register(u)
		case e.GetPacketReplicationEngineEntry() != nil:
			c.multicast(u)
		case e.GetTableEntry() != nil:
			c.table(u)
		default:
			c.t.Errorf("write request %d: unexpected entity %v", wi, e)
		}
	}
	if regs > 0 {
		c.resetWrites++
		if regs != len(w.GetUpdates()) {
			c.t.Errorf("write request %d mixes the pool reset with other updates", wi)
		}
	}
}

// register checks a register update: a MODIFY of one index to zero, of
// pool_bitmap_pair or pool_count, no wider than the register's element.
func (c *trafficChecker) register(u *p4v1.Update) {
	re := u.GetEntity().GetRegisterEntry()
	if u.GetType() != p4v1.Update_MODIFY || re.GetIndex() == nil {
		c.t.Errorf("register write %v: want a MODIFY of one index", u)
	}
	v, err := p4info.Uint(re.GetData().GetBitstring(), 64)
	if err != nil || v != 0 {
		c.t.Errorf("register write %v: want zero", u)
	}
	switch re.GetRegisterId() {
	case c.ids.bitmap:
		if len(re.GetData().GetBitstring()) > 4 {
			c.t.Errorf("pool_bitmap_pair data %x wider than its 32-bit f1", re.GetData().GetBitstring())
		}
		c.bitmapIdx[re.GetIndex().GetIndex()] = true
	case c.ids.count:
		if len(re.GetData().GetBitstring()) > 2 {
			c.t.Errorf("pool_count data %x wider than its 16 bits", re.GetData().GetBitstring())
		}
		c.countIdx[re.GetIndex().GetIndex()] = true
	default:
		c.t.Errorf("register %#x (%s) written; the reset writes pool_bitmap_pair and pool_count", re.GetRegisterId(), c.rec.names[re.GetRegisterId()])
	}
	c.resets++
}

// multicast checks a multicast group update: the INSERT replicates to
// every rank's port, the DELETE comes after every worker entry is gone.
func (c *trafficChecker) multicast(u *p4v1.Update) {
	mg := u.GetEntity().GetPacketReplicationEngineEntry().GetMulticastGroupEntry()
	switch u.GetType() {
	case p4v1.Update_INSERT:
		c.mgid = mg.GetMulticastGroupId()
		var got []string
		for _, rep := range mg.GetReplicas() {
			//lint:ignore SA1019 the field Stratum reads
			got = append(got, fmt.Sprintf("%d@%d", rep.GetInstance(), rep.GetEgressPort()))
		}
		want := []string{}
		for r := 0; r < jobWorld; r++ {
			want = append(want, fmt.Sprintf("%d@%d", r, c.ports[r]))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			c.t.Errorf("group %d replicas (rank@port) %v, want %v", c.mgid, got, want)
		}
	case p4v1.Update_DELETE:
		if mg.GetMulticastGroupId() != c.mgid || c.workerDels != jobWorld*jobLanes {
			c.t.Errorf("group %d deleted with %d of %d worker entries gone (group %d installed)", mg.GetMulticastGroupId(), c.workerDels, jobWorld*jobLanes, c.mgid)
		}
		c.groupDeleted = true
	default:
		c.t.Errorf("multicast update %v", u.GetType())
	}
}

// table checks a table update by its table.
func (c *trafficChecker) table(u *p4v1.Update) {
	te := u.GetEntity().GetTableEntry()
	switch te.GetTableId() {
	case c.ids.arp:
		if (u.GetType() != p4v1.Update_INSERT && !(c.adopt && u.GetType() == p4v1.Update_MODIFY)) || te.GetAction().GetAction().GetActionId() != c.ids.sendARP {
			c.t.Errorf("arp_reply update %v", u)
		}
	case c.ids.workers:
		c.workers(u)
	case c.ids.replies:
		if u.GetType() == p4v1.Update_DELETE {
			c.replyDels++
		} else if u.GetType() == p4v1.Update_INSERT && te.GetAction().GetAction().GetActionId() == c.ids.setReply {
			c.replyAdds++
		} else {
			c.t.Errorf("reply_address update %v", u)
		}
	default:
		c.t.Errorf("write to table %#x (%s)", te.GetTableId(), c.rec.names[te.GetTableId()])
	}
}

// workers checks a workers table update: an INSERT of set_worker with the
// job's group, pool partition, size and id, or a DELETE.
func (c *trafficChecker) workers(u *p4v1.Update) {
	if u.GetType() == p4v1.Update_DELETE {
		c.workerDels++
		return
	}
	a := u.GetEntity().GetTableEntry().GetAction().GetAction()
	p := map[uint32]uint64{}
	for _, x := range a.GetParams() {
		p[x.GetParamId()], _ = p4info.Uint(x.GetValue(), 32)
	}
	w := p4info.WorkerFromParams(p)
	if u.GetType() != p4v1.Update_INSERT || a.GetActionId() != c.ids.setWorker || c.mgid == 0 || uint32(w.MulticastGroup) != c.mgid ||
		int(w.PoolBase) != c.base || int(w.PoolSize) != c.size || int(w.NumWorkers) != jobWorld || w.JobID != c.jobID {
		c.t.Errorf("workers update %v: want an INSERT of set_worker with group %d, pool [%d,+%d), %d workers, job %d", u, c.mgid, c.base, c.size, jobWorld, c.jobID)
	}
	c.workerAdds++
}

// checkTotals checks what the walk counted: the pool reset (none when
// tagged, as on a Tofino 2 the controller pushed the pipeline to), every
// worker and reply entry added and deleted, and the group deleted.
func (c *trafficChecker) checkTotals(tagged bool) {
	wantResets, wantRequests := 3*c.size, 1
	if tagged {
		wantResets, wantRequests = 0, 0
	}
	// The reset: both sets' bitmaps of every slot of the partition (one
	// pool_bitmap_pair cell per slot) and both sets' countdowns.
	for slot := c.base; wantResets > 0 && slot < c.base+c.size; slot++ {
		if !c.bitmapIdx[int64(slot)] || !c.countIdx[int64(slot)] || !c.countIdx[int64(p4info.Slots+slot)] {
			c.t.Errorf("slot %d not reset (bitmap %v, count set0 %v set1 %v)", slot, c.bitmapIdx[int64(slot)], c.countIdx[int64(slot)], c.countIdx[int64(p4info.Slots+slot)])
		}
	}
	if c.resets != wantResets || c.resetWrites != wantRequests {
		c.t.Errorf("pool reset: %d register writes in %d write requests, want %d in %d", c.resets, c.resetWrites, wantResets, wantRequests)
	}
	n := jobWorld * jobLanes
	if c.workerAdds != n || c.replyAdds != n || c.workerDels != n || c.replyDels != n || !c.groupDeleted {
		c.t.Errorf("workers +%d -%d, replies +%d -%d, group deleted %v; want %d each", c.workerAdds, c.workerDels, c.replyAdds, c.replyDels, c.groupDeleted, n)
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
	cl, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: target, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.SetPipeline(ctx, rec.info, packed(t, "tofino"), 0); err != nil {
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
		{"insert", p4rt.RegisterUpdate(bitmap, 1, 0), ""},
		{"insert", func() *p4v1.Update {
			u := p4rt.RegisterUpdate(bitmap, 1, 0)
			u.Type = p4v1.Update_INSERT
			return u
		}(), "must be MODIFY"},
		{"no f1 field", p4rt.RegisterUpdate(values, 1, 0), "Could not find register data field"},
		// An id that only a Tofino extern has (what bf-p4c gives pool_count
		// without --p4runtime-force-std-externs).
		{"extern id", p4rt.RegisterUpdate(0x8b87c021, 1, 0), "Unable to find bfrt id"},
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
