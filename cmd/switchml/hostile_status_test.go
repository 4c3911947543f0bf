package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/switchml"
)

// TestHostileStatusStranger: on a mutual-TLS controller set up as the
// README says, `switchml status` with the certificate the job's ranks
// joined with shows the job but none of its lane addresses or switch
// placement (which would help forge packets into it); another worker
// certificate sees no job at all, not even its name; the operator's
// admin.pem sees it whole; the job runs on, verified.
func TestHostileStatusStranger(t *testing.T) {
	needProcesses(t)
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := certsCommandForTest(certs); err != nil {
		t.Fatal(err)
	}
	pem := func(name string) string { return filepath.Join(certs, name) }
	dp, _ := harness.FreePort("udp")
	p4, _ := harness.FreePort("tcp")
	ctl, _ := harness.FreePort("tcp")
	f := switchSide{dataplane: fmt.Sprintf("127.0.0.1:%d", dp), p4rt: fmt.Sprintf("127.0.0.1:%d", p4), controller: fmt.Sprintf("127.0.0.1:%d", ctl)}
	spawn(t, nil, "switch", "--dataplane", f.dataplane, "--p4rt", f.p4rt,
		"--tls-cert", pem("switch.pem"), "--tls-key", pem("switch-key.pem"), "--tls-client-ca", pem("ca.pem"))
	spawn(t, nil, "controller", "--target", f.p4rt, "--listen", f.controller, "--dataplane", f.dataplane,
		"--target-tls-ca", pem("ca.pem"), "--target-tls-cert", pem("controller.pem"), "--target-tls-key", pem("controller-key.pem"),
		"--tls-cert", pem("controller.pem"), "--tls-key", pem("controller-key.pem"), "--tls-client-ca", pem("ca.pem"))

	// The victim: a two-rank job, joined and holding its session.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tlsCfg, err := secure.Client(pem("ca.pem"), pem("worker.pem"), pem("worker-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	sessions := make([]*switchml.Session, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range sessions {
		wg.Go(func() {
			sessions[r], errs[r] = switchml.Join(ctx, switchml.Config{Controller: f.controller, Job: "victim", Rank: r, Workers: 2,
				Lanes: 1, Window: 16, TLS: tlsCfg, Token: "victim-secret"})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()

	// A stranger: a worker certificate of another name, signed by the
	// same CA.
	if _, _, err := (&secure.PKI{Dir: certs, CA: pem("ca.pem")}).IssueRole("stranger", secure.RoleWorker); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := statusCommand(ctx, []string{"--controller", f.controller, "--tls-ca", pem("ca.pem"), "--tls-cert", pem("stranger.pem"), "--tls-key", pem("stranger-key.pem")}, &out); err != nil {
		t.Fatalf("status as a stranger: %v", err)
	}
	if strings.Contains(out.String(), "victim") || !strings.Contains(out.String(), "no jobs") || !strings.Contains(out.String(), "redacted") {
		t.Errorf("status with stranger.pem shows another identity's job, or is not redacted:\n%s", out.String())
	}

	type statusJSON struct {
		Redacted bool `json:"redacted"`
		Jobs     []struct {
			Name     string `json:"name"`
			JobID    int    `json:"job_id"`
			PoolSize int    `json:"pool_size"`
			Ranks    []struct {
				LaneAddresses []string `json:"lane_addresses"`
			} `json:"ranks"`
		} `json:"jobs"`
	}
	status := func(who string) (st statusJSON, addrs int) {
		var out bytes.Buffer
		args := []string{"--controller", f.controller, "--json", "--tls-ca", pem("ca.pem"), "--tls-cert", pem(who + ".pem"), "--tls-key", pem(who + "-key.pem")}
		if err := statusCommand(ctx, args, &out); err != nil {
			t.Fatalf("status as %s: %v", who, err)
		}
		if err := json.Unmarshal(out.Bytes(), &st); err != nil {
			t.Fatalf("status as %s: %v\n%s", who, err, out.String())
		}
		if len(st.Jobs) != 1 || st.Jobs[0].Name != "victim" || len(st.Jobs[0].Ranks) != 2 || st.Jobs[0].PoolSize != 16 {
			t.Fatalf("status as %s does not list the job and its ranks:\n%s", who, out.String())
		}
		for _, r := range st.Jobs[0].Ranks {
			addrs += len(r.LaneAddresses)
		}
		return st, addrs
	}
	if st, addrs := status("worker"); !st.Redacted || addrs != 0 || st.Jobs[0].JobID != 0 {
		t.Errorf("status with worker.pem: redacted %v, %d lane addresses, switch job id %d; want redacted, none and 0", st.Redacted, addrs, st.Jobs[0].JobID)
	}
	if st, addrs := status("admin"); st.Redacted || addrs != 2 || st.Jobs[0].JobID == 0 {
		t.Errorf("status with admin.pem: redacted %v, %d lane addresses, switch job id %d; want it whole", st.Redacted, addrs, st.Jobs[0].JobID)
	}

	// The job runs on, verified.
	data := [][]float32{{1, 2, 3}, {10, 20, 30}}
	for r, s := range sessions {
		wg.Go(func() { errs[r] = s.AllReduceFloat32(ctx, data[r]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range data {
		for i, want := range []float32{11, 22, 33} {
			if data[r][i] != want {
				t.Fatalf("rank %d sum %v, want 11 22 33", r, data[r])
			}
		}
	}
}

// certsCommandForTest writes the certificates `switchml certs` writes.
func certsCommandForTest(dir string) error {
	return runCerts(context.Background(), []string{"--dir", dir, "--hosts", "127.0.0.1"})
}
