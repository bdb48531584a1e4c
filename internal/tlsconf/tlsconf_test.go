package tlsconf_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
)

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newManager(t *testing.T, f tlstest.Files, allowed ...string) (*tlsconf.Manager, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	m, err := tlsconf.New(tlsconf.Options{
		CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: f.ClientCA,
		AllowedIdentities: allowed,
		Logger:            slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, lb
}

func TestParseIdentity(t *testing.T) {
	good := []struct {
		in   string
		want tlsconf.Identity
	}{
		{"producer.example.com", tlsconf.Identity{Kind: tlsconf.DNS, Value: "producer.example.com"}},
		{"Producer.Example.COM.", tlsconf.Identity{Kind: tlsconf.DNS, Value: "producer.example.com"}},
		{" spiffe://weir.test/ns/prod/sa/ingest ", tlsconf.Identity{Kind: tlsconf.URI, Value: "spiffe://weir.test/ns/prod/sa/ingest"}},
		{"ops@Example.com", tlsconf.Identity{Kind: tlsconf.Email, Value: "ops@example.com"}},
	}
	for _, tc := range good {
		got, err := tlsconf.ParseIdentity(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseIdentity(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	bad := map[string]string{
		"":                   "empty",
		"*.example.com":      "wildcards are not supported",
		"spiffe://a/*":       "wildcards are not supported",
		"host:443":           "a URI needs a scheme",
		"a@b@c":              "not a valid email",
		"@example.com":       "not a valid email",
		"bad..name":          "not a valid DNS name",
		"two words":          "white space",
		"://nohost":          "not a valid URI",
		"name/with/slashes.": "not a valid DNS name",
	}
	for in, want := range bad {
		if _, err := tlsconf.ParseIdentity(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseIdentity(%q) error = %v, want it to mention %q", in, err, want)
		}
	}
	if _, err := tlsconf.ParseIdentities([]string{"ok.example", "*.x", "y:1"}); err == nil ||
		!strings.Contains(err.Error(), "*.x") || !strings.Contains(err.Error(), "y:1") {
		t.Errorf("ParseIdentities reports every bad entry: %v", err)
	}
}

// TestAllowList checks each SAN kind matches only entries of its own kind.
func TestAllowList(t *testing.T) {
	ca := tlstest.NewCA(t, "client ca")
	f := tlstest.NewFiles(t.TempDir())
	f.Write(t, ca.Server(t), ca)
	m, _ := newManager(t, f, "ingest.weir.test", "spiffe://weir.test/producer", "ops@weir.test")
	verify := m.ServerConfig().VerifyConnection

	cases := []struct {
		name  string
		names []string
		ok    bool
	}{
		{"dns", []string{"other.weir.test", "INGEST.weir.test"}, true},
		{"uri", []string{"spiffe://weir.test/producer"}, true},
		{"email", []string{"ops@WEIR.test"}, true},
		{"uri with other path", []string{"spiffe://weir.test/producer/extra"}, false},
		{"email local part differs", []string{"Ops@weir.test"}, false},
		{"dns name only as uri host", []string{"https://ingest.weir.test"}, false},
		{"no match", []string{"intruder.weir.test", "spiffe://evil.test/producer"}, false},
		{"no sans", nil, false},
	}
	for _, tc := range cases {
		leaf := ca.Client(t, tc.names...)
		err := verify(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf.Cert}})
		if tc.ok && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if !tc.ok {
			if !errors.Is(err, tlsconf.ErrIdentityNotAllowed) {
				t.Errorf("%s: err = %v, want ErrIdentityNotAllowed", tc.name, err)
			} else if len(tc.names) > 0 && !strings.Contains(err.Error(), tc.names[0]) {
				t.Errorf("%s: error does not name the certificate's identities: %v", tc.name, err)
			}
		}
	}

	// No list: any certificate the CA verified is allowed.
	open, _ := newManager(t, f)
	if err := open.ServerConfig().VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{ca.Client(t).Cert}}); err != nil {
		t.Errorf("empty allow-list refused: %v", err)
	}
}

func TestServerConfigIsStrict(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.NewFiles(t.TempDir())
	f.Write(t, ca.Server(t), ca)
	m, _ := newManager(t, f)
	for name, cfg := range map[string]*tls.Config{"base": m.ServerConfig(), "per-handshake": mustConfigForClient(t, m)} {
		if cfg.MinVersion != tls.VersionTLS13 {
			t.Errorf("%s: MinVersion = %#x", name, cfg.MinVersion)
		}
		if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Errorf("%s: ClientAuth = %v", name, cfg.ClientAuth)
		}
		if cfg.VerifyConnection == nil || !cfg.SessionTicketsDisabled {
			t.Errorf("%s: VerifyConnection set %v, session tickets disabled %v", name, cfg.VerifyConnection != nil, cfg.SessionTicketsDisabled)
		}
	}
	if mustConfigForClient(t, m).ClientCAs == nil {
		t.Error("per-handshake config has no client CA pool")
	}
}

