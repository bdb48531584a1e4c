package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/tap"
)

// TestTap: weir tap prints a point's records as NDJSON on stdout, tells
// stderr how many it was not shown, ends at --limit with exit 0, sends
// its bearer token, and refuses what the daemon refuses with exit 2.
func TestTap(t *testing.T) {
	h := tap.NewHub(nil)
	p := h.Point("gate")
	h.Point("source:socket")
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		tap.Handler(h, nil).ServeHTTP(w, r)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)

	go func() {
		for !p.Active() {
			time.Sleep(time.Millisecond)
		}
		// More than the reader's buffer of 5 at once: the rest dropped.
		p.Offer(8, func(i int) tap.Record {
			return tap.Record{Source: "socket", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		})
		time.Sleep(1500 * time.Millisecond) // the drop count's report
		p.Offer(1, func(int) tap.Record { return tap.Record{Source: "socket", Payload: []byte(`{"n":99}`)} })
	}()
	var out, errb bytes.Buffer
	code := runTap(context.Background(), []string{"--at", "gate", "--limit", "6", "--buffer", "5", "--metrics-addr", addr, "--token-file", token}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := `{"source":"socket","bytes":7,"payload":"{\"n\":0}"}`
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 6 || lines[0] != want || !strings.Contains(lines[5], `"n\":99`) {
		t.Errorf("stdout:\n%s", out.String())
	}
	for _, w := range []string{"weir tap: 3 records at gate not shown so far", "weir tap: 6 records shown, 3 dropped at gate"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb.String())
		}
	}
	if auth != "Bearer s3cret" {
		t.Errorf("Authorization %q", auth)
	}

	for _, args := range [][]string{
		{"--at", "nope"},
		{"--at", "gate", "--filter", "source"},
		{"--at", "gate", "extra"},
		{"--at", "gate", "--buffer", "1000000"},
	} {
		var out, errb bytes.Buffer
		if code := runTap(context.Background(), append(args, "--metrics-addr", addr), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errb.String())
		}
	}
	var errb2 bytes.Buffer
	if code := runTap(context.Background(), []string{"--at", "gate", "--metrics-addr", closedAddr(t)}, &out, &errb2); code != 1 || !strings.Contains(errb2.String(), "cannot reach") {
		t.Errorf("no daemon: exit %d: %s", code, errb2.String())
	}

	// Interrupted (SIGINT): exit 0 with the summary.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	errb.Reset()
	if code := runTap(ctx, []string{"--at", "source:socket", "--metrics-addr", addr}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "0 records shown") {
		t.Errorf("interrupted: exit %d: %s", code, errb.String())
	}
}

// TestTapAddr: the endpoint comes from the flag, else the configuration
// file (a wildcard bind dialled on loopback), else the environment.
func TestTapAddr(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "weir.toml")
	os.WriteFile(cfg, []byte("metrics_bind = \"0.0.0.0\"\nmetrics_port = 9999\nmetrics_allow_unauthenticated = true\n"), 0o600)
	off := filepath.Join(t.TempDir(), "off.toml")
	os.WriteFile(off, []byte("metrics_port = 0\n"), 0o600)
	t.Setenv("WEIR_METRICS_BIND", "10.1.2.3")
	t.Setenv("WEIR_METRICS_PORT", "1234")
	for _, c := range []struct {
		o    tapFlags
		want string
	}{
		{tapFlags{addr: "h:1", config: cfg}, "h:1"},
		{tapFlags{config: cfg}, "127.0.0.1:9999"},
		{tapFlags{}, "10.1.2.3:1234"},
		{tapFlags{config: off}, "error"},
	} {
		got, err := tapAddr(c.o)
		if err != nil {
			got = "error"
		}
		if got != c.want {
			t.Errorf("%+v: %s (%v), want %s", c.o, got, err, c.want)
		}
	}
}

// closedAddr is a loopback address nobody listens on.
func closedAddr(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	return addr
}
