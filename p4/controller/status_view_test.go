package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"slices"
	"testing"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/secure"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// asPeer is ctx as a call from addr would see it, over TLS with the
// certificate in certFile verified when certFile is given, over plain
// TCP when tlsOn is false.
func asPeer(t *testing.T, ctx context.Context, tlsOn bool, certFile string) context.Context {
	t.Helper()
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 40000}}
	if tlsOn {
		info := credentials.TLSInfo{}
		if certFile != "" {
			b, err := os.ReadFile(certFile)
			if err != nil {
				t.Fatal(err)
			}
			blk, _ := pem.Decode(b)
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			info.State = tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
		}
		p.AuthInfo = info
	}
	return peer.NewContext(ctx, p)
}

// TestStatusRedactsForStrangers: over TLS, a worker's certificate (or
// none) sees none of another identity's jobs, not even their names; an
// admin certificate, a name given as Admin, and a
// caller without TLS see it whole.
func TestStatusRedactsForStrangers(t *testing.T) {
	h := newJobHarness(t, 64)
	ctx := testCtx(t)
	joined(t, h, "alpha", 2)
	joined(t, h, "beta", 2) // beta's partition starts past alpha's: a base that is not 0

	pki, err := secure.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	worker, _, err := pki.Issue("worker")
	if err != nil {
		t.Fatal(err)
	}
	admin, _, err := pki.Issue("admin")
	if err != nil {
		t.Fatal(err)
	}
	ops, _, err := pki.IssueRole("ops-laptop", "")
	if err != nil {
		t.Fatal(err)
	}
	whole := func(st *jobpb.StatusResponse) bool {
		for _, j := range st.GetJobs() {
			if j.GetJobId() == 0 {
				return false
			}
			for _, r := range j.GetRanks() {
				if len(r.GetLaneAddresses()) == 0 {
					return false
				}
			}
		}
		return len(st.GetJobs()) == 2 && !st.GetRedacted()
	}
	// The jobs were registered by another identity (the harness's
	// plain connection): a stranger sees none of them.
	bare := func(st *jobpb.StatusResponse) bool {
		return len(st.GetJobs()) == 0 && st.GetRedacted() && st.GetSlotsInUse() > 0
	}
	for _, c := range []struct {
		name   string
		ctx    context.Context
		admins secure.Allow
		whole  bool
	}{
		{"no TLS", asPeer(t, ctx, false, ""), secure.Allow{}, true},
		{"TLS without a certificate", asPeer(t, ctx, true, ""), secure.Allow{}, false},
		{"worker certificate", asPeer(t, ctx, true, worker), secure.Allow{}, false},
		{"admin certificate", asPeer(t, ctx, true, admin), secure.Allow{}, true},
		{"certificate named by --admin", asPeer(t, ctx, true, ops), secure.Allow{Roles: []string{secure.RoleAdmin}, Names: []string{"ops-laptop"}}, true},
		{"worker certificate with --admin naming another", asPeer(t, ctx, true, worker), secure.Allow{Names: []string{"ops-laptop"}}, false},
	} {
		h.svc.cfg.Admin = c.admins
		st, err := h.svc.Status(c.ctx, &jobpb.StatusRequest{SkipSwitchCounters: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.whole && !whole(st) || !c.whole && !bare(st) {
			t.Errorf("%s: got %v; want it whole: %v", c.name, st, c.whole)
		}
	}
}

// TestStatusPages: a page holds at most page_size jobs and names the next
// page; following the tokens lists every job once; a token the controller
// did not give out is refused.
func TestStatusPages(t *testing.T) {
	h := newJobHarness(t, 64)
	ctx := testCtx(t)
	names := []string{"a", "b", "c", "d", "e"}
	for _, n := range names {
		joined(t, h, n, 1)
	}
	var seen []string
	req := &jobpb.StatusRequest{SkipSwitchCounters: true, PageSize: 2}
	for pages := 0; ; pages++ {
		if pages > len(names) {
			t.Fatalf("more pages than jobs: %v", seen)
		}
		st, err := h.jobs.Status(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.GetJobs()) > 2 {
			t.Fatalf("page of %d jobs, asked for 2", len(st.GetJobs()))
		}
		for _, j := range st.GetJobs() {
			seen = append(seen, j.GetName())
		}
		if st.GetNextPageToken() == "" {
			break
		}
		req = &jobpb.StatusRequest{SkipSwitchCounters: true, PageSize: 2, PageToken: st.GetNextPageToken()}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, names) {
		t.Errorf("pages listed %v, want %v", seen, names)
	}
	for _, bad := range []string{"x", "jobs@-1", "jobs@zz"} {
		_, err := h.jobs.Status(ctx, &jobpb.StatusRequest{PageToken: bad})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("page token %q: %v, want InvalidArgument", bad, err)
		}
	}
	st, err := h.jobs.Status(ctx, &jobpb.StatusRequest{SkipSwitchCounters: true, PageToken: pageToken(99)})
	if err != nil || len(st.GetJobs()) != 0 || st.GetNextPageToken() != "" {
		t.Errorf("a page past the end: %v, %v; want an empty last page", st, err)
	}
}
