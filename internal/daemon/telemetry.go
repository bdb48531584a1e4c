package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/metrics"
	"github.com/weir-io/weir/internal/vfs"
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
	fc  *flowControl // the memory budget and the flow controller
}

// startTelemetry makes the metrics and, unless metrics_port is 0, binds
// the endpoint; failing to bind is a start-up error. The daemon is not
// ready — for the reason notReady gives — until ready is called.
func startTelemetry(ctx context.Context, cfg *config.Config, log *slog.Logger, notReady string) (*telemetry, error) {
	base := log
	log = log.With("component", "metrics")
	m, reg := metrics.New(metrics.Config{Shards: cfg.Shards, Sink: cfg.Sink.Type, DeadLetterMaxBytes: cfg.DeadLetterMaxBytes})
	t := &telemetry{m: m, reg: reg, h: metrics.NewHealth(cfg.LiveStallTimeout, log), log: log}
	t.h.NotReady(notReady)
	t.fc = startFlow(cfg, m, base, stuckFrom(ctx))
	t.h.WatchStuck(t.fc.ctl)
	if cfg.MetricsPort == 0 {
		log.Info("metrics endpoint disabled (metrics_port = 0)")
		return t, nil
	}
	srv, err := metrics.Listen(ctx, metrics.ServerOptions{
		Addr:     net.JoinHostPort(cfg.MetricsBind, strconv.Itoa(cfg.MetricsPort)),
		Registry: reg,
		Health:   t.h,
		Logger:   log,
		Pprof:    cfg.DebugPprof,
	})
	if err != nil {
		t.fc.close()
		return nil, fmt.Errorf("metrics endpoint (metrics_bind, metrics_port): %w", err)
	}
	t.srv = srv
	return t, nil
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

// stop closes the endpoint; it is the last thing the daemon does.
func (t *telemetry) stop() {
	t.fc.close()
	if t.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := t.srv.Shutdown(ctx); err != nil {
		t.log.Warn("closing metrics endpoint", "err", err)
	}
}
