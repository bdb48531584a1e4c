package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/html"

	"github.com/weir-io/weir/internal/statuspage/statuspagetest"
)

// richSnapshot is a snapshot with every list filled.
func richSnapshot(t *testing.T) Snapshot {
	ring := NewLogRing(8)
	ring.add(LogEntry{Time: t0, Level: "WARN", Msg: "transient sink error, retrying", Sink: "raw", Attrs: `err="x <b>y</b>"`})
	ring.add(LogEntry{Time: t0.Add(time.Second), Level: "ERROR", Msg: "sink unhealthy", Attrs: "state=down"})
	ps := []point{{t0, "normal", 0.1}, {t0.Add(5 * time.Second), "degraded", 0.5}}
	return build(inputs{info: Info{Host: "node-a", Started: t0, SinkLogName: "raw"},
		base: reading{at: t0, set: parse(t, base)}, now: reading{at: t0.Add(10 * time.Second), set: parse(t, later)},
		logs: ring, points: ps, timeline: time.Minute})
}

// TestRenderMatchesJSON: every figure of the first paint is its
// status.json value in its element's format — the same keys and formats
// the page's script refreshes it with — so the page reads the same before
// and after the first refresh.
func TestRenderMatchesJSON(t *testing.T) {
	s := richSnapshot(t)
	var page bytes.Buffer
	if err := render(&page, s); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(js, &data); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(page.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]*html.Node{}
	checked := 0
	var walk func(n *html.Node, scope any, inTemplate bool)
	walk = func(n *html.Node, scope any, inTemplate bool) {
		if n.Type == html.ElementNode {
			if n.Data == "template" {
				templates[attr(n, "id")] = n
				inTemplate = true
			}
			if k, ok := attrOK(n, "data-k"); ok && !inTemplate {
				v, found := lookup(scope, k)
				if !found {
					t.Errorf("data-k %q: no such key in status.json", k)
				} else if got, want := text(n), format(attr(n, "data-f"), v); got != want {
					t.Errorf("data-k %q: first paint %q, the script would write %q", k, got, want)
				}
				checked++
			}
			if k, ok := attrOK(n, "data-level"); ok {
				if v, found := lookup(scope, k); !found || !strings.Contains(attr(n, "class"), "lvl-"+v.(string)) {
					t.Errorf("data-level %q: class %q, value %v", k, attr(n, "class"), v)
				}
			}
			if k, ok := attrOK(n, "data-list"); ok && !inTemplate {
				items, _ := lookup(scope, k)
				list, _ := items.([]any)
				if len(list) == 0 {
					t.Errorf("data-list %q: the rich snapshot has no rows", k)
				}
				i := 0
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type != html.ElementNode {
						continue
					}
					if i >= len(list) {
						t.Errorf("data-list %q: more rows than items", k)
						break
					}
					walk(c, list[i], false)
					i++
				}
				if i != len(list) {
					t.Errorf("data-list %q: %d rows for %d items", k, i, len(list))
				}
				if _, ok := templates["tpl-"+k]; !ok && findTemplate(doc, "tpl-"+k) == nil {
					t.Errorf("data-list %q has no template tpl-%s for the script", k, k)
				}
				return
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, scope, inTemplate)
		}
	}
	walk(doc, data, false)
	if checked < 60 {
		t.Errorf("only %d figures checked", checked)
	}
	// The templates' keys exist in an item of their list.
	for id, tpl := range templates {
		key := strings.TrimPrefix(id, "tpl-")
		items, _ := lookup(data, key)
		list, _ := items.([]any)
		if len(list) == 0 {
			continue
		}
		var keys func(n *html.Node)
		keys = func(n *html.Node) {
			if k, ok := attrOK(n, "data-k"); ok {
				if _, found := lookup(list[0], k); !found {
					t.Errorf("template %s: data-k %q is not a key of its items", id, k)
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				keys(c)
			}
		}
		keys(tpl)
	}
	if !strings.Contains(page.String(), "x &lt;b&gt;y&lt;/b&gt;") {
		t.Error("a logged value is not escaped")
	}
}

func findTemplate(n *html.Node, id string) *html.Node {
	if n.Type == html.ElementNode && n.Data == "template" && attr(n, "id") == id {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findTemplate(c, id); f != nil {
			return f
		}
	}
	return nil
}

func attrOK(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func attr(n *html.Node, key string) string { v, _ := attrOK(n, key); return v }

func text(n *html.Node) string {
	var b strings.Builder
	var f func(*html.Node)
	f = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			f(c)
		}
	}
	f(n)
	return b.String()
}

func lookup(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// TestFormats: each kind of figure, as the page writes it (status.js
// has the same table; the browser test checks it against this one).
func TestFormats(t *testing.T) {
	for _, tt := range statuspagetest.FormatCases() {
		if got := format(tt.Kind, tt.Value); got != tt.Want {
			t.Errorf("format(%q, %v) = %q, want %q", tt.Kind, tt.Value, got, tt.Want)
		}
	}
}

type fakeHealth struct{ ready error }

func (fakeHealth) Liveness() error     { return nil }
func (h fakeHealth) Readiness() error  { return h.ready }
func (fakeHealth) Degradation() string { return "" }

func TestRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_flow_state", Help: "h"}, []string{"state"})
	reg.MustRegister(state)
	state.WithLabelValues("normal").Set(1)
	state.WithLabelValues("degraded").Set(0)
	p, err := New(Options{Gatherer: reg, Health: fakeHealth{}, Logs: NewLogRing(4), Interval: 10 * time.Millisecond, Info: Info{Host: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	mux := http.NewServeMux()
	for pattern, h := range p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string, hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, path := range []string{"/", "/status"} {
		resp, body := get(path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
			resp.Header.Get("Content-Security-Policy") != contentSecurityPolicy || !strings.Contains(body, `<strong data-k="flow.state" data-f="text">normal</strong>`) {
			t.Errorf("GET %s: %d %v\n%s", path, resp.StatusCode, resp.Header, body)
		}
	}
	resp, body := get("/status.json")
	if strings.Contains(body, "null") {
		t.Errorf("status.json holds a null (a list must be [] for the script): %s", body)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil || resp.Header.Get("Content-Type") != "application/json" || s.Flow.State != "normal" {
		t.Errorf("GET /status.json: %v %v %+v", err, resp.Header, s.Flow)
	}
	resp, _ = get("/status.js")
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || etag == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET /status.js: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := get("/status.js", "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET /status.js again: %d, want 304", resp.StatusCode)
	}
	if resp, _ := get("/status.css"); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") {
		t.Errorf("GET /status.css: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := get("/elsewhere"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /elsewhere: %d, want 404 (the page is at / only)", resp.StatusCode)
	}

	// The sampler fills the timeline; a change shows at the next request.
	deadline := time.Now().Add(5 * time.Second)
	for p.points.Len() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the sampler does not tick")
		}
		time.Sleep(5 * time.Millisecond)
	}
	state.WithLabelValues("normal").Set(0)
	state.WithLabelValues("degraded").Set(1)
	time.Sleep(freshAfter)
	if got := p.Snapshot(); got.Flow.State != "degraded" || len(got.Timeline.Runs) == 0 || got.Window <= 0 {
		t.Errorf("after the change: %+v, timeline %+v, window %v", got.Flow, got.Timeline.Runs, got.Window)
	}
}

func TestNewNeedsSources(t *testing.T) {
	if _, err := New(Options{Health: fakeHealth{}}); err == nil {
		t.Error("New without a Gatherer")
	}
	if _, err := New(Options{Gatherer: prometheus.NewRegistry()}); err == nil {
		t.Error("New without a Health")
	}
}
