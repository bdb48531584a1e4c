package systest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/weir-io/weir/internal/readout"
	"github.com/weir-io/weir/internal/statuspage/statuspagetest"
	"github.com/weir-io/weir/internal/testenv"
)

// statusStallBound is how long a stalled sink may take to show on the
// status page — its row unhealthy, the flow state degraded or critical —
// without a reload (issue #27).
const statusStallBound = 3 * time.Second

// chromiumBin is Debian's chromium, or the test skips (fails under
// WEIR_REQUIRE_SERVICES=1; CI installs it).
func chromiumBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testenv.Required() {
		t.Fatalf("chromium is not installed and %s=1: the status page's browser test needs it (apt-get install chromium)", testenv.RequireEnv)
	}
	t.Skip("SKIPPED: chromium is not installed; the status page's browser test needs it (apt-get install chromium)")
	return ""
}

// browser is a headless chromium on one page, recording what the page
// logs and every request it makes.
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	console  []string // errors, warnings, exceptions, browser log entries
	requests []string // every URL the page asked for
}

func newBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // as root, in a container
		chromedp.WindowSize(1400, 1250),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	b := &browser{ctx: ctx}
	if err := chromedp.Listen(ctx, b.event); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// event runs on chromedp's reading goroutine: it only records.
func (b *browser) event(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.console = append(b.console, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
		}
	case *runtime.EventExceptionThrown:
		msg := e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
		b.console = append(b.console, "exception: "+msg)
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
			b.console = append(b.console, fmt.Sprintf("log %s (%s): %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL))
		}
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
	}
}

