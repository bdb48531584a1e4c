// Package tlsconf builds the daemon's server-side TLS configuration for
// producers that connect over TCP: TLS 1.3 only, a client certificate
// required and verified against a client CA, an optional allow-list of
// client identities, and certificate material that is re-read from disk
// while the daemon runs.
//
// The Manager holds the current material (server certificate and key,
// client CA pool). Every handshake picks it up through
// tls.Config.GetConfigForClient, so a rotated certificate or CA applies to
// the next connection without a restart; connections already open keep the
// material they were established with. A reload that fails — a missing
// file, a key that does not match its certificate, an expired certificate,
// a half-written PEM file — changes nothing: the previous material stays in
// use and the failure is reported.
package tlsconf

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// maxFileBytes caps each PEM file read, so a path pointed at the wrong
// file cannot make the daemon read without end.
const maxFileBytes = 1 << 20

// Options name the material and the policy.
type Options struct {
	CertFile     string // PEM server certificate chain, leaf first
	KeyFile      string // PEM private key of the leaf
	ClientCAFile string // PEM CA certificates client certificates must chain to
	// NoClientCerts serves TLS without asking clients for certificates
	// (ClientCAFile and AllowedIdentities are then refused): the listener
	// authenticates by other means (the HTTP door's bearer tokens).
	NoClientCerts bool
	// AllowedIdentities, when not empty, restricts clients to certificates
	// carrying at least one of these SANs (see ParseIdentity).
	AllowedIdentities []string
	Logger            *slog.Logger
	Now               func() time.Time // for tests; default time.Now
}

// Manager serves the current TLS material to handshakes and reloads it.
type Manager struct {
	opts  Options
	log   *slog.Logger
	allow allowList

	mu  sync.Mutex // serialises reloads
	cur atomic.Pointer[material]
}

// material is one consistent set of certificate, key and CA pool, with the
// tls.Config built from it. It is never modified once published.
type material struct {
	sum  [sha256.Size]byte // of the three files' contents
	cert *tls.Certificate
	cas  int // certificates in the client CA pool
	cfg  *tls.Config
}

// New loads the material and returns a Manager serving it. Any problem with
// the files or the allow-list is an error.
func New(opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	for _, f := range []struct{ key, path string }{
		{"tls_cert_file", opts.CertFile}, {"tls_key_file", opts.KeyFile}, {"tls_client_ca_file", opts.ClientCAFile},
	} {
		if f.path == "" && !(opts.NoClientCerts && f.key == "tls_client_ca_file") {
			return nil, fmt.Errorf("tls: %s is not set", f.key)
		}
	}
	if opts.NoClientCerts && (opts.ClientCAFile != "" || len(opts.AllowedIdentities) > 0) {
		return nil, errors.New("tls: tls_client_ca_file and tls_allowed_identities ask for client certificates, which this listener does not")
	}
	allow, err := ParseIdentities(opts.AllowedIdentities)
	if err != nil {
		return nil, fmt.Errorf("tls: tls_allowed_identities: %w", err)
	}
	m := &Manager{opts: opts, log: opts.Logger, allow: allow}
	if _, err := m.Reload(); err != nil {
		return nil, err
	}
	return m, nil
}

// ServerConfig returns the configuration for tls.NewListener. It is fixed;
// each handshake gets the current material from GetConfigForClient.
func (m *Manager) ServerConfig() *tls.Config {
	cfg := &tls.Config{
		// Go servers accept TLS 1.2 unless told otherwise; producers get 1.3.
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return m.cur.Load().cfg, nil
		},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.cur.Load().cert, nil
		},
		VerifyConnection:       m.verifyConnection,
		SessionTicketsDisabled: true,
	}
	if m.opts.NoClientCerts {
		cfg.ClientAuth, cfg.VerifyConnection = tls.NoClientCert, nil
	}
	return cfg
}

// OptionalClientConfig is ServerConfig for a listener where a client
// certificate is asked for but not required (the metrics endpoint: its
// scrapers have none). A certificate that is sent is verified against
// the client CA and the allow-list exactly as ServerConfig's; a
// connection without one is let through, and the handler judges it
// (its tls.ConnectionState has no VerifiedChains). With NoClientCerts it
// is ServerConfig: no certificate is asked for.
func (m *Manager) OptionalClientConfig() *tls.Config {
	if m.opts.NoClientCerts {
		return m.ServerConfig()
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.VerifyClientCertIfGiven,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := m.cur.Load().cfg.Clone()
			c.ClientAuth = tls.VerifyClientCertIfGiven
			c.VerifyConnection = m.verifyIfGiven
			return c, nil
		},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.cur.Load().cert, nil
		},
		VerifyConnection:       m.verifyIfGiven,
		SessionTicketsDisabled: true,
	}
}

// verifyIfGiven authorises a client certificate's identity when there is
// one.
func (m *Manager) verifyIfGiven(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	return m.allow.check(cs.PeerCertificates[0])
}

// Certificate returns the server certificate currently served.
func (m *Manager) Certificate() *tls.Certificate { return m.cur.Load().cert }

