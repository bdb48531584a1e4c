package metrics

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/httpin"
	"github.com/weir-io/weir/internal/tlsconf"
	"github.com/weir-io/weir/internal/tlsconf/tlstest"
)

var adminPage = map[string]http.Handler{
	"GET /status": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "the page") }),
}

func listen(t *testing.T, o ServerOptions) (*Server, error) {
	t.Helper()
	o.Registry, o.Health = prometheus.NewRegistry(), NewHealth(time.Minute, nil)
	o.Health.Ready()
	srv, err := Listen(context.Background(), o)
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		})
	}
	return srv, err
}

// loopbackURL is the server's URL through 127.0.0.1 (it may listen on
// every address).
func loopbackURL(srv *Server, scheme string) string {
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	return scheme + "://127.0.0.1:" + port
}

func status(t *testing.T, c *http.Client, url string, hdr ...string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestAdminRefusedWithoutAuth: a bind beyond loopback with admin routes
// and no authentication does not start, unless allowed; without admin
// routes (metrics and probes only) it starts as before.
func TestAdminRefusedWithoutAuth(t *testing.T) {
	tests := []struct {
		name string
		o    ServerOptions
		ok   bool
	}{
		{"loopback, admin routes, no auth", ServerOptions{Addr: "127.0.0.1:0", Admin: adminPage}, true},
		{"all addresses, admin routes, no auth", ServerOptions{Addr: ":0", Admin: adminPage}, false},
		{"all addresses, pprof, no auth", ServerOptions{Addr: "0.0.0.0:0", Pprof: true}, false},
		{"all addresses, allowed without auth", ServerOptions{Addr: ":0", Admin: adminPage, AllowUnauthenticatedAdmin: true}, true},
		{"all addresses, auth", ServerOptions{Addr: ":0", Admin: adminPage, AdminAuth: func(*http.Request) error { return nil }}, true},
		{"all addresses, no admin route", ServerOptions{Addr: ":0"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := listen(t, tt.o)
			if tt.ok != (err == nil) {
				t.Fatalf("Listen: %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrAdminUnauthenticated) {
				t.Errorf("refused with %v, want ErrAdminUnauthenticated", err)
			}
		})
	}
}

// tokenFile holds tok with the admin scope and "pusher" with push alone.
func tokenFile(t *testing.T, tok string) *httpin.Tokens {
	t.Helper()
	line := func(tok, rest string) string {
		sum := sha256.Sum256([]byte(tok))
		return hex.EncodeToString(sum[:]) + " " + rest + "\n"
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(line(tok, "operator scopes=push,admin")+line("pusher", "producer")), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := httpin.LoadTokens(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// adminAuth is the daemon's: the HTTP door's credentials, a token
// without the admin scope forbidden.
func adminAuth(toks *httpin.Tokens) func(*http.Request) error {
	auth := httpin.AdminAuth(toks)
	return func(r *http.Request) error {
		err := auth(r)
		if errors.Is(err, httpin.ErrScope) {
			return fmt.Errorf("%w: %w", ErrForbidden, err)
		}
		return err
	}
}

// TestAdminAuth: beyond loopback the admin routes answer 401 without the
// HTTP door's credentials and serve with them; /metrics, /live and /ready
// never ask. On loopback the admin routes are open.
func TestAdminAuth(t *testing.T) {
	toks := tokenFile(t, "s3cret")
	open, err := listen(t, ServerOptions{Addr: "127.0.0.1:0", Admin: adminPage, AdminAuth: adminAuth(toks)})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := status(t, http.DefaultClient, loopbackURL(open, "http")+"/status"); code != 200 {
		t.Errorf("loopback bind: /status answered %d without a token, want 200", code)
	}

	srv, err := listen(t, ServerOptions{Addr: ":0", Admin: adminPage, Pprof: true, AdminAuth: adminAuth(toks)})
	if err != nil {
		t.Fatal(err)
	}
	base := loopbackURL(srv, "http")
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/status", "", 401},
		{"/status", "Bearer guess", 401},
		{"/status", "Bearer s3cret", 200},
		{"/status", "Basic " + basic("anyone", "s3cret"), 200},
		{"/status", "Basic " + basic("anyone", "guess"), 401},
		{"/status", "Bearer pusher", 403},
		{"/status", "Basic " + basic("anyone", "pusher"), 403},
		{"/debug/pprof/", "", 401},
		{"/debug/pprof/", "Bearer s3cret", 200},
		{"/metrics", "", 200},
		{"/live", "", 200},
		{"/ready", "", 200},
	}
	for _, tt := range tests {
		var hdr []string
		if tt.auth != "" {
			hdr = []string{"Authorization", tt.auth}
		}
		code, h := status(t, http.DefaultClient, base+tt.path, hdr...)
		if code != tt.want {
			t.Errorf("GET %s with %q: %d, want %d", tt.path, tt.auth, code, tt.want)
		}
		if code == 401 && !strings.Contains(strings.Join(h.Values("WWW-Authenticate"), " "), "Basic") {
			t.Errorf("GET %s: a 401 without a Basic challenge (%v): a browser would not ask for the token", tt.path, h)
		}
	}
}

func basic(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "http://x", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestAdminClientCertificates: over HTTPS with the HTTP door's material,
// a verified client certificate opens the admin routes; a client without
// one still scrapes /metrics and needs a token for the rest.
func TestAdminClientCertificates(t *testing.T) {
	serverCA, clientCA := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "client CA")
	files := tlstest.NewFiles(t.TempDir())
	files.Write(t, serverCA.Server(t), clientCA)
	m, err := tlsconf.New(tlsconf.Options{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.ClientCA,
		AllowedIdentities: []string{"ops.example"}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := listen(t, ServerOptions{Addr: ":0", Admin: adminPage, TLS: m.OptionalClientConfig(), AdminAuth: adminAuth(tokenFile(t, "s3cret"))})
	if err != nil {
		t.Fatal(err)
	}
	base := loopbackURL(srv, "https")
	client := func(leaf *tlstest.Leaf) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tlstest.ClientConfig(serverCA, leaf)}}
	}
	none := client(nil)
	if code, _ := status(t, none, base+"/metrics"); code != 200 {
		t.Errorf("/metrics without a certificate: %d, want 200", code)
	}
	if code, _ := status(t, none, base+"/status"); code != 401 {
		t.Errorf("/status without a certificate or token: %d, want 401", code)
	}
	if code, _ := status(t, none, base+"/status", "Authorization", "Bearer s3cret"); code != 200 {
		t.Errorf("/status with a token: %d, want 200", code)
	}
	if code, _ := status(t, client(clientCA.Client(t, "ops.example")), base+"/status"); code != 200 {
		t.Errorf("/status with an allowed certificate: %d, want 200", code)
	}
	// A certificate that is sent is judged: a foreign CA or an identity
	// off the list fails the handshake.
	for name, leaf := range map[string]*tlstest.Leaf{
		"foreign CA":          tlstest.NewCA(t, "other").Client(t, "ops.example"),
		"identity not listed": clientCA.Client(t, "intruder.example"),
	} {
		resp, err := client(leaf).Get(base + "/metrics")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: the handshake succeeded (%d)", name, resp.StatusCode)
		}
	}
}

// TestAdminStreamEndsAtShutdown: an Admin handler is served beside
// /metrics, and one that streams until its request's context ends (weir
// tap's) does not hold Shutdown: the context ends at once.
func TestAdminStreamEndsAtShutdown(t *testing.T) {
	ended := make(chan struct{})
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		fmt.Fprintln(w, "started")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv, err := Listen(context.Background(), ServerOptions{Addr: "127.0.0.1:0", Registry: prometheus.NewRegistry(),
		Health: NewHealth(time.Minute, nil), Admin: map[string]http.Handler{"GET /v1/stream": stream}})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr().String()
	resp, err := http.Get(base + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("stream: %q %v", line, err)
	}
	if r, err := http.Get(base + "/metrics"); err != nil || r.StatusCode != 200 {
		t.Fatalf("/metrics beside an admin route: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-ended
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("shutdown with a stream open took %v", took)
	}
}
