package secure

import (
	"crypto/tls"
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
		want string
	}{
		{"server without key", func() error { _, err := Server(cert, "", ""); return err }, "certificate and its key"},
		{"server with a CA alone", func() error { _, err := Server("", "", pki.CA); return err }, "certificate and its key"},
		{"server key of another certificate", func() error {
			_, k2, _ := pki.Issue("other")
			_, err := Server(cert, k2, "")
			return err
		}, "server certificate"},
		{"client without CA", func() error { _, err := Client("", cert, key); return err }, "needs the CA"},
		{"client cert without key", func() error { _, err := Client(pki.CA, cert, ""); return err }, "needs its key"},
		{"CA file not PEM", func() error { _, err := Client(junk, "", ""); return err }, "holds no PEM certificate"},
		{"CA file missing", func() error { _, err := Server(cert, key, filepath.Join(dir, "nope.pem")); return err }, "CA file"},
	} {
		if err := bad.err(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error containing %q", bad.name, err, bad.want)
		}
	}
}
