package controller

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/p4/softswitch/softswitchtest"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// startAuthSwitch is startSwitch with a pipeline that checks tags.
func startAuthSwitch(t *testing.T) string {
	t.Helper()
	addr, _ := softswitchtest.Serve(t, softswitch.ServerConfig{DeviceID: 1, Pipeline: pipeline.Config{Slots: testSlots, MaxElements: 64, MaxWorkers: 32, Auth: true}, Logger: quiet})
	return addr
}

// authClient starts a switch that checks tags and returns its address and
// a primary client that pushed the pipeline to it.
func authClient(t *testing.T, ctx context.Context) (string, *p4rt.Client) {
	t.Helper()
	addr := startAuthSwitch(t)
	c := dial(t, ctx, addr, 1)
	if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	return addr, c
}

func keyedJobs(t *testing.T, ctx context.Context, c *p4rt.Client) []uint32 {
	t.Helper()
	ents, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_ExternEntry{ExternEntry: &p4v1.ExternEntry{ExternTypeId: p4info.ExternJobKeyType}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for _, e := range ents {
		ids = append(ids, e.GetExternEntry().GetExternId())
	}
	return ids
}

// TestCheckAuth: the controller and the switch must agree on tags; each
// disagreement is refused, saying which side to start with --auth.
func TestCheckAuth(t *testing.T) {
	ctx := testCtx(t)
	soft, _ := TargetFor(KindSoftswitch, 0)
	authSoft := soft
	authSoft.Auth = true
	plainAddr, _ := startSwitch(t)
	authAddr := startAuthSwitch(t)
	plain := dial(t, ctx, plainAddr, 1)
	keyed := dial(t, ctx, authAddr, 1)
	for _, c := range []*p4rt.Client{plain, keyed} {
		if err := c.SetPipeline(ctx, nil, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkAuth(ctx, plain, soft, plainAddr); err != nil {
		t.Fatalf("plain switch, plain controller: %v", err)
	}
	if err := checkAuth(ctx, keyed, authSoft, authAddr); err != nil {
		t.Fatalf("switch and controller with --auth: %v", err)
	}
	refusedAuth := func(err error, why string) bool {
		return isFieldError(err, "Auth") && strings.Contains(err.Error(), why)
	}
	if err := checkAuth(ctx, plain, authSoft, plainAddr); !refusedAuth(err, "start the switch with its Auth set") {
		t.Fatalf("controller with Auth, switch without: %v", err)
	}
	if err := checkAuth(ctx, keyed, soft, authAddr); !refusedAuth(err, "start the controller with Auth") {
		t.Fatalf("switch --auth, controller without: %v", err)
	}
	bmv2, _ := TargetFor(KindBMv2, 0)
	bmv2.Auth = true
	if err := checkAuth(ctx, plain, bmv2, plainAddr); !refusedAuth(err, "cannot check a MAC") {
		t.Fatalf("bmv2 with --auth: %v", err)
	}
}

// TestJobKeyEntries: a job's key goes to the switch with its entries and
// leaves with them; printing the entries never shows it.
func TestJobKeyEntries(t *testing.T) {
	ctx := testCtx(t)
	addr, c := authClient(t, ctx)
	j := keyedJob()
	j.Key = switchjob.Key(bytes.Repeat([]byte{0xab}, 32))
	for _, verb := range []string{"%v", "%+v", "%#v", "%x", "%s", "%q"} {
		// Sixteen hex digits of the key: longer than any pointer %#v prints.
		if s := fmt.Sprintf(verb, j); strings.Contains(s, "abababababababab") || strings.Contains(s, "171, 171") || strings.Contains(s, "\xab\xab") {
			t.Fatalf("%s of the entries shows the key: %s", verb, s)
		}
	}
	if err := c.InstallJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got := keyedJobs(t, ctx, c); len(got) != 1 || got[0] != 3 {
		t.Fatalf("keyed jobs after install = %v, want [3]", got)
	}
	// A key the switch kept (a job found by a restarted controller) is
	// replaced, not an error.
	if err := c.RemoveJob(ctx, found(j)); err != nil {
		t.Fatal(err)
	}
	if err := c.InstallJob(ctx, j); err != nil {
		t.Fatalf("install over a kept key: %v", err)
	}
	if err := c.RemoveJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got := keyedJobs(t, ctx, c); len(got) != 0 {
		t.Fatalf("keyed jobs after removal = %v, want none", got)
	}
	// Once the client knows the switch checks tags, removing a job found
	// on the switch (its key unknown to the controller) removes the key.
	target, _ := TargetFor(KindSoftswitch, 0)
	target.Auth = true
	if err := checkAuth(ctx, c, target, addr); err != nil {
		t.Fatal(err)
	}
	if err := c.InstallJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveJob(ctx, found(j)); err != nil {
		t.Fatal(err)
	}
	if got := keyedJobs(t, ctx, c); len(got) != 0 {
		t.Fatalf("keyed jobs after removing a found job = %v, want none", got)
	}
}

// TestRegisterHandsOutKeys: with Target.Auth every job gets its own random
// key, the same for all its ranks, installed on the switch; Describe says
// the switch checks tags; a registration with the compatible header is
// refused.
func TestRegisterHandsOutKeys(t *testing.T) {
	ctx := testCtx(t)
	_, c := authClient(t, ctx)
	target, _ := TargetFor(KindSoftswitch, 0)
	target.Auth = true
	svc, err := NewJobService(c, ServiceConfig{Dataplane: netip.MustParseAddrPort("127.0.0.1:48864"), Slots: testSlots, Target: target, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	jobs := serveJobs(t, svc)
	h := &jobHarness{svc: svc, jobs: jobs, sw: c}
	d, err := jobs.Describe(ctx, &jobpb.DescribeRequest{})
	if err != nil || !d.GetAuth() {
		t.Fatalf("Describe = %v, %v: want auth", d, err)
	}
	ext := func(job string, rank uint32, host byte) *jobpb.RegisterRequest {
		r := regReq(job, rank, 2, 1, 4, host)
		r.Format = jobpb.Format_FORMAT_EXTENDED
		return r
	}
	ra, errs := h.registerAll(ctx, ext("a", 0, 1), ext("a", 1, 1))
	rb, errsB := h.registerAll(ctx, ext("b", 0, 2), ext("b", 1, 2))
	for _, e := range append(errs, errsB...) {
		if e != nil {
			t.Fatal(e)
		}
	}
	ka, kb := ra[0].GetAuthKey(), rb[0].GetAuthKey()
	if len(ka) != 32 || !bytes.Equal(ka, ra[1].GetAuthKey()) || !bytes.Equal(kb, rb[1].GetAuthKey()) || bytes.Equal(ka, kb) {
		t.Fatalf("keys: job a %d bytes (ranks agree: %v), job b differs: %v", len(ka), bytes.Equal(ka, ra[1].GetAuthKey()), !bytes.Equal(ka, kb))
	}
	got := keyedJobs(t, ctx, c)
	if len(got) != 2 || got[0] != ra[0].GetJobId() && got[1] != ra[0].GetJobId() {
		t.Fatalf("keyed jobs on the switch = %v, want jobs %d and %d", got, ra[0].GetJobId(), rb[0].GetJobId())
	}
	_, err = jobs.Register(ctx, regReq("c", 0, 1, 1, 4, 3))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "join with switchml.Config.Extended and Auth") {
		t.Fatalf("compatible header on a switch with --auth: %v", err)
	}
}

// found is j as a restarted controller reads it back from the switch: no key.
func found(j switchjob.Placement) switchjob.Placement {
	j.Key = nil
	return j
}

// keyedJob is job 3 of two ranks, one lane each, on slots 8 to 11.
func keyedJob() switchjob.Placement {
	p := switchjob.Placement{JobID: 3, PoolBase: 8, PoolSize: 4, Group: 5, World: 2}
	for r := range uint16(2) {
		l := switchjob.Lane{Rank: r, Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(r + 1)}), 40001+r)}
		p.Workers, p.Replies = append(p.Workers, l), append(p.Replies, l)
		p.Replicas = append(p.Replicas, switchjob.Replica{EgressPort: uint32(r), Instance: r})
	}
	return p
}

// TestClearEndedLeavesNothing: what a switch kept of the jobs that ended
// when the controller lost it goes before the switch is handed back to the
// job service: workers, replies, multicast groups (one without a job
// too, as a removal cut short leaves it) and, on a switch that checks
// tags, the jobs' keys.
func TestClearEndedLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	addr, c := authClient(t, ctx)
	target, _ := TargetFor(KindSoftswitch, 0)
	target.Auth = true
	if err := checkAuth(ctx, c, target, addr); err != nil {
		t.Fatal(err)
	}
	j := keyedJob()
	j.Key = switchjob.Key(bytes.Repeat([]byte{0xcd}, 32))
	if err := c.InstallJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, p4rt.GroupUpdate(p4v1.Update_INSERT, 9, j.Replicas)); err != nil {
		t.Fatal(err)
	}
	if err := clearEnded(ctx, Config{Target: addr, ConnectTimeout: time.Minute}, c); err != nil {
		t.Fatal(err)
	}
	workers, _ := c.ReadWorkers(ctx)
	replies, _ := c.ReadReplies(ctx)
	groups, err := c.ReadMulticastGroups(ctx)
	if err != nil || len(workers)+len(replies)+len(groups) != 0 {
		t.Fatalf("after clearing: %d workers, %d replies, groups %v (%v)", len(workers), len(replies), groups, err)
	}
	if got := keyedJobs(t, ctx, c); len(got) != 0 {
		t.Fatalf("keyed jobs after clearing = %v, want none", got)
	}
}
