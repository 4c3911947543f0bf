package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/internal/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHostileTakenRank: another client identity (127.0.0.2) registers
// rank 0 and rank 1 of a running job without a token, and of a running
// job with one (without it, and with a guess): each is refused with
// PERMISSION_DENIED, saying the rank is taken or the job another
// owner's, and both jobs finish, verified. A gathering job without a
// token keeps its rank 0 and outlives a registration of another world
// size, and runs, verified, once its own rank 1 comes.
func TestHostileTakenRank(t *testing.T) {
	needProcesses(t)
	f := startFabric(t, nil, "")
	start := func(job string, ranks []int, extra ...string) []*proc {
		var ps []*proc
		for _, r := range ranks {
			ps = append(ps, spawn(t, nil, append([]string{"allreduce", "--controller", f.controller, "--job", job, "--rank", fmt.Sprint(r),
				"--workers", "2", "--elements", "20000", "--iters", "1500", "--json"}, extra...)...))
		}
		return ps
	}
	open := start("open-victim", []int{0, 1})
	owned := start("token-victim", []int{0, 1}, "--token", "owner's token")
	waitRunning(t, f.ctl, "open-victim", 1)
	waitRunning(t, f.ctl, "token-victim", 1)

	jobs := jobClient(t, f.controller, "127.0.0.2")
	register := func(job string, rank, world uint32, token string, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req := hostileRegistration(job, world, 16, i)
		req.Rank, req.Token = rank, token
		_, err := jobs.Register(ctx, req, grpc.WaitForReady(true))
		return err
	}
	refused := func(what string, err error, code codes.Code, want string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %v saying %q", what, err, code, want)
		}
	}
	for i, rank := range []uint32{0, 1} {
		refused(fmt.Sprintf("rank %d of the open job", rank), register("open-victim", rank, 2, "", i), codes.PermissionDenied, fmt.Sprintf("rank %d is taken", rank))
		refused(fmt.Sprintf("rank %d of the token job without it", rank), register("token-victim", rank, 2, "", 10+i), codes.PermissionDenied, "another owner")
		refused(fmt.Sprintf("rank %d of the token job with a guess", rank), register("token-victim", rank, 2, "guess", 20+i), codes.PermissionDenied, "another owner")
	}
	for _, job := range []string{"open-victim", "token-victim"} {
		if state, _ := jobState(t, jobs, job); state != "active" {
			t.Errorf("%s is %q after the attacks, want active (if it simply finished first, give it more --iters)", job, state)
		}
	}
	verifiedReports(t, open)
	verifiedReports(t, owned)

	// A gathering job without a token.
	first := start("gathering", []int{0})
	admin := jobClient(t, f.controller, "")
	deadline := time.Now().Add(time.Minute)
	for state, _ := jobState(t, admin, "gathering"); state != "gathering"; state, _ = jobState(t, admin, "gathering") {
		if time.Now().After(deadline) || first[0].Exited() {
			t.Fatalf("the job never gathered (%q):\n%s", state, f.ctl.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	refused("rank 0 of the gathering job", register("gathering", 0, 2, "", 30), codes.PermissionDenied, "rank 0 is taken")
	refused("rank 1 of the gathering job with another world size", register("gathering", 1, 3, "", 31), codes.FailedPrecondition, "world_size 3 differs from 2")
	if state, _ := jobState(t, admin, "gathering"); state != "gathering" {
		t.Fatalf("the gathering job is %q after the attacks, want gathering:\n%s", state, f.ctl.Logs())
	}
	verifiedReports(t, append(first, start("gathering", []int{1})...))
	if strings.Contains(f.ctl.Logs(), "registered again") || strings.Contains(f.ctl.Logs(), "cannot form") {
		t.Errorf("an attack ended a job:\n%s", f.ctl.Logs())
	}
}

// TestHostileOpenJobOffLoopback: a controller whose job service listens
// on every interface (--listen :PORT) refuses a job without a token (the
// worker fails, the refusal saying how to give one; its code is checked in
// jobcore), and runs the same job with a token, verified.
func TestHostileOpenJobOffLoopback(t *testing.T) {
	needProcesses(t)
	dp, _ := harness.FreePort("udp")
	p4, _ := harness.FreePort("tcp")
	port, _ := harness.FreePort("tcp")
	f := switchSide{dataplane: fmt.Sprintf("127.0.0.1:%d", dp), p4rt: fmt.Sprintf("127.0.0.1:%d", p4), controller: fmt.Sprintf("127.0.0.1:%d", port)}
	f.sw = spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt)
	f.ctl = spawn(t, nil, "controller", "--target", f.p4rt, "--listen", fmt.Sprintf(":%d", port), "--dataplane", f.dataplane)
	waitLog(t, f.ctl, "controller: serving")

	p := spawn(t, nil, "allreduce", "--controller", f.controller, "--job", "open", "--rank", "0", "--workers", "1", "--elements", "1000", "--iters", "1", "--token", "")
	if err := p.wait(t, 2*time.Minute); err == nil {
		t.Fatalf("a job without a token ran on a controller listening beyond loopback:\n%s", p.Logs())
	}
	for _, want := range []string{`job "open" has no token`, "--token", "$SWITCHML_TOKEN", "--allow-open-jobs"} {
		if !strings.Contains(p.Logs(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, p.Logs())
		}
	}
	runJob(t, f, nil, jobSpec{name: "open", dtype: "int32", workers: 2, elements: 20_000, iters: 2, extra: []string{"--token", "the job's token"}})
}

// TestHostileSecondRoleP4Runtime: a certificate with the controller role
// arbitrates for role "shadow" on the switch's P4Runtime service, at a
// low and the highest election id: each is refused with PERMISSION_DENIED
// naming the role, it writes nothing, and a job afterwards runs, verified,
// the controller still primary.
func TestHostileSecondRoleP4Runtime(t *testing.T) {
	needProcesses(t)
	f := startMTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := f.p4rtAs(t, "controller")
	for _, e := range []uint64{1, 1 << 63} {
		st, err := rt.StreamChannel(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(arbitration("shadow", &p4v1.Uint128{High: e})); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		m, err := st.Recv()
		if m != nil || status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `role "shadow"`) {
			t.Errorf("arbitration for role shadow, election id %d<<64: %v, %v; want PermissionDenied naming the role", e, m, err)
		}
	}
	_, err := rt.Write(ctx, &p4v1.WriteRequest{DeviceId: 1, Role: "shadow", ElectionId: &p4v1.Uint128{High: 1 << 63}, Updates: []*p4v1.Update{{
		Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{}}}}}})
	if status.Code(err) == codes.OK {
		t.Error("a write for role shadow went through")
	}
	runJob(t, f.switchSide, nil, jobSpec{name: "after-shadow", dtype: "float32", workers: 2, elements: 30_000, iters: 2, extra: f.workerArgs})
	if strings.Contains(f.ctl.Logs(), "lost primaryship") {
		t.Errorf("the controller lost primaryship:\n%s", f.ctl.Logs())
	}
}
