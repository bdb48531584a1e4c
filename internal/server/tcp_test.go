package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/server"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

// tlsEnv is a server with a real write-ahead buffer listening on loopback
// TCP with mutual TLS.
type tlsEnv struct {
	addr     string
	files    tlstest.Files
	serverCA *tlstest.CA // signs the server certificate
	clientCA *tlstest.CA // trusted for client certificates
	mgr      *tlsconf.Manager
	log      *lockedBuf
	obs      *handshakeCounter
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// handshakeCounter is an Observer that also counts refused handshakes.
type handshakeCounter struct {
	mu      sync.Mutex
	reasons map[string]int
}

func (h *handshakeCounter) ConnOpened()                             {}
func (h *handshakeCounter) ConnClosed()                             {}
func (h *handshakeCounter) ConnRejected(string)                     {}
func (h *handshakeCounter) Received(wire.Durability, int, int, int) {}
func (h *handshakeCounter) Acked(wire.Durability, int, int, int)    {}
func (h *handshakeCounter) Nacked(wire.Durability, wire.Code, int)  {}
func (h *handshakeCounter) HandshakeFailed(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reasons[reason]++
}

func (h *handshakeCounter) count(reason string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reasons[reason]
}

type tlsEnvConfig struct {
	allowed          []string
	reloadInterval   time.Duration // 0: no reloader
	frameReadTimeout time.Duration
	maxConnections   int
}

func newTLSEnv(t *testing.T, cfg tlsEnvConfig) *tlsEnv {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last
	dir := t.TempDir()
	e := &tlsEnv{
		files:    tlstest.NewFiles(dir),
		serverCA: tlstest.NewCA(t, "weir test server CA"),
		clientCA: tlstest.NewCA(t, "weir test client CA"),
		log:      &lockedBuf{},
		obs:      &handshakeCounter{reasons: map[string]int{}},
	}
	e.files.Write(t, e.serverCA.Server(t), e.clientCA)
	logger := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mgr, err := tlsconf.New(tlsconf.Options{
		CertFile: e.files.Cert, KeyFile: e.files.Key, ClientCAFile: e.files.ClientCA,
		AllowedIdentities: cfg.allowed, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.mgr = mgr

	ctx := context.Background()
	wlog, err := wab.Open(ctx, wab.Options{Dir: dir + "/wab", Shards: 2, SegmentMaxBytes: 1 << 20, PreallocateBytes: -1, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	fr := cfg.frameReadTimeout
	if fr == 0 {
		fr = 5 * time.Second
	}
	srv := server.New(server.Options{
		MaxConnections:   cfg.maxConnections,
		FrameReadTimeout: fr,
		IdleTimeout:      time.Minute,
		WriteTimeout:     5 * time.Second,
		QueueTimeout:     time.Second,
		Logger:           logger,
		Observer:         e.obs,
	}, wlog)
	addr, err := srv.ListenTLS("127.0.0.1:0", mgr.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	e.addr = addr.String()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	if cfg.reloadInterval > 0 {
		go func() {
			defer close(done)
			mgr.Run(runCtx, cfg.reloadInterval, nil)
		}()
	} else {
		close(done)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := wlog.Close(sctx); err != nil {
			t.Errorf("close wab: %v", err)
		}
		stop()
		<-done
		if t.Failed() {
			t.Logf("server log:\n%s", e.log)
		}
	})
	return e
}

// push sends one Durable record through the client library and waits for
// its ack.
func (e *tlsEnv) push(t *testing.T, cfg *tls.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "tcp://"+e.addr, client.WithTLS(cfg))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	return c.Push(pctx, []byte(`{"hello":"tls"}`), client.Durable)
}

// refused dials with cfg, sends a push frame and expects the server to
// refuse the connection before answering it. It returns the error the
// client saw: with TLS 1.3 the server's verdict on the client certificate
// arrives after the client's side of the handshake is done, on the first
// read.
func (e *tlsEnv) refused(t *testing.T, cfg *tls.Config) error {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	tc, err := tls.DialWithDialer(d, "tcp", e.addr, cfg)
	if err != nil {
		return err
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	frame := wire.AppendPush(nil, wire.Push{RequestID: 1, Durability: wire.Durable, Payloads: [][]byte{[]byte("x")}})
	if _, err := tc.Write(frame); err != nil {
		return err
	}
	var b [64]byte
	n, err := tc.Read(b[:])
	if err == nil {
		t.Fatalf("server answered %d bytes to a client it should have refused", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("server neither answered nor closed the connection: %v", err)
	}
	return err
}

func (e *tlsEnv) clientCfg(leaf *tlstest.Leaf) *tls.Config {
	return tlstest.ClientConfig(e.serverCA, leaf)
}

func wantErr(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), substr) {
		t.Errorf("error %v, want one mentioning %q", err, substr)
	}
}

func TestTLSGoodClientAcked(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{})
	if err := e.push(t, e.clientCfg(e.clientCA.Client(t, "producer.weir.test"))); err != nil {
		t.Fatalf("push over mTLS: %v", err)
	}
}

func TestTLSRefusesNoClientCertificate(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{})
	wantErr(t, e.refused(t, e.clientCfg(nil)), "certificate required")
	waitCount(t, e, "no_client_certificate")
}

// TestTLSRefusalSurvivesUnreadFrames: a TLS 1.3 client learns it was
// refused only after it has sent its first frames. The server reads
// them away before it closes, so that the alert saying why reaches the
// client instead of a connection reset.
func TestTLSRefusalSurvivesUnreadFrames(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{})
	frame := wire.AppendPush(nil, wire.Push{RequestID: 1, Durability: wire.Durable, Payloads: [][]byte{bytes.Repeat([]byte("x"), 1000)}})
	frames := bytes.Repeat(frame, 16) // 16 KiB the server never answers
	for i := range 20 {
		tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.addr, e.clientCfg(nil))
		if err != nil {
			t.Fatal(err)
		}
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := tc.Write(frames); err != nil {
			tc.Close()
			t.Fatalf("attempt %d: write: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond) // the server has refused and closed by now
		_, err = tc.Read(make([]byte, 64))
		tc.Close()
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Fatalf("attempt %d: read: %v, want the certificate-required alert", i, err)
		}
	}
}

func TestTLSRefusesCertificateFromAnotherCA(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{})
	stranger := tlstest.NewCA(t, "some other CA")
	wantErr(t, e.refused(t, e.clientCfg(stranger.Client(t, "producer.weir.test"))), "unknown certificate authority")
	waitCount(t, e, "untrusted_certificate")
}

