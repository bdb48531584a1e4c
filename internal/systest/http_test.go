package systest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weir-io/weir/internal/testenv"
)

// curlBin is the real curl binary, or the test skips (fails under
// WEIR_REQUIRE_SERVICES=1; CI installs it).
func curlBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv(testenv.RequireEnv) == "1" {
			t.Fatalf("curl is not installed and %s=1: the HTTP door's system tests need it", testenv.RequireEnv)
		}
		t.Skip("SKIPPED: curl is not installed; the HTTP door's system tests need the real binary")
	}
	return p
}

// curlAnswer is what curl printed: the body, then the status code on a
// line of its own (-w).
type curlAnswer struct {
	status int
	body   string
}

// curl runs curl with args and the URL of d's HTTP door.
func curl(t *testing.T, bin string, d *daemon, args ...string) curlAnswer {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/records", d.httpPort)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-sS", "-w", "\n%{http_code}", url}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %v: %v (%s)", args, err, out)
	}
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	var a curlAnswer
	fmt.Sscan(s[i+1:], &a.status)
	a.body = s[:i]
	return a
}

// ids reads the ids of a 200's body.
func (a curlAnswer) ids(t *testing.T) []string {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var ans struct {
		Records int      `json:"records"`
		IDs     []string `json:"ids"`
	}
	if err := json.Unmarshal([]byte(a.body), &ans); err != nil {
		t.Fatalf("%v: %s", err, a.body)
	}
	if len(ans.IDs) != ans.Records {
		t.Fatalf("%d ids for %d records: %s", len(ans.IDs), ans.Records, a.body)
	}
	return ans.IDs
}

