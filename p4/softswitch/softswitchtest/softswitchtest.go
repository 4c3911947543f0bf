// Package softswitchtest serves a software switch's P4Runtime service for
// the tests of its clients, as net/http/httptest serves HTTP.
package softswitchtest

import (
	"context"
	"net"
	"testing"

	"github.com/switchml/switchml-go/p4/softswitch"
)

// Serve runs the P4Runtime service of a software switch made with cfg on a
// loopback TCP listener until the test ends, and returns its address and
// the switch.
func Serve(t testing.TB, cfg softswitch.ServerConfig) (string, *softswitch.Server) {
	t.Helper()
	srv, err := softswitch.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.ServeP4Runtime(ctx, lis); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String(), srv
}
