package httpin

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
)

// HTTPS offers HTTP/2 by ALPN and requires a client certificate — or,
// without a client CA, a bearer token; h2c is served on a plain listener
// when asked for.
func TestProtocols(t *testing.T) {
	serverCA, clientCA := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "client CA")
	files := tlstest.NewFiles(t.TempDir())
	files.Write(t, serverCA.Server(t), clientCA)
	m, err := tlsconf.New(tlsconf.Options{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.ClientCA})
	if err != nil {
		t.Fatal(err)
	}
	_, tlsURL := start(t, &fakeBackend{}, Options{TLS: m.ServerConfig()})
	tlsURL = strings.Replace(tlsURL, "http://", "https://", 1)

	h2 := func(cfg *tls.Config) *http.Client {
		var p http.Protocols
		p.SetHTTP2(true)
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &p, ForceAttemptHTTP2: true}}
	}
	withCert := h2(tlstest.ClientConfig(serverCA, clientCA.Client(t, "producer.weir.test")))
	resp, err := withCert.Post(tlsURL, "text/plain", strings.NewReader("over h2"))
	if err != nil {
		t.Fatal(err)
	}
	decodeAnswer(t, resp)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("HTTPS answered over %s, want HTTP/2 by ALPN", resp.Proto)
	}
	withCert.CloseIdleConnections()
	noCert := h2(tlstest.ClientConfig(serverCA, nil))
	if resp, err := noCert.Post(tlsURL, "text/plain", strings.NewReader("x")); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate was answered %d", resp.StatusCode)
	}

	// HTTPS without client certificates, bearer tokens the authentication.
	sum := sha256.Sum256([]byte("secret"))
	tokPath := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokPath, []byte(hex.EncodeToString(sum[:])+" producer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := LoadTokens(tokPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := tlsconf.New(tlsconf.Options{CertFile: files.Cert, KeyFile: files.Key, NoClientCerts: true})
	if err != nil {
		t.Fatal(err)
	}
	_, tokURL := start(t, &fakeBackend{}, Options{TLS: sm.ServerConfig(), Tokens: toks})
	tokURL = strings.Replace(tokURL, "http://", "https://", 1)
	for _, tc := range []struct {
		auth string
		want int
	}{{"Bearer secret", http.StatusOK}, {"", http.StatusUnauthorized}, {"Bearer guess", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodPost, tokURL, strings.NewReader("x"))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := noCert.Do(req)
		if err != nil {
			t.Fatalf("HTTPS without a client certificate, %q: %v", tc.auth, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want || resp.ProtoMajor != 2 {
			t.Errorf("HTTPS with tokens, %q: %d over %s, want %d over HTTP/2", tc.auth, resp.StatusCode, resp.Proto, tc.want)
		}
	}
	noCert.CloseIdleConnections()

	_, plainURL := start(t, &fakeBackend{}, Options{H2C: true})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: &p}}
	defer c.CloseIdleConnections()
	resp, err = c.Post(plainURL, "text/plain", strings.NewReader("over h2c"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	decodeAnswer(t, resp)
	if resp.ProtoMajor != 2 {
		t.Errorf("h2c answered over %s", resp.Proto)
	}
}
