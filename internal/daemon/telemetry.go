package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/httpin"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/statuspage"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/source"
	"github.com/weir-io/weir/wab"
)

// telemetry is the daemon's metrics, health state and their HTTP endpoint
// (nil srv when metrics_port is 0).
type telemetry struct {
	m   *metrics.Metrics
	reg prometheus.Registerer // the per-instance registry, for components
	h   *metrics.Health
	srv *metrics.Server
	log *slog.Logger
	// door is the HTTP door's credentials, for the door and the admin
	// routes of the metrics endpoint.
	door doorAuth
	fc   *flowControl  // the memory budget and the flow controller
	dq   *quality      // the data contracts; nil without [[contract]]
	co   *coordination // the coordination cluster; nil with coordination.mode = 0
	tap  *tap.Hub      // the tap points (weir tap), served on the metrics endpoint
}

// startTelemetry makes the metrics and, unless metrics_port is 0, binds
// the endpoint (failing to bind is a start-up error), then starts flow
// control, coordination and the data contracts, each a part of st. The
// endpoint starts first so that it stops last: shutdown stays visible to
// a scraper. The daemon is not ready — for the reason notReady gives —
// until ready is called.
func startTelemetry(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, fs vfs.FS, log *slog.Logger, notReady string) (*telemetry, error) {
	base := log
	log = log.With("component", "metrics")
	m, reg := metrics.New(metrics.Config{Shards: cfg.Shards, Sink: cfg.Sink.Type, DeadLetterMaxBytes: cfg.DeadLetterMaxBytes})
	t := &telemetry{m: m, reg: reg, h: metrics.NewHealth(cfg.LiveStallTimeout, log), log: log}
	t.h.NotReady(notReady)
	door, err := loadDoorAuth(st, cfg, base)
	if err != nil {
		return nil, err
	}
	t.door = door
	t.tap = tap.NewHub(m.Tap())
	if cfg.MetricsPort == 0 {
		log.Info("metrics endpoint disabled (metrics_port = 0)")
	} else if err := t.listen(ctx, st, cfg, reg); err != nil {
		return nil, err
	}
	t.fc = startFlow(cfg, m, base, stuckFrom(ctx))
	st.PushClose("flow control", func() error { t.fc.close(); return nil })
	t.h.WatchStuck(t.fc.ctl)
	err = st.Start("coordination", func() (lifecycle.StopFunc, error) {
		co, err := startCoordination(ctx, cfg, t.fc, reg, base)
		t.co = co
		// A claim or check-in that cannot be revoked (no quorum left)
		// lapses after its TTL: logged, not a failed shutdown.
		return logOnly(co.close, base, "leaving the coordination cluster"), err
	})
	if err != nil {
		return nil, err
	}
	return t, st.Start("contracts", func() (lifecycle.StopFunc, error) {
		dq, err := openQuality(ctx, cfg, fs, m, base)
		t.dq = dq
		// Closing flushes the dq-audit trail and closes the dedup stores;
		// every outcome a commit covered is already durable in the trail.
		return logOnly(dq.close, base, "closing the data contracts (dq-audit trail, dedup stores)"), err
	})
}

// listen starts the status page's sampler and binds the metrics
// endpoint with its admin routes (the page; pprof with debug_pprof),
// authenticated beyond loopback by the HTTP door's credentials. The
// sampler stops after the endpoint, so the page stays right to the end.
// adminRoutes are the metrics endpoint's admin routes: the status page's
// and the taps'.
func (t *telemetry) adminRoutes(page *statuspage.Page) map[string]http.Handler {
	routes := page.Routes()
	routes[tap.Route] = tap.Handler(t.tap, t.log.With("component", "tap"))
	return routes
}

func (t *telemetry) listen(ctx context.Context, st *lifecycle.Stack, cfg *config.Config, reg *prometheus.Registry) error {
	host, _ := os.Hostname()
	ring, _ := ctx.Value(logRingKey{}).(*statuspage.LogRing)
	page, err := statuspage.New(statuspage.Options{
		Info:     statuspage.Info{Host: host, ConfigFile: cfg.File, Started: time.Now(), SinkLogName: primaryLogName(cfg)},
		Gatherer: reg,
		Health:   t.h,
		Logs:     ring,
		Logger:   t.log,
	})
	if err != nil {
		return err
	}
	pctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); page.Run(pctx) }()
	st.PushClose("status page", func() error { stop(); <-done; return nil })

	opts := metrics.ServerOptions{
		Addr:                      net.JoinHostPort(cfg.MetricsBind, strconv.Itoa(cfg.MetricsPort)),
		Registry:                  reg,
		Health:                    t.h,
		Logger:                    t.log,
		Pprof:                     cfg.DebugPprof,
		Admin:                     t.adminRoutes(page),
		AllowUnauthenticatedAdmin: cfg.MetricsAllowUnauthenticated,
	}
	if cfg.AdminAuthenticated() {
		auth := httpin.AdminAuth(t.door.tokens)
		opts.AdminAuth = func(r *http.Request) error {
			err := auth(r)
			if errors.Is(err, httpin.ErrScope) { // a push token: known, not allowed
				return fmt.Errorf("%w: %w", metrics.ErrForbidden, err)
			}
			return err
		}
	}
	if cfg.MetricsTLS {
		opts.TLS = t.door.tls.OptionalClientConfig()
	}
	srv, err := metrics.Listen(ctx, opts)
	if err != nil {
		return fmt.Errorf("metrics endpoint (metrics_bind, metrics_port): %w", err)
	}
	t.srv = srv
	st.Push("metrics endpoint", srv.Shutdown)
	return nil
}

// logOnly is stop whose error is logged, not returned: for parts whose
// failure to stop cleanly loses nothing and has a fallback of its own.
// Abandoning one at the deadline is still an error of the shutdown.
func logOnly(stop lifecycle.StopFunc, log *slog.Logger, what string) lifecycle.StopFunc {
	return func(ctx context.Context) error {
		if err := stop(ctx); err != nil {
			log.Warn(what, "err", err)
		}
		return nil
	}
}

// watchWAB derives the write-ahead buffer gauges from disk and adds the
// flushers to the liveness check. Call before the drain starts.
func (t *telemetry) watchWAB(fs vfs.FS, l *wab.Log) {
	if err := t.m.WatchWAB(fs, l); err != nil {
		t.log.Error("cannot derive write-ahead buffer gauges from disk", "err", err)
	}
	t.h.WatchFlushers(l)
	t.h.NotReady("starting the sink, the drain and the listeners")
}

// watchDrain sets the dead-letter gauges and adds the drain to the
// liveness check.
func (t *telemetry) watchDrain(d *drain.Drain) {
	t.m.WatchDrain(d)
	t.h.WatchDrain(d)
}

// addSource lets flow control, and the breaker of the source's contract,
// pause the source called name (when p is not nil): it is paused while
// either wants it paused. The function returned forgets it once the
// source has stopped.
func (t *telemetry) addSource(name string, p source.Pausable) (remove func()) {
	if p == nil {
		return func() {}
	}
	v := source.NewVotes(p)
	t.dq.bindSource(name, v.Voter("breaker"))
	return t.fc.addSource(name, v.Voter("flow"))
}
