package secure

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// PKI is a throwaway certificate authority with certificates it signed,
// written as PEM files: for tests and for trying the secure setup on one
// machine (`switchml certs`). Real deployments use their own CA.
type PKI struct {
	Dir string
	CA  string // the CA certificate
}

// NewPKI creates a CA in dir (ca.pem, ca-key.pem).
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "switchml CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, CA: filepath.Join(dir, "ca.pem")}
	if err := writePEM(p.CA, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return p, writePEM(filepath.Join(dir, "ca-key.pem"), "EC PRIVATE KEY", kb)
}

// Issue signs a certificate named name (name.pem, name-key.pem) for the
// given hosts (IP addresses or DNS names; none for a client certificate).
// A name that is a role (switch, controller, worker, admin) gives the
// certificate that role; see IssueRole.
func (p *PKI) Issue(name string, hosts ...string) (certFile, keyFile string, err error) {
	role := ""
	if knownRole(name) {
		role = name
	}
	return p.IssueRole(name, role, hosts...)
}

// IssueRole signs a certificate named name (its common name, and the files
// name.pem and name-key.pem) that carries role as a URI SAN
// (RoleURIPrefix + role; none when role is empty), for the given hosts.
func (p *PKI) IssueRole(name, role string, hosts ...string) (certFile, keyFile string, err error) {
	if role != "" && !knownRole(role) {
		return "", "", fmt.Errorf("secure: unknown role %q (want %s, %s, %s or %s)", role, RoleSwitch, RoleController, RoleWorker, RoleAdmin)
	}
	caCert, caKey, err := p.load()
	if err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if role != "" {
		u, err := url.Parse(RoleURIPrefix + role)
		if err != nil {
			return "", "", err
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "EC PRIVATE KEY", kb)
}

func (p *PKI) load() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(p.CA)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(filepath.Join(p.Dir, "ca-key.pem"))
	if err != nil {
		return nil, nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, nil, fmt.Errorf("secure: %s: not a PEM CA", p.Dir)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	return cert, key, err
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// writePEM writes one PEM block to file with mode 0600 (WritePrivateFile).
func writePEM(file, typ string, der []byte) error {
	return WritePrivateFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// WritePrivateFile replaces file with b, mode 0600, whatever file was
// before: it writes a new file beside it, syncs it and renames it over,
// so that an existing file's mode (or a symbolic link there) never
// carries over to private content, and a crash leaves the old content or
// the new.
func WritePrivateFile(file string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, nothing is left to remove
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		_ = d.Sync() // the rename itself survives a crash
		d.Close()
	}
	return nil
}