// waitHTTP waits until d's HTTP door accepts connections (it binds right
// after the socket the harness waits for).
func waitHTTP(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", d.httpPort))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the HTTP door does not accept: %v\n%s", err, d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHTTPCurl drives the real curl against the real daemon delivering
// into Postgres: NDJSON, a JSON array, a raw body and a gzip body are
// answered with the ids the table then holds, and a request sent twice
// with the same Idempotency-Key gets the same ids and one row per record.
func TestHTTPCurl(t *testing.T) {
	bin := curlBin(t)
	d, conn, table := pgDaemon(t)
	waitHTTP(t, d)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return "@" + p
	}
	ndjson := `{"payload":{"order":1},"key":"o-1"}` + "\n" + `{"payload":{"order":2},"headers":{"kind":"order"}}` + "\n" + `{"payload_base64":"AAEC"}` + "\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"payload":{"gz":1}}` + "\n" + `{"payload":{"gz":2}}` + "\n"))
	zw.Close()

	var all []string
	cases := []struct {
		name    string
		args    []string
		records int
	}{
		{"ndjson", []string{"-H", "Content-Type: application/x-ndjson", "--data-binary", write("a.ndjson", []byte(ndjson))}, 3},
		{"json array", []string{"-H", "Content-Type: application/json", "-H", "Weir-Durability: buffered", "--data-binary", `[{"payload":{"arr":1}},{"payload":"two","event_time":"2026-01-02T03:04:05Z"}]`}, 2},
		{"raw body", []string{"-H", "Content-Type: text/plain", "--data-binary", "hello from curl"}, 1},
		{"gzip", []string{"-H", "Content-Type: application/x-ndjson", "-H", "Content-Encoding: gzip", "--data-binary", write("b.ndjson.gz", gz.Bytes())}, 2},
	}
	for _, c := range cases {
		ids := curl(t, bin, d, c.args...).ids(t)
		if len(ids) != c.records {
			t.Fatalf("%s: %d ids, want %d", c.name, len(ids), c.records)
		}
		all = append(all, ids...)
	}
	idem := []string{"-H", "Content-Type: application/x-ndjson", "-H", "Idempotency-Key: batch-0001",
		"--data-binary", `{"payload":{"idem":1}}` + "\n" + `{"payload":{"idem":2}}`}
	first := curl(t, bin, d, idem...).ids(t)
	retry := curl(t, bin, d, idem...).ids(t)
	if !slices.Equal(first, retry) {
		t.Fatalf("a retry with the same Idempotency-Key got ids %v, the first %v", retry, first)
	}
	all = append(all, first...)

	bad := curl(t, bin, d, "-H", "Content-Type: application/x-ndjson", "--data-binary", `{"payload":1}`+"\n"+`{"payload":`)
	if bad.status != 400 || !strings.Contains(bad.body, `"line":2`) || !strings.Contains(bad.body, `"reason":"decode"`) {
		t.Fatalf("a bad second line: %d %s", bad.status, bad.body)
	}

	// Every answered id reaches the table, once.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, err := conn.Query(context.Background(), fmt.Sprintf("SELECT replace(weir_record_id::text, '-', ''), source FROM %s", table))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var id, src string
			if err := rows.Scan(&id, &src); err != nil {
				t.Fatal(err)
			}
			if src != "http" {
				t.Errorf("row %s has source %q, want the HTTP stream", id, src)
			}
			got = append(got, id)
		}
		rows.Close()
		slices.Sort(got)
		want := slices.Clone(all)
		slices.Sort(want)
		if slices.Equal(got, want) {
			t.Logf("%d records through curl, %d rows, the retried request's 2 once each", len(all), len(got))
			return
		}
		if len(got) > len(want) {
			t.Fatalf("%d rows for %d answered ids: %v vs %v", len(got), len(want), got, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows %v, want the answered ids %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHTTPTokensAndSIGHUP: with a token file, no token and a wrong one get
// 401; a new file read on SIGHUP lets its token in and the old one no
// longer.
func TestHTTPTokensAndSIGHUP(t *testing.T) {
	bin := curlBin(t)
	line := func(tok string) []byte {
		s := sha256.Sum256([]byte(tok))
		return []byte(hex.EncodeToString(s[:]) + " producer\n")
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, line("first-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "--http-token-file", path)
	d.start()
	waitHTTP(t, d)
	auth := func(tok string) []string {
		return []string{"-H", "Authorization: Bearer " + tok, "--data-binary", "x"}
	}
	if a := curl(t, bin, d, "--data-binary", "x"); a.status != 401 {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
	if a := curl(t, bin, d, auth("guess")...); a.status != 401 {
		t.Fatalf("wrong token: %d %s", a.status, a.body)
	}
	curl(t, bin, d, auth("first-token")...).ids(t)
	if err := os.WriteFile(path, line("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for curl(t, bin, d, auth("second-token")...).status != 200 {
		if time.Now().After(deadline) || d.exited() {
			t.Fatalf("the token file was not re-read on SIGHUP\n%s", d.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a := curl(t, bin, d, auth("first-token")...); a.status != 401 {
		t.Fatalf("a token removed from the file still works after SIGHUP: %d", a.status)
	}
	if err := d.stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestSIGHUPWithNothingToReload: a SIGHUP to a daemon that has no token
// file and no TLS (what a log rotation script may send) leaves it serving.
func TestSIGHUPWithNothingToReload(t *testing.T) {
	bin := curlBin(t)
	d := newDaemon(t, "--http-enabled=false")
	d.start()
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.log.String(), "SIGHUP") {
		if time.Now().After(deadline) || d.exited() {
			t.Fatalf("no SIGHUP log line, or the daemon ended\n%s", d.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := exec.Command(bin, "-sf", fmt.Sprintf("http://127.0.0.1:%d/ready", d.metricsPort)).CombinedOutput()
	if err != nil || d.exited() {
		t.Fatalf("after SIGHUP: /ready %v %s\n%s", err, out, d.log.String())
	}
	if err := d.stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPRefusesOpenListener: a non-loopback HTTP listener without
// authentication stops the start, naming the way out.
func TestHTTPRefusesOpenListener(t *testing.T) {
	_, stderr, code := weirCmd(t, nil, "serve", "--data-dir", t.TempDir(), "--metrics-port", fmt.Sprint(freePort(t)),
		"--http-listen", fmt.Sprintf("0.0.0.0:%d", freePort(t)))
	if code == 0 || !strings.Contains(stderr, "http.listen") || !strings.Contains(stderr, "allow_unauthenticated") {
		t.Fatalf("weir serve with an open HTTP listener: exit %d\n%s", code, stderr)
	}
}