func mustConfigForClient(t *testing.T, m *tlsconf.Manager) *tls.Config {
	t.Helper()
	cfg, err := m.ServerConfig().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil || cfg == nil {
		t.Fatalf("GetConfigForClient: %v, %v", cfg, err)
	}
	return cfg
}

func served(t *testing.T, m *tlsconf.Manager) *x509.Certificate {
	t.Helper()
	return mustConfigForClient(t, m).Certificates[0].Leaf
}

func TestReloadOnChange(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.NewFiles(t.TempDir())
	first := ca.Server(t)
	f.Write(t, first, ca)
	m, lb := newManager(t, f)
	if changed, err := m.Reload(); changed || err != nil {
		t.Fatalf("reload of unchanged files: changed %v, err %v", changed, err)
	}
	second := ca.Server(t)
	ca2 := tlstest.NewCA(t, "ca 2")
	f.Write(t, second, ca, ca2)
	if changed, err := m.Reload(); !changed || err != nil {
		t.Fatalf("reload after rotation: changed %v, err %v", changed, err)
	}
	if got := served(t, m); !got.Equal(second.Cert) {
		t.Errorf("serving serial %x, want the rotated %x", got.SerialNumber, second.Cert.SerialNumber)
	}
	if got := m.Certificate().Leaf; !got.Equal(second.Cert) {
		t.Errorf("GetCertificate path serves %x", got.SerialNumber)
	}
	// The new pool trusts both CAs.
	pool := mustConfigForClient(t, m).ClientCAs
	for _, c := range []*tlstest.CA{ca, ca2} {
		leaf := c.Client(t)
		if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("client of %s not trusted after reload: %v", c.Cert.Subject, err)
		}
	}
	if !strings.Contains(lb.String(), "tls material reloaded") {
		t.Errorf("no reload log:\n%s", lb)
	}
}

