package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/switchml"
)

func init() {
	register("status", "what a controller holds: live jobs with their ranks and slots, jobs still gathering, the pool's use and the switch's counters", runStatus)
}

func runStatus(ctx context.Context, args []string) error {
	return statusCommand(ctx, args, os.Stdout)
}

func statusCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("status", "[--controller ADDR] [--json] [flags]")
	addr := fs.String("controller", switchml.DefaultController, "controller gRPC address")
	asJSON := fs.Bool("json", false, "print the controller's answer as JSON (snake_case field names of job.proto's StatusResponse)")
	noCounters := fs.Bool("no-counters", false, "do not read the switch's counters")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the controller")
	tlsCA := fs.String("tls-ca", "", "CA (PEM) of the controller's certificate: the link to the controller speaks TLS")
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) presented to the controller (mutual TLS)")
	tlsKey := fs.String("tls-key", "", "key (PEM) of --tls-cert")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsCfg, err := secure.Client(*tlsCA, *tlsCert, *tlsKey)
	if err != nil {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
	}
	c, conn, err := newJobClient(*addr, tlsCfg)
	if err != nil {
		return fmt.Errorf("--controller %q: %w", *addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := fetchStatus(ctx, c, *noCounters)
	if err != nil {
		return fmt.Errorf("status of the controller at %s: %w (is `switchml controller` running there, and given TLS flags if it requires TLS?)", *addr, err)
	}
	if !*asJSON {
		return writeStatusText(out, *addr, st)
	}
	b, err := statusJSON(st)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
