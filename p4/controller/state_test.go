package controller

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
)

// TestStateFileHoldsClaimsNoSecrets: the state file a service keeps is
// private (0600), names the running job, and holds neither a rank's
// secret nor the job's token; once the job ends, its claim goes.
func TestStateFileHoldsClaimsNoSecrets(t *testing.T) {
	h := statefulHarness(t)
	const token = "a-token-of-the-job"
	reqs := []*jobpb.RegisterRequest{regReq("private", 0, 2, 1, 4, 3), regReq("private", 1, 2, 1, 4, 3)}
	for _, r := range reqs {
		r.Token = token
	}
	resps, errs := h.registerAll(testCtx(t), reqs...)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	info, err := os.Stat(h.state)
	if err != nil {
		t.Fatalf("no state file once the job was placed: %v", err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %04o, want 0600", info.Mode().Perm())
	}
	b, err := os.ReadFile(h.state)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"private"`)) {
		t.Fatalf("state file does not name the job:\n%s", b)
	}
	for r, resp := range resps {
		s := resp.GetRankSecret()
		if bytes.Contains(b, s) || bytes.Contains(b, []byte(hex.EncodeToString(s))) {
			t.Errorf("state file holds rank %d's secret:\n%s", r, b)
		}
	}
	if bytes.Contains(b, []byte(token)) {
		t.Errorf("state file holds the job's token:\n%s", b)
	}
	for r := range uint32(2) {
		if _, err := h.jobs.Leave(testCtx(t), &jobpb.LeaveRequest{Job: "private", Rank: r, SessionId: resps[0].GetSessionId(), RankSecret: resps[r].GetRankSecret()}); err != nil {
			t.Fatal(err)
		}
	}
	<-h.svc.Drained()
	h.svc.stop() // waits for the state file's writes
	if b, err := os.ReadFile(h.state); err != nil || bytes.Contains(b, []byte(`"private"`)) {
		t.Fatalf("state file after the job ended (%v):\n%s", err, b)
	}
}

// TestStateFileRefused: a service does not start on a state file that
// others may read or change, that it did not write, or in a folder others
// may write; a file kept for another switch is read as holding no claims.
func TestStateFileRefused(t *testing.T) {
	dp := netip.MustParseAddrPort("127.0.0.1:48864")
	open := func(path, target string) (*JobService, error) {
		return NewJobService(noSwitch{}, ServiceConfig{Dataplane: dp, Logger: quiet, State: path, StateTarget: target})
	}
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"version":1,"target":"sw:9559","jobs":[{"job_id":3,"job":"j","session":5,"token_sha256":"` + strings.Repeat("ab", 32) +
		`","client":"c","rank_secret_sha256":["` + strings.Repeat("cd", 32) + `"],"pool_base":0,"pool_size":4,"world":1}]}`
	for _, c := range []struct {
		name, path, want string
	}{
		{"readable by others", write("open", good, 0o644), "chmod 600"},
		{"not a state file", write("garbage", "not json", 0o600), "move it away"},
		{"another version", write("v9", `{"version":9}`, 0o600), "version 9"},
		{"a bad hash", write("badhash", strings.Replace(good, strings.Repeat("cd", 32), "zz", 1), 0o600), "64 hex digits"},
	} {
		if _, err := open(c.path, "sw:9559"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := open(filepath.Join(shared, "state"), "sw:9559"); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("state file in a folder anyone may write: %v", err)
	}
	if err := os.Symlink(write("target", good, 0o600), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := open(filepath.Join(dir, "link"), "sw:9559"); !isFieldError(err, "State") || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("state file that is a symbolic link: %v", err)
	}
	p := write("ok", good, 0o600)
	s, err := open(p, "sw:9559")
	if err != nil || len(s.claims) != 1 || s.claims[0].Job != "j" {
		t.Fatalf("state file of this switch: %v, claims %+v", err, s.claims)
	}
	if s, err := open(p, "other:9559"); err != nil || len(s.claims) != 0 {
		t.Fatalf("state file of another switch: %v, claims %+v; want none", err, s.claims)
	}
}

// TestRestartWithoutStateEndsJobs: a controller that kept no claims
// cannot hand a job it finds on the switch to anyone, its ranks included;
// the job's room comes free after the grace.
func TestRestartWithoutStateEndsJobs(t *testing.T) {
	h := newJobHarness(t, testSlots)
	ctx := testCtx(t)
	_, _, resps := joinedAll(t, h, "stateless", 2)
	svc, jobs := restarted(t, h, time.Hour)
	for r := range uint32(2) {
		st, err := jobs.Watch(ctx, &jobpb.WatchRequest{Job: "stateless", Rank: r, SessionId: resps[0].GetSessionId(), JobId: resps[0].GetJobId(), RankSecret: resps[r].GetRankSecret()})
		if err == nil {
			_, err = st.Recv()
		}
		if err == nil {
			t.Fatalf("rank %d took back a job no claim was kept for", r)
		}
	}
	svc.step(func(c *jobcore.Core) { c.Tick(time.Now().Add(2 * time.Hour)) })
	<-svc.Drained()
	if ws, err := h.sw.ReadWorkers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workers after the grace period: %v, %v; want none", ws, err)
	}
}

// isFieldError says whether err is a refusal of the setting field.
func isFieldError(err error, name string) bool {
	var fe *field.Error
	return errors.As(err, &fe) && slices.Contains(fe.Fields, name)
}
