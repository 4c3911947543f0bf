package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/benchmarks"
	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/secure"
)

// runBinary runs the binary to its end (with env added to the test's) and
// returns its output and its exit error.
func runBinary(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// spawnEnv is spawn with env added to the test's environment.
func spawnEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	needProcesses(t)
	cmd := binaryCmd(nil, args...)
	cmd.Env = append(os.Environ(), env...)
	fp, err := harness.StartProc(args[0], false, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return adopt(t, fp)
}

// waitJob waits until `switchml status` (with args) lists a job named name.
func waitJob(t *testing.T, name string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := statusCommand(ctx, append(args, "--json"), &out)
		cancel()
		var st struct {
			Jobs []struct {
				Name string `json:"name"`
			} `json:"jobs"`
		}
		if err == nil && json.Unmarshal(out.Bytes(), &st) == nil && slices.ContainsFunc(st.Jobs, func(j struct {
			Name string `json:"name"`
		}) bool {
			return j.Name == name
		}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never listed job %q: %v\n%s", name, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHostileAuthKeysInClear: a controller with --auth whose job service
// listens off loopback without TLS would hand every job's key to a packet
// capture; it is refused at start, naming the flags that fix it and the
// one that allows it anyway.
func TestHostileAuthKeysInClear(t *testing.T) {
	needProcesses(t)
	out, err := runBinary(t, nil, "controller", "--auth", "--target", "127.0.0.1:1", "--listen", "0.0.0.0:"+portOf(t, freeAddr(t)))
	if err == nil {
		t.Fatalf("controller --auth --listen 0.0.0.0 without TLS started:\n%s", out)
	}
	for _, want := range []string{"--auth", "in clear", "--tls-cert", "--insecure-auth-over-plaintext"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "controller ready") {
		t.Errorf("the controller served before refusing:\n%s", out)
	}
}

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, ok := strings.Cut(addr, ":")
	if !ok {
		t.Fatalf("%q has no port", addr)
	}
	return port
}

// TestHostileExposureWarnings: a switch and a controller reachable from
// other hosts without TLS or --auth say so at start, naming the flag that
// closes each hole; on loopback they say nothing of it. The controller
// with --insecure-auth-over-plaintext starts with --auth anyway.
func TestHostileExposureWarnings(t *testing.T) {
	needProcesses(t)
	dp, p4, ctl := portOf(t, freeAddr(t)), portOf(t, freeAddr(t)), portOf(t, freeAddr(t))
	sw := spawn(t, nil, "switch", "--dataplane", "0.0.0.0:"+dp, "--p4rt", "0.0.0.0:"+p4)
	waitLog(t, sw, "software switch up")
	waitLog(t, sw, "switch: the data plane is reachable from other hosts and its packets are not authenticated")
	waitLog(t, sw, "p4runtime: serving without client certificates on a non-loopback address")
	for _, want := range []string{"--auth", "--tls-cert"} {
		if !strings.Contains(sw.Logs(), want) {
			t.Errorf("the switch's warnings do not name %s:\n%s", want, sw.Logs())
		}
	}
	// The data plane handed to workers (a documentation address: nothing is
	// sent to it) is routable, and the job service listens on every
	// interface.
	c := spawn(t, nil, "controller", "--target", "127.0.0.1:"+p4, "--listen", "0.0.0.0:"+ctl, "--dataplane", "192.0.2.1:"+dp)
	waitLog(t, c, "controller ready")
	for _, want := range []string{
		"controller: the job service listens without TLS on a non-loopback address",
		"controller: the data plane is reachable from other hosts and its packets are not authenticated",
		"give it --tls-cert and --tls-key", "with --auth", "addr=192.0.2.1:" + dp,
	} {
		if !strings.Contains(c.Logs(), want) {
			t.Errorf("the controller's log does not say %q:\n%s", want, c.Logs())
		}
	}

	t.Run("on loopback", func(t *testing.T) {
		f := startFabricWith(t, nil, "", nil, nil)
		for name, logs := range f.fab.Logs() {
			if strings.Contains(logs, "reachable from other hosts") || strings.Contains(logs, "non-loopback") {
				t.Errorf("the %s warns on loopback:\n%s", name, logs)
			}
		}
	})
	t.Run("auth allowed in clear", func(t *testing.T) {
		dp, p4, ctl := portOf(t, freeAddr(t)), portOf(t, freeAddr(t)), portOf(t, freeAddr(t))
		sw := spawn(t, nil, "switch", "--auth", "--dataplane", "127.0.0.1:"+dp, "--p4rt", "127.0.0.1:"+p4)
		waitLog(t, sw, "software switch up")
		c := spawn(t, nil, "controller", "--auth", "--insecure-auth-over-plaintext", "--target", "127.0.0.1:"+p4, "--listen", "0.0.0.0:"+ctl, "--dataplane", "127.0.0.1:"+dp)
		waitLog(t, c, "controller ready")
		waitLog(t, c, "controller: the job service listens without TLS on a non-loopback address")
	})
}

// keyFiles lists the private key files in dir.
func keyFiles(t *testing.T, dir string) []string {
	t.Helper()
	keys, err := filepath.Glob(filepath.Join(dir, "*-key.pem"))
	if err != nil || len(keys) == 0 {
		t.Fatalf("no keys in %s (%v)", dir, err)
	}
	return keys
}

// TestHostileCertsOverwrite: `switchml certs` refuses to write over
// existing files without --force, and with it writes every key with mode
// 0600 even over a key file that was 0644.
func TestHostileCertsOverwrite(t *testing.T) {
	needProcesses(t)
	dir := t.TempDir()
	for _, n := range []string{"ca-key.pem", "worker-key.pem"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runBinary(t, nil, "certs", "--dir", dir)
	if err == nil {
		t.Fatalf("certs wrote over existing files without --force:\n%s", out)
	}
	for _, want := range []string{filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "worker-key.pem"), "--force"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not name %s:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "worker-key.pem")); string(b) != "old\n" {
		t.Fatalf("the refused run changed worker-key.pem")
	}

	if out, err := runBinary(t, nil, "certs", "--dir", dir, "--force"); err != nil {
		t.Fatalf("certs --force: %v\n%s", err, out)
	}
	for _, k := range keyFiles(t, dir) {
		fi, err := os.Stat(k)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", k, fi.Mode().Perm())
		}
		if b, _ := os.ReadFile(k); !bytes.Contains(b, []byte("PRIVATE KEY")) {
			t.Errorf("%s holds no new key", k)
		}
	}
}

