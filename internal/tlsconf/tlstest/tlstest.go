// Package tlstest makes throw-away certificate authorities and
// certificates (ECDSA P-256) for tests of the TCP + mutual TLS ingress.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// Leaf is a certificate issued by a CA, with its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	TLS     tls.Certificate
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// NewCA makes a CA named cn, valid from an hour ago for a day.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Spec describes a leaf certificate.
type Spec struct {
	CommonName string
	// Names are SANs, classified by form: "scheme://…" is a URI, "a@b" an
	// email address, an IP literal an IP address, anything else a DNS name.
	Names     []string
	Server    bool // serverAuth key usage (else clientAuth)
	NotBefore time.Time
	NotAfter  time.Time
}

// Issue signs a leaf certificate.
func (ca *CA) Issue(t testing.TB, s Spec) *Leaf {
	t.Helper()
	key := newKey(t)
	if s.NotBefore.IsZero() {
		s.NotBefore = time.Now().Add(-time.Hour)
	}
	if s.NotAfter.IsZero() {
		s.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: s.CommonName},
		NotBefore:    s.NotBefore,
		NotAfter:     s.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if s.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	for _, n := range s.Names {
		switch ip := net.ParseIP(n); {
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case strings.Contains(n, "://"):
			u, err := url.Parse(n)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		case strings.Contains(n, "@"):
			tmpl.EmailAddresses = append(tmpl.EmailAddresses, n)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
	l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Server issues a server certificate for localhost, 127.0.0.1 and ::1.
func (ca *CA) Server(t testing.TB) *Leaf {
	t.Helper()
	return ca.Issue(t, Spec{CommonName: "weir test server", Names: []string{"localhost", "127.0.0.1", "::1"}, Server: true})
}

// Client issues a client certificate carrying names as SANs.
func (ca *CA) Client(t testing.TB, names ...string) *Leaf {
	t.Helper()
	return ca.Issue(t, Spec{CommonName: "weir test client", Names: names})
}

// ClientConfig is a client configuration that trusts serverCA for the
// server and presents leaf (nil: no client certificate). It presents leaf
// even when the server's list of acceptable CAs does not name its issuer
// (a Go client given Certificates would then send none), so that tests
// see the server judge a foreign certificate.
func ClientConfig(serverCA *CA, leaf *Leaf) *tls.Config {
	cfg := &tls.Config{RootCAs: serverCA.Pool(), MinVersion: tls.VersionTLS13}
	if leaf != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &leaf.TLS, nil
		}
	}
	return cfg
}

// Files are the paths of a server's certificate, key and client CA.
type Files struct {
	Cert, Key, ClientCA string
}

// NewFiles names the three files in dir.
func NewFiles(dir string) Files {
	return Files{
		Cert:     filepath.Join(dir, "server.crt"),
		Key:      filepath.Join(dir, "server.key"),
		ClientCA: filepath.Join(dir, "client-ca.crt"),
	}
}

// Write writes the server leaf and the client CA bundle (one or more CAs)
// to f, each file replaced atomically.
func (f Files) Write(t testing.TB, server *Leaf, clientCAs ...*CA) {
	t.Helper()
	var bundle []byte
	for _, ca := range clientCAs {
		bundle = append(bundle, ca.CertPEM...)
	}
	WriteFile(t, f.Cert, server.CertPEM)
	WriteFile(t, f.Key, server.KeyPEM)
	WriteFile(t, f.ClientCA, bundle)
}

// WriteFile replaces path with data (mode 0600) by writing a temporary
// file and renaming it over path.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
