// Package freeport reserves loopback addresses for tests whose processes or
// goroutines must know each other's listen addresses before they listen.
package freeport

import "net"

// TB is what Loopback needs of a test; *testing.T has it. The package does
// not import testing, so that it stays out of the programs that use it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Loopback returns n distinct 127.0.0.1 addresses that were free a moment
// ago. Another program may take one before the test listens on it, which
// on a test machine is rare enough.
func Loopback(t TB, n int) []string {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserving a loopback port: %v", err)
		}
		// Held until all are taken, so the n addresses differ.
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}
