package secure

import (
	"context"
	"crypto/x509"
	"net"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Roles a certificate can carry. `switchml certs` (PKI.Issue) writes the
// role into the certificate as a URI SAN (RoleURIPrefix + role), so that a
// server can tell a controller from a worker signed by the same CA.
const (
	RoleSwitch     = "switch"     // a switch's P4Runtime and data-plane host
	RoleController = "controller" // may program the switch over P4Runtime
	RoleWorker     = "worker"     // may join jobs through the job service
	RoleAdmin      = "admin"      // may see everything the controller's Status holds
)

// RoleURIPrefix starts the URI SAN that names a certificate's role.
const RoleURIPrefix = "urn:switchml:role:"

// knownRole reports whether r is one of the roles above.
func knownRole(r string) bool {
	switch r {
	case RoleSwitch, RoleController, RoleWorker, RoleAdmin:
		return true
	}
	return false
}

// Identity is who a gRPC peer is: the names and roles of its verified
// client certificate, if it presented one, and its address.
type Identity struct {
	// Names are the certificate's subject common name, DNS and URI SANs
	// and e-mail addresses, in that order; empty without a verified
	// certificate.
	Names []string
	// Roles are those named by RoleURIPrefix URI SANs.
	Roles []string
	// Addr is the peer's IP address (invalid when unknown).
	Addr netip.Addr
	// TLS reports whether the call came over TLS (with or without a
	// client certificate).
	TLS bool
}

// Verified reports whether the peer presented a certificate the server's
// client CA verified.
func (id Identity) Verified() bool { return len(id.Names) > 0 }

// Name is the identity's first name: the certificate's common name (or
// first SAN), else the peer's address, else "unknown". It is what logs and
// refusals call the peer, and what quotas count by.
func (id Identity) Name() string {
	switch {
	case len(id.Names) > 0:
		return "cert:" + id.Names[0]
	case id.Addr.IsValid():
		return "addr:" + id.Addr.String()
	}
	return "unknown"
}

// String describes the identity for a refusal: its name and roles.
func (id Identity) String() string {
	if len(id.Roles) == 0 {
		return id.Name()
	}
	return id.Name() + " (role " + strings.Join(id.Roles, ",") + ")"
}

// HasRole reports whether the certificate carries role.
func (id Identity) HasRole(role string) bool { return slices.Contains(id.Roles, role) }

// IdentityOf reads the identity of the peer of a gRPC call or stream.
func IdentityOf(ctx context.Context) Identity {
	var id Identity
	p, ok := peer.FromContext(ctx)
	if !ok {
		return id
	}
	if a, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		id.Addr = a.Addr().Unmap()
	} else if ta, ok := p.Addr.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			id.Addr = ip.Unmap()
		}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	id.TLS = ok
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return id
	}
	leaf := info.State.VerifiedChains[0][0]
	id.Names, id.Roles = certNames(leaf)
	return id
}

// certNames lists a certificate's names and the roles its URI SANs give.
func certNames(c *x509.Certificate) (names, roles []string) {
	if c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	names = append(names, c.DNSNames...)
	for _, u := range c.URIs {
		s := u.String()
		names = append(names, s)
		if r, ok := strings.CutPrefix(s, RoleURIPrefix); ok && r != "" {
			roles = append(roles, r)
		}
	}
	names = append(names, c.EmailAddresses...)
	return names, roles
}

// Allow says which verified identities may make a kind of call: those
// whose certificate carries one of Roles, or one of Names (a common name,
// DNS, URI or e-mail SAN).
type Allow struct {
	Roles []string
	Names []string
}

// Permits reports whether id is allowed. An unverified identity never is.
func (a Allow) Permits(id Identity) bool {
	if !id.Verified() {
		return false
	}
	for _, r := range a.Roles {
		if id.HasRole(r) {
			return true
		}
	}
	for _, n := range a.Names {
		if slices.Contains(id.Names, n) {
			return true
		}
	}
	return false
}

// String lists what a is satisfied by, for refusals and logs.
func (a Allow) String() string {
	var parts []string
	for _, r := range a.Roles {
		parts = append(parts, "role "+r)
	}
	for _, n := range a.Names {
		parts = append(parts, "name "+n)
	}
	if len(parts) == 0 {
		return "nobody"
	}
	return strings.Join(parts, " or ")
}