// onPage runs one action on the page.
func onPage[T any](t *testing.T, b *browser, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pageFigures reads every figure of the page that is not in a list, by
// its data-k key, as the page shows it now.
const pageFigures = `Object.fromEntries(Array.from(document.querySelectorAll('[data-k]'))
	.filter(e => !e.closest('[data-list]')).map(e => [e.dataset.k, e.textContent]))`

// pageRows reads the rows of a list: each row's figures by key, and its
// level class as "level".
func pageRows(list string) string {
	return `Array.from(document.querySelectorAll('[data-list="` + list + `"] > *')).map(r => {
		const o = Object.fromEntries(Array.from(r.querySelectorAll('[data-k]')).map(e => [e.dataset.k, e.textContent]));
		o.level = (Array.from(r.classList).find(c => c.startsWith('lvl-')) || '').slice(4);
		return o; })`
}

// perSecond reads a rate as the page writes it ("42.5/s").
func perSecond(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil {
		t.Fatalf("not a rate: %q", s)
	}
	return v
}

func metricsSet(t *testing.T, d *daemon) (readout.Set, time.Time) {
	t.Helper()
	at := time.Now()
	code, body, err := d.httpGet("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	m, err := readout.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return m, at
}

// TestStatusPageBrowser drives headless chromium against the real daemon
// delivering to Postgres through a proxy: the page renders with no
// console error and no request leaving the host, its figures match
// /metrics, its script formats as the server does, and stalling the sink
// (the proxy stops moving bytes) turns the sink's row unhealthy and the
// flow state degraded or critical within statusStallBound, without a
// reload. Screenshots go to the test's artifact directory.
func TestStatusPageBrowser(t *testing.T) {
	bin := chromiumBin(t)
	dsn := testenv.Postgres(t)
	table := testenv.PostgresTable(t, dsn, "weir_status")
	via, proxy := testenv.PostgresUnixProxy(t, dsn)
	d := newDaemon(t, "--sink-type", "postgres", "--sink-postgres-dsn", via, "--sink-postgres-table", table,
		"--sink-postgres-timeout", "1s", "--sink-health-interval", "250ms", "--flow-failures", "1")
	d.start()
	defer func() {
		proxy.Resume()
		if err := d.stop(30 * time.Second); err != nil {
			t.Errorf("stopping weir: %v\n%s", err, tail(d.log.String(), 3000))
		}
	}()

	// Producers at a steady pace, for the whole test.
	pctx, stopProducing := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produceSteady(pctx, t, d.socket, "status", 20, 20*time.Millisecond, newLedger())
	}()
	defer func() { stopProducing(); wg.Wait() }()

	// The first paint holds the figures: readable without JavaScript.
	code, body, err := d.httpGet("/status")
	if err != nil || code != 200 || !strings.Contains(body, `data-k="buffer.shards" data-f="text">`) || !strings.Contains(body, "none failed") {
		t.Fatalf("GET /status: %d %v\n%s", code, err, body)
	}

	b := newBrowser(t, bin)
	origin := fmt.Sprintf("127.0.0.1:%d", d.metricsPort)
	onPage(t, b, chromedp.Navigate("http://"+origin+"/status"))
	// The script has refreshed twice; the sink is open and healthy, and
	// the flow state normal.
	ready := `Number(document.body.dataset.refreshes || 0) >= 2
		&& document.querySelector('[data-k="flow.state"]').textContent === 'normal'
		&& (document.querySelector('[data-list="sinks"] > tr') || {className: ''}).className.includes('lvl-ok')`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](ready, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the page never showed a healthy sink and the normal flow state: %v\n%v\n--- daemon log ---\n%s",
			err, onPage(t, b, chromedp.Evaluate[map[string]string](pageFigures)), tail(d.log.String(), 3000))
	}

	// The figures are /metrics' (rates within 40 %: the page's are over
	// its last 10 s, these over 5 s of the same steady load).
	m1, t1 := metricsSet(t, d)
	time.Sleep(5 * time.Second)
	mPre, _ := metricsSet(t, d)
	fig := onPage(t, b, chromedp.Evaluate[map[string]string](pageFigures))
	sinks := onPage(t, b, chromedp.Evaluate[[]map[string]string](pageRows("sinks")))
	sources := onPage(t, b, chromedp.Evaluate[[]map[string]string](pageRows("sources")))
	m2, t2 := metricsSet(t, d)
	dt := t2.Sub(t1).Seconds()
	one := func(v float64) bool { return v == 1 }
	same := func(what, got, want string) {
		if got != want {
			t.Errorf("%s: the page shows %q, /metrics says %q", what, got, want)
		}
	}
	same("flow state", fig["flow.state"], strings.Join(m2.LabelsWhere("weir_flow_state", "state", one), ","))
	same("memory budget", fig["flow.budget_bytes"], readout.Bytes(m2.Sum("weir_memory_budget_bytes", nil)))
	same("dead-letter cap", fig["quarantine.dead_letter_max_bytes"], readout.Bytes(m2.Sum("weir_dead_letter_max_bytes", nil)))
	same("dead-letter files", fig["quarantine.dead_letter_files"], readout.Num(m2.Sum("weir_dead_letter_files", nil)))
	same("shards", fig["buffer.shards"], fmt.Sprintf("%d, none failed", len(m2.Series("weir_shard_failed"))))
	// The drain's state flips between idle and draining under load: the
	// page's must be what /metrics said just before or just after it.
	if got, before, after := fig["buffer.drain_state"], strings.Join(mPre.LabelsWhere("weir_drain_state", "state", one), ","),
		strings.Join(m2.LabelsWhere("weir_drain_state", "state", one), ","); got != before && got != after {
		t.Errorf("drain: the page shows %q, /metrics said %q before and %q after", got, before, after)
	}
	same("version", fig["node.version"], m2.Series("weir_build_info")[0].Labels["version"])
	if len(sinks) != 1 || sinks[0]["name"] != "postgres" || sinks[0]["health"] != "healthy" {
		t.Errorf("sink rows %v, want one, postgres, healthy", sinks)
	}
	near := func(what string, page, metrics float64) {
		if metrics <= 0 || math.Abs(page-metrics) > 0.4*metrics {
			t.Errorf("%s: the page shows %.1f/s, /metrics %.1f/s over %.1fs", what, page, metrics, dt)
		} else {
			t.Logf("%s: page %.1f/s, /metrics %.1f/s", what, page, metrics)
		}
	}
	socket := map[string]string{"source": "socket"}
	for _, s := range sources {
		if s["name"] == "socket" {
			near("socket records", perSecond(t, s["records_per_second"]),
				(m2.Sum("weir_source_records_written_total", socket)-m1.Sum("weir_source_records_written_total", socket))/dt)
		}
	}
	ok := map[string]string{"result": "ok"}
	if len(sinks) == 1 {
		near("sink records", perSecond(t, sinks[0]["records_per_second"]),
			(m2.Sum("weir_sink_commit_records_total", ok)-m1.Sum("weir_sink_commit_records_total", ok))/dt)
	}

	// The script writes every kind of figure as the server does.
	cases, err := json.Marshal(statuspagetest.FormatCases())
	if err != nil {
		t.Fatal(err)
	}
	got := onPage(t, b, chromedp.Evaluate[[]string](`(`+string(cases)+`).map(c => window.weirStatus.fmt[c.Kind](c.Value))`))
	for i, c := range statuspagetest.FormatCases() {
		if got[i] != c.Want {
			t.Errorf("status.js formats %s %v as %q, the server as %q", c.Kind, c.Value, got[i], c.Want)
		}
	}
	shot(t, b, "status-healthy.png")

	// Stall the sink: the page shows it within the bound, unreloaded.
	onPage(t, b, chromedp.Evaluate[chromedp.Void](`window.__weirNotReloaded = true`))
	proxy.Stall()
	stalled := time.Now()
	degraded := `(() => {
		const row = document.querySelector('[data-list="sinks"] > tr');
		const state = document.querySelector('[data-k="flow.state"]').textContent;
		return !!row && /lvl-(warn|bad)/.test(row.className) && !row.querySelector('[data-k="health"]').textContent.startsWith('healthy')
			&& (state === 'degraded' || state === 'critical') && window.__weirNotReloaded === true; })()`
	_, err = chromedp.Run(b.ctx, chromedp.Poll[bool](degraded, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(statusStallBound)))
	took := time.Since(stalled)
	fig = onPage(t, b, chromedp.Evaluate[map[string]string](pageFigures))
	sinks = onPage(t, b, chromedp.Evaluate[[]map[string]string](pageRows("sinks")))
	if err != nil {
		t.Errorf("%v after the sink stalled the page shows flow %q and sinks %v; want the row unhealthy and the state degraded or critical within %v (%v)",
			took.Round(time.Millisecond), fig["flow.state"], sinks, statusStallBound, err)
	} else {
		t.Logf("stalled sink on the page after %v: flow %s, sink %s", took.Round(time.Millisecond), fig["flow.state"], sinks[0]["health"])
	}
	shot(t, b, "status-stalled.png")
	if p := os.Getenv("WEIR_STATUS_SCREENSHOT"); p != "" {
		// For docs/images/status.png: the page with a stalled sink.
		if err := os.WriteFile(p, onPage(t, b, chromedp.FullScreenshot(100)), 0o644); err != nil {
			t.Error(err)
		}
	}

	// Nothing the page logged, nothing it asked for beyond the daemon.
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.console {
		t.Errorf("the page logged: %s", c)
	}
	for _, r := range b.requests {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "data" && u.Host != origin) {
			t.Errorf("the page asked for %s: only %s may be asked", r, origin)
		}
	}
	if len(b.requests) < 5 {
		t.Errorf("the page made %d requests (%v): its refreshes were not seen", len(b.requests), b.requests)
	}
}

