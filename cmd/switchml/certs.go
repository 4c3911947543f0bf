package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchml/switchml-go/secure"
)

func init() {
	register("certs", "writes a throwaway CA and certificates for the switch, the controller, workers and an operator (PEM), each with its role, to try the mutual-TLS setup", runCerts)
}

func runCerts(_ context.Context, args []string) error {
	fs := newFlags("certs", "[--dir DIR] [--hosts IP,...]")
	dir := fs.String("dir", "switchml-certs", "folder to write ca.pem and the certificates to")
	hosts := fs.String("hosts", "127.0.0.1", "comma-separated addresses or names of the switch and controller hosts (put in their certificates)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pki, err := secure.NewPKI(*dir)
	if err != nil {
		return fmt.Errorf("--dir %s: %w", *dir, err)
	}
	hs := strings.Split(*hosts, ",")
	for _, name := range []string{secure.RoleSwitch, secure.RoleController, secure.RoleWorker, secure.RoleAdmin} {
		var h []string
		if name == secure.RoleSwitch || name == secure.RoleController {
			h = hs
		}
		cert, key, err := pki.Issue(name, h...)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s %s %s\n", name, cert, key)
	}
	fmt.Printf("%-10s %s\n", "CA", pki.CA)
	return nil
}
