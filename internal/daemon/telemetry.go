package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/lifecycle"
	"github.com/weir-io/weir/internal/metrics"
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
	fc  *flowControl  // the memory budget and the flow controller
	dq  *quality      // the data contracts; nil without [[contract]]
	co  *coordination // the coordination cluster; nil with coordination.mode = 0
	tap *tap.Hub      // the tap points (weir tap), served on the metrics endpoint
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
	t.tap = tap.NewHub(m.Tap())
	if cfg.MetricsPort == 0 {
		log.Info("metrics endpoint disabled (metrics_port = 0)")
	} else {
		srv, err := metrics.Listen(ctx, metrics.ServerOptions{
			Addr:     net.JoinHostPort(cfg.MetricsBind, strconv.Itoa(cfg.MetricsPort)),
			Registry: reg,
			Health:   t.h,
			Logger:   log,
			Pprof:    cfg.DebugPprof,
			Admin:    map[string]http.Handler{tap.Route: tap.Handler(t.tap, base.With("component", "tap"))},
		})
		if err != nil {
			return nil, fmt.Errorf("metrics endpoint (metrics_bind, metrics_port): %w", err)
		}
		t.srv = srv
		st.Push("metrics endpoint", srv.Shutdown)
	}
	t.fc = startFlow(cfg, m, base, stuckFrom(ctx))
	st.PushClose("flow control", func() error { t.fc.close(); return nil })
	t.h.WatchStuck(t.fc.ctl)
	err := st.Start("coordination", func() (lifecycle.StopFunc, error) {
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