func TestTLSRefusesTLS12(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{})
	cfg := e.clientCfg(e.clientCA.Client(t, "producer.weir.test"))
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	wantErr(t, e.refused(t, cfg), "protocol version not supported")
	waitCount(t, e, "handshake_error")
	if !strings.Contains(e.log.String(), "unsupported versions") {
		t.Errorf("server log does not say why:\n%s", e.log)
	}
}

func TestTLSIdentityAllowList(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{allowed: []string{"spiffe://weir.test/producer", "ingest.weir.test", "ops@weir.test"}})
	for _, names := range [][]string{{"spiffe://weir.test/producer"}, {"other.weir.test", "ingest.weir.test"}, {"ops@weir.test"}} {
		if err := e.push(t, e.clientCfg(e.clientCA.Client(t, names...))); err != nil {
			t.Errorf("allowed client %v: %v", names, err)
		}
	}
	wantErr(t, e.refused(t, e.clientCfg(e.clientCA.Client(t, "spiffe://weir.test/intruder"))), "bad certificate")
	waitCount(t, e, "identity_not_allowed")
	if !strings.Contains(e.log.String(), "URI:spiffe://weir.test/intruder") {
		t.Errorf("server log does not name the refused identity:\n%s", e.log)
	}
}

// TestTLSHandshakeTimeout: a client that connects and sends nothing is
// dropped after the frame read timeout, and frees its connection slot.
func TestTLSHandshakeTimeout(t *testing.T) {
	e := newTLSEnv(t, tlsEnvConfig{frameReadTimeout: 200 * time.Millisecond, maxConnections: 1})
	silent, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err = silent.Read(b[:])
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("silent connection not closed by the server: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("closed after %v, want about 200ms", took)
	}
	waitCount(t, e, "timeout")
	// The only slot is free again (once the dropped connection's goroutine
	// has released it, which may trail the close by a moment).
	good := e.clientCfg(e.clientCA.Client(t))
	deadline := time.Now().Add(5 * time.Second)
	for err := e.push(t, good); err != nil; err = e.push(t, good) {
		if time.Now().After(deadline) {
			t.Fatalf("push after a timed-out handshake: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// servedSerial is the serial of the certificate a new connection gets.
func (e *tlsEnv) servedSerial(t *testing.T) string {
	t.Helper()
	tc, err := tls.Dial("tcp", e.addr, e.clientCfg(e.clientCA.Client(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

func TestTLSRotatedServerCertificate(t *testing.T) {
	const interval = 50 * time.Millisecond
	e := newTLSEnv(t, tlsEnvConfig{reloadInterval: interval})
	before := e.servedSerial(t)

	// Keep a connection open across the rotation: it must keep working.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "tcp://"+e.addr, client.WithTLS(e.clientCfg(e.clientCA.Client(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.Push(ctx, []byte("before"), client.Durable); err != nil {
		t.Fatal(err)
	}

	next := e.serverCA.Server(t)
	e.files.Write(t, next, e.clientCA)
	want := next.Cert.SerialNumber.Text(16)
	deadline := time.Now().Add(20 * interval)
	for got := e.servedSerial(t); got != want; got = e.servedSerial(t) {
		if got != before {
			t.Fatalf("served serial %s, neither the old %s nor the new %s", got, before, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated certificate not served after %v", 20*interval)
		}
		time.Sleep(interval / 2)
	}
	if err := c.Push(ctx, []byte("after"), client.Durable); err != nil {
		t.Fatalf("connection opened before the rotation: %v", err)
	}
}

func TestTLSRotatedClientCA(t *testing.T) {
	const interval = 50 * time.Millisecond
	e := newTLSEnv(t, tlsEnvConfig{reloadInterval: interval})
	oldClient := e.clientCfg(e.clientCA.Client(t))
	newCA := tlstest.NewCA(t, "weir test client CA, next")
	newClient := e.clientCfg(newCA.Client(t))
	wantErr(t, e.refused(t, newClient), "unknown certificate authority")

	// Replace the client CA outright (certificate and key stay).
	tlstest.WriteFile(t, e.files.ClientCA, newCA.CertPEM)
	deadline := time.Now().Add(20 * interval)
	for e.push(t, newClient) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("client of the new CA still refused %v after the rotation", 20*interval)
		}
		time.Sleep(interval / 2)
	}
	wantErr(t, e.refused(t, oldClient), "unknown certificate authority")
}

// TestTLSBrokenRotationKeepsServing: a rotation that leaves files that do
// not form valid material changes nothing for clients.
func TestTLSBrokenRotationKeepsServing(t *testing.T) {
	const interval = 20 * time.Millisecond
	e := newTLSEnv(t, tlsEnvConfig{reloadInterval: interval})
	before := e.servedSerial(t)
	tlstest.WriteFile(t, e.files.Cert, e.serverCA.Server(t).CertPEM) // key not rotated with it
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.log.String(), "tls reload failed") {
		if time.Now().After(deadline) {
			t.Fatal("no reload failure logged")
		}
		time.Sleep(interval)
	}
	if got := e.servedSerial(t); got != before {
		t.Errorf("served %s after a failed reload, want the previous %s", got, before)
	}
	if err := e.push(t, e.clientCfg(e.clientCA.Client(t))); err != nil {
		t.Errorf("push after a failed reload: %v", err)
	}
}

func TestListenTLSRefusesWeakConfig(t *testing.T) {
	srv := server.New(server.Options{}, nil)
	for name, cfg := range map[string]*tls.Config{
		"nil":               nil,
		"no client auth":    {MinVersion: tls.VersionTLS13},
		"optional cert":     {MinVersion: tls.VersionTLS13, ClientAuth: tls.VerifyClientCertIfGiven},
		"tls 1.2 allowed":   {MinVersion: tls.VersionTLS12, ClientAuth: tls.RequireAndVerifyClientCert},
		"min version unset": {ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: x509.NewCertPool()},
	} {
		if _, err := srv.ListenTLS("127.0.0.1:0", cfg); err == nil {
			t.Errorf("%s: ListenTLS accepted it", name)
		}
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func waitCount(t *testing.T, e *tlsEnv, reason string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.obs.count(reason) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no handshake failure counted as %q; log:\n%s", reason, e.log)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