func TestFailedReloadKeepsOld(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	f := tlstest.NewFiles(t.TempDir())
	good := ca.Server(t)
	f.Write(t, good, ca)
	m, _ := newManager(t, f)

	expired := ca.Issue(t, tlstest.Spec{CommonName: "old", Server: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	mismatched := ca.Server(t)
	steps := []struct {
		name  string
		write func()
		want  string
	}{
		{"key does not match certificate", func() {
			tlstest.WriteFile(t, f.Cert, mismatched.CertPEM)
		}, "private key does not match public key"},
		{"half-written certificate", func() {
			tlstest.WriteFile(t, f.Cert, good.CertPEM[:len(good.CertPEM)/2])
		}, "tls_cert_file"},
		{"missing key file", func() {
			tlstest.WriteFile(t, f.Cert, good.CertPEM)
			os.Remove(f.Key)
		}, "tls_key_file"},
		{"expired certificate", func() {
			tlstest.WriteFile(t, f.Cert, expired.CertPEM)
			tlstest.WriteFile(t, f.Key, expired.KeyPEM)
		}, "expired at"},
		{"CA file without certificates", func() {
			tlstest.WriteFile(t, f.Cert, good.CertPEM)
			tlstest.WriteFile(t, f.Key, good.KeyPEM)
			tlstest.WriteFile(t, f.ClientCA, []byte("# rotated soon\n"))
		}, "tls_client_ca_file"},
		{"CA file with garbage after a certificate", func() {
			tlstest.WriteFile(t, f.ClientCA, append(append([]byte{}, other.CertPEM...), "garbage"...))
		}, "is not PEM"},
	}
	for _, st := range steps {
		st.write()
		changed, err := m.Reload()
		if err == nil || changed || !strings.Contains(err.Error(), st.want) {
			t.Errorf("%s: changed %v, err %v; want an error mentioning %q", st.name, changed, err, st.want)
		}
		if got := served(t, m); !got.Equal(good.Cert) {
			t.Fatalf("%s: the previous certificate is no longer served", st.name)
		}
		pool := mustConfigForClient(t, m).ClientCAs
		if _, err := ca.Client(t).Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("%s: the previous client CA is no longer trusted: %v", st.name, err)
		}
	}
}

func TestNewRefusesBadMaterial(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	f := tlstest.NewFiles(dir)
	f.Write(t, ca.Server(t), ca)
	cases := []struct {
		name string
		opts tlsconf.Options
		want string
	}{
		{"missing cert", tlsconf.Options{CertFile: dir + "/nope.crt", KeyFile: f.Key, ClientCAFile: f.ClientCA}, "tls_cert_file: stat " + dir + "/nope.crt"},
		{"unset CA", tlsconf.Options{CertFile: f.Cert, KeyFile: f.Key}, "tls_client_ca_file is not set"},
		{"directory as CA", tlsconf.Options{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: dir}, "is not a regular file"},
		{"bad identity", tlsconf.Options{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: f.ClientCA, AllowedIdentities: []string{"*.weir.test"}}, "wildcards"},
		{"key as cert", tlsconf.Options{CertFile: f.Key, KeyFile: f.Key, ClientCAFile: f.ClientCA}, "tls_cert_file"},
	}
	for _, tc := range cases {
		if _, err := tlsconf.New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

func TestLooseKeyModeWarns(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.NewFiles(t.TempDir())
	f.Write(t, ca.Server(t), ca)
	if err := os.Chmod(f.Key, 0o644); err != nil {
		t.Fatal(err)
	}
	_, lb := newManager(t, f)
	if !strings.Contains(lb.String(), "tls_key_file is readable by group or others") {
		t.Errorf("no warning for a 0644 key:\n%s", lb)
	}
}

// TestRunReloadsOnIntervalAndSignal: a rotation is picked up within an
// interval, a SIGHUP-style nudge reloads at once, and Run's goroutine ends
// with its context.
func TestRunReloadsOnIntervalAndSignal(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.NewFiles(t.TempDir())
	f.Write(t, ca.Server(t), ca)
	m, lb := newManager(t, f)

	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, 20*time.Millisecond, hup)
	}()
	defer func() { cancel(); <-done }()

	waitServed := func(want *x509.Certificate) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !served(t, m).Equal(want) {
			if time.Now().After(deadline) {
				t.Fatalf("certificate %x not served within 5s\n%s", want.SerialNumber, lb)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	next := ca.Server(t)
	f.Write(t, next, ca)
	waitServed(next.Cert)

	// A broken rotation is logged once and leaves the certificate in place.
	tlstest.WriteFile(t, f.Key, []byte("not a key"))
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(lb.String(), "tls reload failed"); n != 1 {
		t.Errorf("failed reload logged %d times over several intervals, want once:\n%s", n, lb)
	}
	if !served(t, m).Equal(next.Cert) {
		t.Fatal("a failed reload replaced the certificate")
	}
	f.Write(t, next, ca) // repaired

	// A slow interval: only the nudge can explain a quick pickup.
	cancel()
	<-done
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		m.Run(ctx2, time.Hour, hup)
	}()
	defer func() { cancel2(); <-done2 }()
	third := ca.Server(t)
	f.Write(t, third, ca)
	hup <- os.Interrupt
	waitServed(third.Cert)
}

// TestNoClientCerts: a listener that authenticates otherwise (bearer
// tokens) serves TLS without asking for a client certificate, and refuses
// client-certificate settings it would not use.
func TestNoClientCerts(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.NewFiles(t.TempDir())
	f.Write(t, ca.Server(t), ca)
	m, err := tlsconf.New(tlsconf.Options{CertFile: f.Cert, KeyFile: f.Key, NoClientCerts: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*tls.Config{"base": m.ServerConfig(), "per-handshake": mustConfigForClient(t, m)} {
		if cfg.ClientAuth != tls.NoClientCert || cfg.VerifyConnection != nil || cfg.MinVersion != tls.VersionTLS13 {
			t.Errorf("%s: ClientAuth %v, VerifyConnection set %v, MinVersion %#x", name, cfg.ClientAuth, cfg.VerifyConnection != nil, cfg.MinVersion)
		}
	}
	// A client with no certificate completes the handshake.
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	errc := make(chan error, 1)
	go func() { errc <- tls.Server(sc, m.ServerConfig()).Handshake() }()
	if err := tls.Client(cc, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}).Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	for _, o := range []tlsconf.Options{
		{CertFile: f.Cert, KeyFile: f.Key, NoClientCerts: true, ClientCAFile: f.ClientCA},
		{CertFile: f.Cert, KeyFile: f.Key, NoClientCerts: true, AllowedIdentities: []string{"dns:a"}},
		{CertFile: f.Cert, KeyFile: f.Key},
	} {
		if _, err := tlsconf.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
