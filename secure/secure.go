// Package secure builds the TLS configurations of SwitchML's gRPC links
// (workers to the controller's job service, the controller to a switch's
// P4Runtime server) from PEM files, with mutual authentication: a server
// that is given a client CA accepts only clients with a certificate that CA
// signed, and clients check the server against their CA.
package secure

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrIncomplete is a set of TLS files that lacks one the others need, such
// as a certificate without its key.
var ErrIncomplete = errors.New("secure: incomplete TLS files")

// Server returns the TLS configuration of a server with the certificate
// and key in certFile and keyFile. With clientCAFile, clients must present
// a certificate signed by one of its CAs (mutual TLS). All empty: nil, no
// TLS.
func Server(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" && clientCAFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: a server needs a certificate and its key", ErrIncomplete)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("secure: server certificate %s / key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client returns the TLS configuration of a client that trusts the CAs in
// caFile and, with certFile and keyFile, presents that certificate (mutual
// TLS). All empty: nil, no TLS.
func Client(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	if caFile == "" {
		return nil, fmt.Errorf("%w: a client needs the CA of the server's certificate", ErrIncomplete)
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs its key, and a key its certificate", ErrIncomplete)
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("secure: client certificate %s / key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("secure: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("secure: %s holds no PEM certificate", file)
	}
	return pool, nil
}
