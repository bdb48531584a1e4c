package httpin

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
)

// HTTPS offers HTTP/2 by ALPN and requires a client certificate; h2c is
// served on a plain listener when asked for.
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