// verifyConnection runs after the chain has been verified against the
// client CA: it authorises the client's identity.
func (m *Manager) verifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: no client certificate")
	}
	return m.allow.check(cs.PeerCertificates[0])
}

// Reload re-reads the three files and, if their contents changed and form
// valid material, makes it current. It reports whether the material
// changed. On error the previous material stays current.
func (m *Manager) Reload() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	certPEM, keyPEM, caPEM, sum, err := m.read()
	if err != nil {
		return false, err
	}
	old := m.cur.Load()
	if old != nil && old.sum == sum {
		return false, nil
	}
	mat, err := m.build(certPEM, keyPEM, caPEM, sum)
	if err != nil {
		return false, err
	}
	m.cur.Store(mat)
	leaf := mat.cert.Leaf
	msg := "tls material loaded"
	if old != nil {
		msg = "tls material reloaded"
	}
	m.log.Info(msg, "cert_file", m.opts.CertFile, "subject", leaf.Subject.String(),
		"serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339),
		"client_ca_file", m.opts.ClientCAFile, "client_cas", mat.cas,
		"allowed_identities", len(m.allow))
	return true, nil
}

// Run reloads every interval and whenever hup delivers (nil: never), until
// ctx ends. A failing reload is logged as an error once per distinct
// failure; a reload asked for by hup always logs its outcome.
func (m *Manager) Run(ctx context.Context, interval time.Duration, hup <-chan os.Signal) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	lastErr := ""
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-hup:
			forced = true
		}
		changed, err := m.Reload()
		switch {
		case err != nil:
			if forced || err.Error() != lastErr {
				m.log.Error("tls reload failed; still serving the previous certificate and client CA", "err", err)
			}
			lastErr = err.Error()
		case forced && !changed:
			m.log.Info("tls reload requested; files unchanged")
			lastErr = ""
		default:
			lastErr = ""
		}
	}
}

// read returns the three files and a digest of them.
func (m *Manager) read() (certPEM, keyPEM, caPEM []byte, sum [sha256.Size]byte, err error) {
	files := []struct {
		key, path string
		out       *[]byte
	}{
		{"tls_cert_file", m.opts.CertFile, &certPEM},
		{"tls_key_file", m.opts.KeyFile, &keyPEM},
		{"tls_client_ca_file", m.opts.ClientCAFile, &caPEM},
	}
	h := sha256.New()
	for _, f := range files {
		if f.path == "" { // the client CA of a listener without client certificates
			continue
		}
		b, err := readFile(f.path)
		if err != nil {
			return nil, nil, nil, sum, fmt.Errorf("tls: %s: %w", f.key, err)
		}
		*f.out = b
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	copy(sum[:], h.Sum(nil))
	return certPEM, keyPEM, caPEM, sum, nil
}

func readFile(path string) ([]byte, error) {
	fi, err := os.Stat(path) // follows links: mounted secrets are often links
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; is it really a PEM file?", path, maxFileBytes)
	}
	return b, nil
}

func (m *Manager) build(certPEM, keyPEM, caPEM []byte, sum [sha256.Size]byte) (*material, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: tls_cert_file %s with tls_key_file %s: %w", m.opts.CertFile, m.opts.KeyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: tls_cert_file %s: %w", m.opts.CertFile, err)
		}
		pair.Leaf = leaf
	}
	if now := m.opts.Now(); now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("tls: tls_cert_file %s: certificate %q expired at %s",
			m.opts.CertFile, leaf.Subject.String(), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if fi, err := os.Stat(m.opts.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		m.log.Warn("tls_key_file is readable by group or others; make it mode 0600", "key_file", m.opts.KeyFile, "mode", fi.Mode().Perm().String())
	}
	cfg := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{pair},
		SessionTicketsDisabled: true, // a resumed session would skip the CA check against rotated material
	}
	if m.opts.NoClientCerts {
		return &material{sum: sum, cert: &pair, cfg: cfg}, nil
	}
	pool, n, err := parseCAs(caPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: tls_client_ca_file %s: %w", m.opts.ClientCAFile, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("tls: tls_client_ca_file %s: no CERTIFICATE block found", m.opts.ClientCAFile)
	}
	cfg.ClientAuth, cfg.ClientCAs, cfg.VerifyConnection = tls.RequireAndVerifyClientCert, pool, m.verifyConnection
	return &material{sum: sum, cert: &pair, cas: n, cfg: cfg}, nil
}

// parseCAs reads every CERTIFICATE block of a PEM bundle, failing on any
// that does not parse rather than skipping it.
func parseCAs(data []byte) (*x509.CertPool, int, error) {
	pool := x509.NewCertPool()
	n := 0
	rest := bytes.TrimSpace(data)
	for len(rest) > 0 {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if n == 0 {
				return nil, 0, errors.New("not a PEM file")
			}
			return nil, 0, fmt.Errorf("data after certificate %d is not PEM", n)
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
		rest = bytes.TrimSpace(rest)
	}
	return pool, n, nil
}
