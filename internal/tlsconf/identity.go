package tlsconf

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// ErrIdentityNotAllowed is returned by the handshake when a client
// certificate chains to a trusted CA but names none of the allowed
// identities.
var ErrIdentityNotAllowed = errors.New("client certificate identity is not allowed")

// IdentityKind is the kind of subject alternative name an identity is
// matched against.
type IdentityKind string

// The kinds of identity an allow-list entry can name.
const (
	DNS   IdentityKind = "DNS"
	URI   IdentityKind = "URI"
	Email IdentityKind = "email"
)

// Identity is one allow-list entry: a SAN of one kind.
type Identity struct {
	Kind  IdentityKind
	Value string // normalised: DNS names lower-case without a trailing dot
}

func (id Identity) String() string { return string(id.Kind) + ":" + id.Value }

// ParseIdentity classifies one allow-list entry by its form and checks it:
// an entry with a scheme ("spiffe://trust.example/producer") is a URI SAN,
// an entry with an "@" is an email SAN, anything else is a DNS SAN. An entry
// only ever matches a SAN of its own kind, so a URI can never satisfy a
// DNS entry or the other way round. Wildcards are not supported: every
// allowed identity is listed exactly.
func ParseIdentity(s string) (Identity, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Identity{}, errors.New("empty identity")
	case strings.ContainsAny(s, " \t\r\n\x00"):
		return Identity{}, fmt.Errorf("identity %q contains white space or a control character", s)
	case strings.Contains(s, "*"):
		return Identity{}, fmt.Errorf("identity %q: wildcards are not supported; list each allowed identity", s)
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" {
			return Identity{}, fmt.Errorf("identity %q is not a valid URI", s)
		}
		return Identity{Kind: URI, Value: u.String()}, nil
	case strings.Contains(s, "@"):
		local, domain, _ := strings.Cut(s, "@")
		if local == "" || domain == "" || strings.Contains(domain, "@") {
			return Identity{}, fmt.Errorf("identity %q is not a valid email address", s)
		}
		return Identity{Kind: Email, Value: local + "@" + strings.ToLower(domain)}, nil
	case strings.Contains(s, ":"):
		return Identity{}, fmt.Errorf("identity %q: a URI needs a scheme and \"//\" (spiffe://…); a DNS name has no colon", s)
	default:
		name := strings.ToLower(strings.TrimSuffix(s, "."))
		for _, label := range strings.Split(name, ".") {
			if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				return Identity{}, fmt.Errorf("identity %q is not a valid DNS name", s)
			}
		}
		return Identity{Kind: DNS, Value: name}, nil
	}
}

// ParseIdentities parses an allow-list; see ParseIdentity.
func ParseIdentities(list []string) ([]Identity, error) {
	var out []Identity
	var errs []error
	for _, s := range list {
		id, err := ParseIdentity(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, errors.Join(errs...)
}

// CertIdentities lists the SANs of cert that an allow-list can match, in
// the same normalised form as ParseIdentity.
func CertIdentities(cert *x509.Certificate) []Identity {
	var out []Identity
	for _, n := range cert.DNSNames {
		out = append(out, Identity{Kind: DNS, Value: strings.ToLower(strings.TrimSuffix(n, "."))})
	}
	for _, u := range cert.URIs {
		out = append(out, Identity{Kind: URI, Value: u.String()})
	}
	for _, e := range cert.EmailAddresses {
		if local, domain, ok := strings.Cut(e, "@"); ok {
			e = local + "@" + strings.ToLower(domain)
		}
		out = append(out, Identity{Kind: Email, Value: e})
	}
	return out
}

// allowList authorises a verified client certificate. An empty list allows
// every certificate that chains to the client CA.
type allowList []Identity

// check returns nil if cert carries an allowed identity.
func (a allowList) check(cert *x509.Certificate) error {
	if len(a) == 0 {
		return nil
	}
	have := CertIdentities(cert)
	for _, id := range have {
		if slices.Contains(a, id) {
			return nil
		}
	}
	names := make([]string, len(have))
	for i, id := range have {
		names[i] = id.String()
	}
	if len(names) == 0 {
		names = []string{"no DNS, URI or email SAN"}
	}
	return fmt.Errorf("%w: certificate (subject %q) names %s; none is in tls_allowed_identities",
		ErrIdentityNotAllowed, cert.Subject.String(), strings.Join(names, ", "))
}
