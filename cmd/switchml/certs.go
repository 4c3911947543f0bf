package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchml/switchml-go/secure"
)

func init() {
	register("certs", "writes a throwaway CA and certificates for the switch, the controller, workers and an operator (PEM), each with its role, to try the mutual-TLS setup", runCerts)
}

// certIdentity is one certificate `switchml certs` writes: its name (the
// files NAME.pem and NAME-key.pem, and the certificate's common name, which
// the controller counts quotas by) and its role.
type certIdentity struct{ name, role string }

// certIdentities lists the certificates to write: the switch, the
// controller, the operator, and one worker certificate shared by every
// worker host (worker.pem) or, with workers > 0, one per worker host
// (worker-1.pem ... worker-N.pem).
func certIdentities(workers int) []certIdentity {
	ids := []certIdentity{{secure.RoleSwitch, secure.RoleSwitch}, {secure.RoleController, secure.RoleController}}
	if workers == 0 {
		ids = append(ids, certIdentity{secure.RoleWorker, secure.RoleWorker})
	}
	for k := 1; k <= workers; k++ {
		ids = append(ids, certIdentity{fmt.Sprintf("%s-%d", secure.RoleWorker, k), secure.RoleWorker})
	}
	return append(ids, certIdentity{secure.RoleAdmin, secure.RoleAdmin})
}

func runCerts(_ context.Context, args []string) error {
	fs := newFlags("certs", "[--dir DIR] [--hosts IP,...] [--workers N] [--force]")
	dir := fs.String("dir", "switchml-certs", "folder to write ca.pem and the certificates to")
	hosts := fs.String("hosts", "127.0.0.1", "comma-separated addresses or names of the switch and controller hosts (put in their certificates)")
	workers := fs.Int("workers", 0, "write one worker certificate per worker host, worker-1.pem ... worker-N.pem, each its own identity for the controller's per-client quotas (0: one worker.pem that every worker shares, and so one quota)")
	force := fs.Bool("force", false, "overwrite certificates and keys already in --dir (every key is written anew with mode 0600)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *workers < 0 || *workers > 10000 {
		return fmt.Errorf("--workers %d: want 0..10000 (0: one worker.pem shared by every worker)", *workers)
	}
	ids := certIdentities(*workers)
	if !*force {
		if err := certsAbsent(*dir, ids); err != nil {
			return err
		}
	}
	pki, err := secure.NewPKI(*dir)
	if err != nil {
		return fmt.Errorf("--dir %s: %w", *dir, err)
	}
	hs := strings.Split(*hosts, ",")
	for _, id := range ids {
		var h []string
		if id.role == secure.RoleSwitch || id.role == secure.RoleController {
			h = hs
		}
		cert, key, err := pki.IssueRole(id.name, id.role, h...)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s %s %s\n", id.name, cert, key)
	}
	fmt.Printf("%-10s %s\n", "CA", pki.CA)
	return nil
}

// certsAbsent refuses to write over files already in dir, naming them.
func certsAbsent(dir string, ids []certIdentity) error {
	names := []string{"ca.pem", "ca-key.pem"}
	for _, id := range ids {
		names = append(names, id.name+".pem", id.name+"-key.pem")
	}
	var exist []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Lstat(p); err == nil {
			exist = append(exist, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--dir %s: %w", dir, err)
		}
	}
	if len(exist) > 0 {
		return fmt.Errorf("--dir %s already holds %s: pass --force to replace them (a new CA invalidates every certificate it signed), or choose another --dir", dir, strings.Join(exist, ", "))
	}
	return nil
}
