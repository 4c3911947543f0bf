package secure

import (
	"crypto/tls"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigs(t *testing.T) {
	dir := t.TempDir()
	pki, err := NewPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.Issue("server", "127.0.0.1", "switch.example")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Server("", "", ""); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want no TLS", c, err)
	}
	if c, err := Client("", "", ""); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want no TLS", c, err)
	}
	s, err := Server(cert, key, pki.CA)
	if err != nil || s.ClientAuth != tls.RequireAndVerifyClientCert || len(s.Certificates) != 1 {
		t.Fatalf("mutual server: %+v, %v", s, err)
	}
	c, err := Client(pki.CA, cert, key)
	if err != nil || c.RootCAs == nil || len(c.Certificates) != 1 {
		t.Fatalf("client: %+v, %v", c, err)
	}
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not pem"), 0o600)
	for _, bad := range []struct {
		name string
		err  func() error
		is   error // nil: the message has want
		want string
	}{
		{"server without key", func() error { _, err := Server(cert, "", ""); return err }, ErrIncomplete, "certificate and its key"},
		{"server with a CA alone", func() error { _, err := Server("", "", pki.CA); return err }, ErrIncomplete, "certificate and its key"},
		{"server key of another certificate", func() error {
			_, k2, _ := pki.Issue("other")
			_, err := Server(cert, k2, "")
			return err
		}, nil, "server certificate"},
		{"client without CA", func() error { _, err := Client("", cert, key); return err }, ErrIncomplete, "needs the CA"},
		{"client cert without key", func() error { _, err := Client(pki.CA, cert, ""); return err }, ErrIncomplete, "needs its key"},
		{"CA file not PEM", func() error { _, err := Client(junk, "", ""); return err }, nil, "holds no PEM certificate"},
		{"CA file missing", func() error { _, err := Server(cert, key, filepath.Join(dir, "nope.pem")); return err }, fs.ErrNotExist, "CA file"},
	} {
		err := bad.err()
		if bad.is != nil && !errors.Is(err, bad.is) {
			t.Errorf("%s: %v, want %v", bad.name, err, bad.is)
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error containing %q", bad.name, err, bad.want)
		}
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:50051": true, "[::1]:9559": true, "localhost:1": true, "127.0.0.2": true, "[::ffff:127.0.0.1]:1": true,
		"0.0.0.0:50051": false, ":50051": false, "[::]:1": false, "10.0.0.1:1": false, "example.com:1": false, "": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestPKIKeysPrivate: keys are written with mode 0600 even over files that
// were readable by others, and through no symbolic link.
func TestPKIKeysPrivate(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(filepath.Join(dir, "ca-key.pem"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "worker-key.pem")); err != nil {
		t.Fatal(err)
	}
	p, err := NewPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Issue(RoleWorker); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ca-key.pem", "worker-key.pem"} {
		fi, err := os.Lstat(filepath.Join(dir, n))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want a regular file with mode 0600", n, fi.Mode(), err)
		}
	}
	if _, err := os.Stat(elsewhere); err == nil {
		t.Errorf("the key was written through the symbolic link to %s", elsewhere)
	}
}
