package secure

import (
	"net"
	"net/netip"
)

// Loopback reports whether addr (host:port, or a bare host) names only
// this machine: a loopback IP address or "localhost". An empty or
// unspecified host (":50051", "0.0.0.0:50051") listens on every interface
// and is not loopback; neither is any other name.
func Loopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