// certCN reads the common name and roles of a certificate file.
func certCN(t *testing.T, file string) (string, []string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, u := range c.URIs {
		if r, ok := strings.CutPrefix(u.String(), secure.RoleURIPrefix); ok {
			roles = append(roles, r)
		}
	}
	return c.Subject.CommonName, roles
}

// TestHostileCertsWorkerIdentities: `certs --workers N` writes N worker
// certificates with distinct identities, which the controller's
// per-client quotas count apart: with --max-jobs-per-client 1, a job held
// by worker-1 does not lock worker-2 out, while worker-1 is held to one.
func TestHostileCertsWorkerIdentities(t *testing.T) {
	needProcesses(t)
	dir := t.TempDir()
	if out, err := runBinary(t, nil, "certs", "--dir", dir, "--workers", "3"); err != nil {
		t.Fatalf("certs --workers 3: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for k := 1; k <= 3; k++ {
		cn, roles := certCN(t, filepath.Join(dir, fmt.Sprintf("worker-%d.pem", k)))
		if seen[cn] || !slices.Equal(roles, []string{secure.RoleWorker}) {
			t.Fatalf("worker-%d.pem: name %q (seen before: %v), roles %v: want a name of its own and the worker role", k, cn, seen[cn], roles)
		}
		seen[cn] = true
		if fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("worker-%d-key.pem", k))); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("worker-%d-key.pem: %v, %v", k, fi, err)
		}
	}

	dp, p4, ctl := "127.0.0.1:"+portOf(t, freeAddr(t)), "127.0.0.1:"+portOf(t, freeAddr(t)), "127.0.0.1:"+portOf(t, freeAddr(t))
	in := func(n string) string { return filepath.Join(dir, n) }
	sw := spawn(t, nil, "switch", "--dataplane", dp, "--p4rt", p4)
	waitLog(t, sw, "software switch up")
	c := spawn(t, nil, "controller", "--target", p4, "--listen", ctl, "--dataplane", dp, "--max-jobs-per-client", "1",
		"--tls-cert", in("controller.pem"), "--tls-key", in("controller-key.pem"), "--tls-client-ca", in("ca.pem"))
	waitLog(t, c, "controller ready")
	as := func(worker string, args ...string) []string {
		return append([]string{"allreduce", "--controller", ctl, "--elements", "1000", "--iters", "1", "--json",
			"--tls-ca", in("ca.pem"), "--tls-cert", in(worker + ".pem"), "--tls-key", in(worker + "-key.pem")}, args...)
	}
	// worker-1 holds a job that gathers (its rank 1 never comes).
	spawn(t, nil, as("worker-1", "--job", "held", "--workers", "2", "--rank", "0", "--join-timeout", "3m")...)
	waitJob(t, "held", "--controller", ctl, "--tls-ca", in("ca.pem"), "--tls-cert", in("admin.pem"), "--tls-key", in("admin-key.pem"))

	other := spawn(t, nil, as("worker-2", "--job", "other")...)
	if err := other.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("worker-2 was refused while worker-1 held its one job: %v\n%s", err, other.Logs())
	}
	var rep benchmarks.WorkerReport
	if err := json.Unmarshal(bytes.TrimSpace(other.Stdout()), &rep); err != nil || !rep.Verified {
		t.Fatalf("worker-2's job: %+v, %v", rep, err)
	}
	again := spawn(t, nil, as("worker-1", "--job", "again")...)
	if err := again.wait(t, 2*time.Minute); err == nil || !strings.Contains(again.Logs(), "ResourceExhausted") {
		t.Fatalf("worker-1's second job under --max-jobs-per-client 1: %v, want it refused with ResourceExhausted\n%s", err, again.Logs())
	}
}

