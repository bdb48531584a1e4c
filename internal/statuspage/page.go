// Package statuspage serves the daemon's live status page: GET / and
// GET /status (HTML, readable as first painted, without JavaScript),
// GET /status.json (the same figures), and the page's stylesheet and
// script, all embedded — no CDN, no framework. The script refreshes the
// figures from /status.json every second without reloading the page.
//
// The figures come from the daemon's own metrics registry, gathered
// every second (rates are differences between gathers), from its health
// checks, and from a ring of the last warnings and errors logged
// (LogRing). The flow state of the last ten minutes is kept in a ring of
// one point per gather. The package registers nothing and knows nothing
// of the daemon beyond those three interfaces; docs/monitoring.md
// describes the page.
package statuspage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/readout"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultWindow   = 10 * time.Second
	DefaultTimeline = 10 * time.Minute
)

// freshAfter is how old the last reading may be for a request to use it
// as is; an older one is replaced by a gather at request time, so a
// change shows on the page within its refresh, not a tick later.
const freshAfter = 250 * time.Millisecond

// Info is what the page says about the node that the metrics do not.
type Info struct {
	Host       string
	ConfigFile string // the TOML file read; "" when none
	Started    time.Time
	// SinkLogName is the sink attribute the [sink]'s log lines carry
	// (its kind, or "raw" as primary raw): its last error is looked up
	// under it.
	SinkLogName string
}

// Health is the daemon's health checks (*metrics.Health).
type Health interface {
	Liveness() error
	Readiness() error
	Degradation() string
}

// Options configure New.
type Options struct {
	Info     Info
	Gatherer prometheus.Gatherer // the daemon's registry; required
	Health   Health              // required
	Logs     *LogRing            // nil: no log section
	Interval time.Duration       // between gathers; default DefaultInterval
	Window   time.Duration       // of rates and latencies; default DefaultWindow
	Timeline time.Duration       // of the flow-state timeline; default DefaultTimeline
	Now      func() time.Time    // default time.Now
	Logger   *slog.Logger        // nil discards
}

// Page is the status page of one daemon.
type Page struct {
	opts   Options
	log    *slog.Logger
	recent *Ring[reading] // the readings of the last Window
	points *Ring[point]   // the timeline

	mu    sync.Mutex // serialises gathers at request time
	fresh reading    // the last gather made for a request
}

// New makes the page; Run keeps it sampling.
func New(opts Options) (*Page, error) {
	if opts.Gatherer == nil || opts.Health == nil {
		return nil, errors.New("statuspage: New needs a Gatherer and a Health")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Window < opts.Interval {
		opts.Window = max(DefaultWindow, opts.Interval)
	}
	if opts.Timeline <= 0 {
		opts.Timeline = DefaultTimeline
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Page{
		opts:   opts,
		log:    log,
		recent: NewRing[reading](int(opts.Window/opts.Interval) + 1),
		points: NewRing[point](int(opts.Timeline / opts.Interval)),
	}, nil
}

// Run gathers every Interval, keeping the window and the timeline, until
// ctx ends.
func (p *Page) Run(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	p.tick()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.tick()
		}
	}
}

// tick gathers once into the window and the timeline.
func (p *Page) tick() {
	r := p.gather()
	p.recent.Push(r)
	budget := ratio(r.set.Sum("weir_memory_budget_in_use_bytes", nil), r.set.Sum("weir_memory_budget_bytes", nil))
	p.points.Push(point{at: r.at, state: orDash(strings.Join(r.set.LabelsWhere("weir_flow_state", "state", one), ",")), budget: budget})
}

// gather reads the registry's weir_ families (the Go runtime's and the
// process's are left to /metrics). A collector's error is logged and the
// rest used.
func (p *Page) gather() reading {
	fams, err := p.opts.Gatherer.Gather()
	if err != nil {
		p.log.Debug("status page: gathering metrics", "err", err)
	}
	keep := fams[:0:0]
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "weir_") {
			keep = append(keep, f)
		}
	}
	return reading{at: p.opts.Now(), set: readout.FromFamilies(keep)}
}

// Snapshot is the node's state now.
func (p *Page) Snapshot() Snapshot {
	rs := p.recent.Items()
	now := p.opts.Now()
	var cur, base reading
	if n := len(rs); n > 0 && now.Sub(rs[n-1].at) < freshAfter {
		cur = rs[n-1]
		rs = rs[:n-1]
	} else {
		p.mu.Lock()
		if now.Sub(p.fresh.at) >= freshAfter {
			p.fresh = p.gather()
		}
		cur = p.fresh
		p.mu.Unlock()
	}
	if len(rs) > 0 {
		base = rs[0]
	}
	var recent reading
	for i := len(rs) - 1; i >= 0; i-- {
		if cur.at.Sub(rs[i].at) >= recentSpan {
			recent = rs[i]
			break
		}
	}
	h := healthState{live: p.opts.Health.Liveness(), ready: p.opts.Health.Readiness(), degraded: p.opts.Health.Degradation()}
	return build(inputs{info: p.opts.Info, now: cur, base: base, recent: recent, health: h, logs: p.opts.Logs,
		points: p.points.Items(), timeline: p.opts.Timeline})
}

// Routes are the page's routes (http.ServeMux patterns) and handlers,
// for metrics.ServerOptions.Admin.
func (p *Page) Routes() map[string]http.Handler {
	html := http.HandlerFunc(p.serveHTML)
	return map[string]http.Handler{
		"GET /{$}":         html,
		"GET /status":      html,
		"GET /status.json": http.HandlerFunc(p.serveJSON),
		"GET /status.css":  asset("status.css", "text/css; charset=utf-8"),
		"GET /status.js":   asset("status.js", "text/javascript; charset=utf-8"),
	}
}

// contentSecurityPolicy lets the page load nothing but its own
// stylesheet, script and /status.json.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func secure(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

func (p *Page) serveHTML(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	err := render(&b, p.Snapshot())
	p.respond(w, "text/html; charset=utf-8", b.Bytes(), err)
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(p.Snapshot())
	p.respond(w, "application/json", b, err)
}

// respond writes body, or a 500 for err, never half a page.
func (p *Page) respond(w http.ResponseWriter, contentType string, body []byte, err error) {
	if err != nil {
		p.log.Error("status page", "err", err)
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	secure(w.Header())
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Write(body)
}

// asset serves an embedded file, revalidated by its hash (a restart on a
// new version never leaves a browser with the old script).
func asset(name, contentType string) http.Handler {
	body, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic(fmt.Sprintf("statuspage: embedded asset %s: %v", name, err))
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w.Header())
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
	})
}