// shot writes a screenshot of the whole page to the test's artifact
// directory (go test -artifacts keeps it; see docs/testing.md).
func shot(t *testing.T, b *browser, name string) {
	t.Helper()
	png := onPage(t, b, chromedp.FullScreenshot(100))
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestStatusPageRefusesOpenAdmin: a metrics endpoint beyond loopback
// whose admin routes have no authentication stops the start, naming the
// ways out; with the HTTP door's token file the page answers 401 without
// a token, 403 to a producer's (push scope) and 200 to an admin token,
// while /metrics and /ready stay open.
func TestStatusPageRefusesOpenAdmin(t *testing.T) {
	_, stderr, code := weirCmd(t, nil, "serve", "--data-dir", t.TempDir(), "--metrics-bind", "0.0.0.0",
		"--metrics-port", fmt.Sprint(freePort(t)), "--http-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if code == 0 || !strings.Contains(stderr, "metrics_bind") || !strings.Contains(stderr, "metrics_allow_unauthenticated") {
		t.Fatalf("weir serve with open admin routes: exit %d\n%s", code, stderr)
	}

	line := func(tok, rest string) string {
		sum := sha256.Sum256([]byte(tok))
		return hex.EncodeToString(sum[:]) + " " + rest + "\n"
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(line("operator-token", "operator scopes=admin")+line("producer-token", "producer")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "--metrics-bind", "0.0.0.0", "--http-token-file", tokens)
	d.start()
	defer d.stop(15 * time.Second)
	get := func(path, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", d.metricsPort, path), nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/status", "", 401},
		{"/status.json", "Bearer wrong", 401},
		{"/status", "Bearer producer-token", 403},
		{"/status", "Bearer operator-token", 200},
		{"/status.json", "Bearer operator-token", 200},
		{"/metrics", "", 200},
		{"/ready", "", 200},
	} {
		if got := get(c.path, c.auth); got != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, c.auth, got, c.want)
		}
	}
}