// TestHostileTokenFile: the token read from --token-file (less its
// newline) is the job's token, the same as $SWITCHML_TOKEN's on another
// rank: a real 2-rank job verifies. An empty or missing file is refused
// naming the path; a --token on the command line warns and names the safe
// ways; the environment's token never shows in --help.
func TestHostileTokenFile(t *testing.T) {
	needProcesses(t)
	const secret = "tok-3f9a1c"
	dir := t.TempDir()
	file, empty := filepath.Join(dir, "job-secret"), filepath.Join(dir, "empty")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("job", func(t *testing.T) {
		f := startFabricWith(t, nil, "", nil, nil)
		args := func(rank int, extra ...string) []string {
			return append([]string{"allreduce", "--controller", f.controller, "--job", "tokened", "--workers", "2", "--rank", fmt.Sprint(rank),
				"--elements", "10000", "--iters", "2", "--json"}, extra...)
		}
		ps := []*proc{
			spawnEnv(t, []string{"SWITCHML_TOKEN="}, args(0, "--token-file", file)...),
			spawnEnv(t, []string{"SWITCHML_TOKEN=" + secret}, args(1)...),
		}
		for r, p := range ps {
			err := p.wait(t, 3*time.Minute)
			var rep benchmarks.WorkerReport
			if jerr := json.Unmarshal(bytes.TrimSpace(p.Stdout()), &rep); err != nil || jerr != nil || !rep.Verified {
				t.Fatalf("rank %d: %v, %v, %+v\n%s", r, err, jerr, rep, p.Logs())
			}
		}
		// A rank with another token is not let into a job of that name.
		spawnEnv(t, []string{"SWITCHML_TOKEN=other"}, args(0, "--job", "tokened2")...)
		waitJob(t, "tokened2", "--controller", f.controller)
		intruder := spawnEnv(t, []string{"SWITCHML_TOKEN="}, args(1, "--job", "tokened2", "--token-file", file)...)
		if err := intruder.wait(t, 3*time.Minute); err == nil || !strings.Contains(intruder.Logs(), "belongs to another owner") {
			t.Fatalf("a rank with the file's token joined a job registered with another: %v\n%s", err, intruder.Logs())
		}
	})

	for _, c := range []struct{ file, want string }{
		{empty, empty + " is empty"},
		{filepath.Join(dir, "missing"), filepath.Join(dir, "missing") + ": no such file"},
	} {
		out, err := runBinary(t, nil, "allreduce", "--controller", "127.0.0.1:1", "--connect-timeout", "1s", "--token-file", c.file)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("--token-file %s: %v, want an error saying %q:\n%s", c.file, err, c.want, out)
		}
		if strings.Contains(out, "connect") {
			t.Errorf("--token-file %s: the worker went on to the controller:\n%s", c.file, out)
		}
	}

	out, _ := runBinary(t, []string{"SWITCHML_TOKEN="}, "allreduce", "--controller", "127.0.0.1:1", "--connect-timeout", "1s", "--token", secret)
	for _, want := range []string{"--token on the command line", "--token-file", "$SWITCHML_TOKEN"} {
		if !strings.Contains(out, want) {
			t.Errorf("allreduce --token: the output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, secret) {
		t.Errorf("allreduce --token printed the token:\n%s", out)
	}
	out, _ = runBinary(t, []string{"SWITCHML_TOKEN=" + secret}, "allreduce", "--help")
	if strings.Contains(out, secret) {
		t.Errorf("allreduce --help shows $SWITCHML_TOKEN's value:\n%s", out)
	}
}
