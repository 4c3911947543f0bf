package main

import (
	"context"
	"fmt"
	"time"

	"github.com/switchml/switchml-go/internal/harness"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/switchml"
)

func init() {
	register("wait", "waits until a controller serves its job service (its switch is programmed and workers can join), for scripts that start one", runWait)
}

func runWait(ctx context.Context, args []string) error {
	fs := newFlags("wait", "[--controller ADDR] [--timeout D] [flags]")
	addr := fs.String("controller", switchml.DefaultController, "controller gRPC address")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait")
	tlsCA := fs.String("tls-ca", "", "CA (PEM) of the controller's certificate: the link to the controller speaks TLS")
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) presented to the controller (mutual TLS)")
	tlsKey := fs.String("tls-key", "", "key (PEM) of --tls-cert")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", *timeout)
	}
	tlsCfg, err := secure.Client(*tlsCA, *tlsCert, *tlsKey)
	if err != nil {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := harness.WaitReady(ctx, *addr, nil, tlsCfg); err != nil {
		return fmt.Errorf("the controller at %s did not answer within --timeout %v: %w", *addr, *timeout, err)
	}
	return nil
}
